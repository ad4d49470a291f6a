"""Fuzz: hostile tokenizer.json and tokenizer_config.json files in a model directory, each fed to
`lmlab generate` (and some to `lmlab train --tokenizer`): normalizer, pre-tokenizer, post-processor and
decoder bombs, regexes that backtrack without bound, oversized tables and added tokens, nesting, files
that made the library panic, and special tokens the vocabulary lacks. Each must be one clean error before any
large allocation; tokenizers laid out as the published ones must still work."""

import json
import shutil

import pytest

from encoder_data import tiny_encoder_dir
from fuzz.inputs import chat_tokenizer, data_files, save_model_dir, tiny_decoder
from fuzz.oracle import run_cli
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)
from published_tokenizers import REAL_STYLE

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY = "tokenizer_json"
PROMPT = "a" * 40 + "b what is 2 + 3?"  # the regex catastrophe needs "a"*40+"b"
TINY_TRAIN = ["--model", "gpt2-tiny", "--vocab-size", "302", "--context-length", "32", "--n-layers", "1",
              "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--max-steps", "1", "--batch-size", "2",
              "--block-size", "16", "--eval-every", "1", "--warmup-steps", "1"]


def generate(directory, prompt: str = PROMPT) -> list:
    return ["generate", "--model", directory, "--prompt", prompt, "--max-new-tokens", "3", "--greedy"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The clean model directory, its tokenizer.json parsed, a text file, and generate's clean output."""
    root = tmp_path_factory.mktemp("tokenizer_files")
    tokenizer = chat_tokenizer()
    directory = save_model_dir(root / "llama", tiny_decoder("llama", tokenizer.vocab_size), tokenizer)
    run = run_cli(generate(directory))
    assert run.code == 0, run.err
    return {"dir": directory, "json": json.loads((directory / "tokenizer.json").read_text()),
            "text": data_files(root / "data")["text"], "output": run.out}


def replace(content: str, pattern: dict | None = None) -> dict:
    return {"type": "Replace", "pattern": pattern or {"String": "a"}, "content": content}


def split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def sequence(kind: str, steps: list) -> dict:
    return {"type": "Sequence", kind: steps}


def nested(depth: int) -> dict:
    node = {"type": "NFC"}
    for _ in range(depth):
        node = sequence("normalizers", [node])
    return node


def added(content: str, token_id: int) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
TEMPLATE = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}] * 5000,
            "pair": [], "special_tokens": {}}
BOMBS = {  # tokenizer.json field -> value; each must be refused
    "replace_content_1m": {"normalizer": replace("x" * 1_000_000)},  # the issue's: 20.5 GB after 82 s
    "replace_content_10k": {"normalizer": replace("x" * 10_000)},
    "replace_content_17": {"normalizer": replace("x" * 17)},
    "replace_chain_3x3x3": {"normalizer": sequence("normalizers", [replace("xxx")] * 3)},
    "replace_regex_between_characters": {"normalizer": replace("x" * 16, {"Regex": ""})},
    "prepend_huge": {"normalizer": {"type": "Prepend", "prepend": "▁" * 100_000}},
    "precompiled_charsmap_huge": {"normalizer": {"type": "Precompiled", "precompiled_charsmap": "A" * (5 << 20)}},
    "normalizer_nesting_40": {"normalizer": nested(40)},
    "normalizer_5000_steps": {"normalizer": sequence("normalizers", [{"type": "NFC"}] * 5000)},
    "split_alternation_repeated": {"pre_tokenizer": split("(a|a)+$")},  # the issue's: a PanicException
    "split_nested_repetition": {"pre_tokenizer": split("(a+)+$")},
    "split_dot_star_group": {"pre_tokenizer": split("(.*a){20}")},
    "split_three_unbounded": {"pre_tokenizer": split(r"\s*\s*\s*$")},
    "split_backreference": {"pre_tokenizer": split(r"(a*)\1")},
    "split_in_sequence": {"pre_tokenizer": sequence("pretokenizers", [split("(a|b)*c"), BYTE_LEVEL])},
    "split_pattern_10k": {"pre_tokenizer": split("a" * 10_000)},
    "split_syntax_error": {"pre_tokenizer": split("(a")},
    "template_unknown_special": {"post_processor": {
        "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}},
                                                 {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {}}},
    "replace_regex_unsafe": {"normalizer": replace("b", {"Regex": "(a*)*b"})},
    "decoder_replace_1000": {"decoder": replace("y" * 1000, {"String": "a"})},
    "decoder_nesting_40": {"decoder": nested(40)},
    "template_5000_pieces": {"post_processor": TEMPLATE},
    "added_tokens_70000": {"added_tokens": [added(f"<t{i}>", 400 + i) for i in range(70_000)]},
    "added_token_5000_chars": {"added_tokens": [added("z" * 5000, 400)]},
    "added_token_id_1e12": {"added_tokens": [added("<z>", 10**12)]},
}
VALID = {  # settings a file may hold that lmlab does not use: the output must be the clean one
    "padding_fixed_1e9": {"padding": {"strategy": {"Fixed": 10**9}, "direction": "Right", "pad_to_multiple_of": None,
                                      "pad_id": 0, "pad_type_id": 0, "pad_token": "<|pad|>"}},
    "truncation_to_1": {"truncation": {"direction": "Right", "max_length": 1, "strategy": "LongestFirst",
                                       "stride": 0}},
}
CONFIG_EDITS = {  # tokenizer_config.json key -> value naming a token the vocabulary lacks
    "eos_token_nope": ("eos_token", "<nope>"),
    "bos_token_nope": ("bos_token", "<nope>"),
    "pad_token_nope": ("pad_token", {"content": "<nope>"}),
    "stop_tokens_nope": ("stop_tokens", ["<|im_end|>", "<nope>"]),
}


def edited(clean, tmp_path, fields: dict):
    directory = shutil.copytree(clean["dir"], tmp_path / "model")
    (directory / "tokenizer.json").write_text(json.dumps(clean["json"] | fields))
    return directory


@pytest.mark.parametrize("bomb", BOMBS)
def test_tokenizer_json_bomb(clean, tmp_path, bomb):
    outcome = probe(FAMILY, bomb, generate(edited(clean, tmp_path, BOMBS[bomb])), clean["output"])
    assert outcome.kind == "clean_error" and "tokenizer" in outcome.detail, outcome.detail


@pytest.mark.parametrize("bomb", ["replace_content_1m", "split_alternation_repeated", "added_token_5000_chars"])
def test_tokenizer_json_bomb_given_to_train(clean, tmp_path, bomb):
    directory = edited(clean, tmp_path, BOMBS[bomb])
    args = ["train", *TINY_TRAIN, "--tokenizer", directory / "tokenizer.json", "--data", clean["text"],
            "--out", tmp_path / "run"]
    outcome = probe(FAMILY, f"train:{bomb}", args, None)
    assert outcome.kind == "clean_error" and "tokenizer" in outcome.detail, outcome.detail


@pytest.mark.parametrize("setting", VALID)
def test_padding_and_truncation_in_the_file_change_nothing(clean, tmp_path, setting):
    probe(FAMILY, setting, generate(edited(clean, tmp_path, VALID[setting])), clean["output"], must_succeed=True)


@pytest.mark.parametrize("style", [s for s in REAL_STYLE if s != "t5_metaspace"])  # Metaspace needs "▁" tokens
def test_published_layouts_still_work(clean, tmp_path, style):
    fields = {k: v for k, v in REAL_STYLE[style].items() if k != "post_processor"}  # the model has no bos to add
    probe(FAMILY, f"published:{style}", generate(edited(clean, tmp_path, fields)), clean["output"],
          may_change=True, must_succeed=True)


def test_panics_inside_the_library_are_refused_at_load(clean, tmp_path):
    """`\\s*\\s*$` on 5,000 spaces passed Oniguruma's retry limit: a Rust panic. The pattern is now refused
    when the file is read (`tests/tokenizers/test_text.py` checks that a panic would be one line too)."""
    directory = edited(clean, tmp_path, {"pre_tokenizer": sequence("pretokenizers", [split(r"\s*\s*$"), BYTE_LEVEL])})
    outcome = probe(FAMILY, "panic_retry_limit", generate(directory, " " * 5000 + "x"), clean["output"])
    assert outcome.kind == "clean_error" and "can fail follows 2 unbounded" in outcome.detail, outcome.detail


def test_encoder_template_that_panicked(clean, tmp_path):
    """A BERT tokenizer whose template places a special token it does not define panicked in `embed`."""
    directory = tiny_encoder_dir(tmp_path / "bert")
    data = json.loads((directory / "tokenizer.json").read_text())
    data["post_processor"]["special_tokens"] = {}
    (directory / "tokenizer.json").write_text(json.dumps(data))
    outcome = probe(FAMILY, "embed:template_unknown_special", ["embed", "--model", directory, "--text", "hi", "--json"],
                    None)
    assert outcome.kind == "clean_error" and "TemplateProcessing places" in outcome.detail, outcome.detail


@pytest.mark.parametrize("edit", CONFIG_EDITS)
def test_special_token_the_vocabulary_lacks(clean, tmp_path, edit):
    directory = shutil.copytree(clean["dir"], tmp_path / "model")
    key, value = CONFIG_EDITS[edit]
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps(config | {key: value}))
    outcome = probe(FAMILY, edit, generate(directory), clean["output"])
    assert outcome.kind == "clean_error" and f"tokenizer_config.json: {key} '<nope>'" in outcome.detail, outcome.detail
