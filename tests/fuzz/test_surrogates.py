"""Fuzz: text that is not Unicode, lone surrogates (U+D800..U+DFFF), in every place lmlab takes user text:
a JSON escape ("ba\\ud800") in each JSON Lines data kind (texts, chats, preferences, table rows), in a key
or a value, the UTF-8-style bytes of a surrogate in a plain text file, bytes that are not UTF-8 in a
command-line prompt (Python reads them as surrogates), and a chat template that writes one. Each must be
one clean error naming the file and line where there is one, and nothing written."""

import json
import shutil

import pytest

from encoder_data import tiny_encoder_dir
from fuzz.inputs import chat_tokenizer, data_files, save_model_dir, tiny_decoder
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY = "surrogates"
TINY_TRAIN = ["--model", "gpt2-tiny", "--vocab-size", "302", "--context-length", "32", "--n-layers", "1",
              "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--max-steps", "1", "--batch-size", "2",
              "--block-size", "16", "--eval-every", "1", "--warmup-steps", "1"]
TINY_SFT = ["--max-steps", "1", "--batch-size", "2", "--block-size", "48", "--lora-rank", "2", "--eval-every", "1",
            "--task-eval-size", "1"]
ESCAPES = {"high": "\\ud800", "low": "\\udfff", "reversed_pair": "\\ude00\\ud83d"}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("surrogates")
    tokenizer = chat_tokenizer()
    return {"model": save_model_dir(root / "llama", tiny_decoder("llama", tokenizer.vocab_size), tokenizer),
            "encoder": tiny_encoder_dir(root / "bert"), **data_files(root / "data")}


def commands(clean, path, out) -> dict[str, list]:
    """reader -> the commands that read a file of that kind."""
    return {
        "jsonl_text": {"tokenizer_train": ["tokenizer", "train", "--data", path, "--vocab-size", "300", "--out", out],
                       "eval_perplexity": ["eval", "perplexity", "--model", clean["model"], "--data", path, "--json"],
                       "train": ["train", *TINY_TRAIN, "--tokenizer", clean["model"] / "tokenizer.json", "--data",
                                 path, "--out", out]},
        "chats": {"sft": ["sft", "--model", clean["model"], "--data", path, "--out", out, *TINY_SFT]},
        "prefs": {"dpo": ["dpo", "--model", clean["model"], "--data", path, "--out", out, *TINY_SFT]},
        "rows": {"finetune": ["finetune", "--model", clean["encoder"], "--task", "classify", "--data", path, "--out",
                              out, "--epochs", "1", "--batch-size", "4", "--max-length", "32"]},
    }


def value_with_surrogate(line: str, escape: str) -> str:
    """The JSON object `line` with `escape` added to the first string value found depth-first."""
    record = json.loads(line)
    marker = "@@SURROGATE@@"

    def mark(value):
        if isinstance(value, str):
            return "ba" + marker + value, True
        if isinstance(value, list):
            for i, item in enumerate(value):
                value[i], done = mark(item)
                if done:
                    return value, True
        if isinstance(value, dict):
            for key in value:
                value[key], done = mark(value[key])
                if done:
                    return value, True
        return value, False
    marked, _ = mark(record)
    return json.dumps(marked).replace(marker, escape)


def data_cases():
    for reader in ("jsonl_text", "chats", "prefs", "rows"):
        for command in {"jsonl_text": ["tokenizer_train", "eval_perplexity", "train"], "chats": ["sft"],
                        "prefs": ["dpo"], "rows": ["finetune"]}[reader]:
            for escape in ESCAPES:
                yield reader, command, escape, "value"
            yield reader, command, "high", "key"


def file_text(clean, reader: str, escape: str, where: str) -> str:
    lines = ([json.dumps({"text": f"the movie was {w}", "label": "pos" if w == "good" else "neg"})
              for w in ["good", "bad"] * 4] if reader == "rows" else clean[reader].read_text().splitlines())
    if where == "key":
        lines[1] = lines[1][:-1] + f', "extra{ESCAPES[escape]}": 1}}'
    else:
        lines[1] = value_with_surrogate(lines[1], ESCAPES[escape])
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("reader, command, escape, where", list(data_cases()))
def test_lone_surrogate_in_a_data_file(clean, tmp_path, reader, command, escape, where):
    path = tmp_path / f"{reader}.jsonl"
    path.write_text(file_text(clean, reader, escape, where), encoding="utf-8")
    out = tmp_path / "out"
    outcome = probe(FAMILY, f"{command}:{reader}:{where}:{escape}", commands(clean, path, out)[reader][command],
                    None, timeout=30)
    assert outcome.kind == "clean_error" and f"{path}:2 holds a lone surrogate" in outcome.detail, outcome.detail
    assert not out.exists(), f"{out} was written"


@pytest.mark.parametrize("command", ["tokenizer_train", "eval_perplexity"])
def test_surrogate_bytes_in_a_text_file(clean, tmp_path, command):
    """UTF-8's pattern applied to U+D800 (ED A0 80), as CESU-8 and some Java tools write: not UTF-8."""
    path = tmp_path / "text.txt"
    path.write_bytes(b"hello\nba\xed\xa0\x80\nmore\n")
    args = {"tokenizer_train": ["tokenizer", "train", "--data", path, "--vocab-size", "300", "--out", tmp_path / "o"],
            "eval_perplexity": ["eval", "perplexity", "--model", clean["model"], "--data", path, "--json"]}[command]
    outcome = probe(FAMILY, f"{command}:text:utf8_encoded_surrogate", args, None)
    assert outcome.kind == "clean_error" and f"{path}:2 is not UTF-8" in outcome.detail, outcome.detail


PROMPTS = {  # what Python makes of a command-line argument: bytes that are not UTF-8 become \udc80..\udcff
    "latin1_byte": "caf\udce9",
    "lone_high": "ba\ud800",
}


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("command", ["generate", "chat"])
def test_prompt_that_is_not_unicode(clean, command, prompt):
    args = [command, "--model", clean["model"], "--prompt", PROMPTS[prompt], "--max-new-tokens", "2", "--greedy"]
    outcome = probe(FAMILY, f"{command}:prompt:{prompt}", args, None)
    assert outcome.kind == "clean_error" and "lone surrogate" in outcome.detail, outcome.detail


def test_chat_template_that_writes_a_surrogate(clean, tmp_path):
    directory = shutil.copytree(clean["model"], tmp_path / "model")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}\ud800{% endfor %}"
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    args = ["chat", "--model", directory, "--prompt", "hi", "--max-new-tokens", "2", "--greedy"]
    outcome = probe(FAMILY, "chat:template_surrogate", args, None)
    assert outcome.kind == "clean_error" and "lone surrogate" in outcome.detail, outcome.detail


@pytest.mark.parametrize("key", ["eos_token", "stop_tokens", "chat_template"])
def test_lone_surrogate_in_tokenizer_config(clean, tmp_path, key):
    directory = shutil.copytree(clean["model"], tmp_path / "model")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config[key] = ["<|im_end|>\ud800"] if key == "stop_tokens" else "<|im_end|>\ud800"
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    args = ["generate", "--model", directory, "--prompt", "hi", "--max-new-tokens", "2", "--greedy"]
    outcome = probe(FAMILY, f"tokenizer_config:{key}", args, None)
    assert outcome.kind == "clean_error" and "tokenizer_config.json holds a lone surrogate" in outcome.detail, \
        outcome.detail
