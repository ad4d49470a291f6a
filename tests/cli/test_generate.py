"""`lmlab generate`, `lmlab chat` and `lmlab logprobs` end to end on a tiny random model: what they print
matches the library, and every bad input is one line, exit code 2, no traceback."""

import io
import json
import math

import pytest
import torch

from lmlab.data.markov import markov_corpus
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.load import load
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.post_training import PostTrainConfig, load_tunable

TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")

from conftest import lmlab, one_line_error


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Two copies of one tiny random GPT-2 with a BPE tokenizer: plain, and with a chat template."""
    backend = train_bpe(markov_corpus(100, seed=3)[0], 300)
    torch.manual_seed(0)
    model = build_decoder(preset("gpt2-tiny", vocab_size=backend.get_vocab_size(), context_length=64,
                                 n_layers=1, d_model=32, n_heads=2, d_ff=64)).eval()
    root = tmp_path_factory.mktemp("models")
    plain = save_hf_dir(model, root / "plain", backend)
    chat = save_hf_dir(model, root / "chat", backend)
    TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,), chat_template=TEMPLATE).save(chat)
    named = save_hf_dir(model, root / "named", backend)
    TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,), chat_template=TEMPLATE,
                  chat_templates={"default": TEMPLATE, "terse": TEMPLATE.replace("assistant", "A")}).save(named)
    foreign = save_hf_dir(model, root / "foreign", backend)  # a tokenizer that gives "Zini" an id the model lacks
    spec = json.loads((foreign / "tokenizer.json").read_text())
    spec["model"]["vocab"][backend.id_to_token(backend.encode("Zini").ids[0])] = 5000
    (foreign / "tokenizer.json").write_text(json.dumps(spec))
    return {"plain": plain, "chat": chat, "named": named, "foreign": foreign}





def library(path, prompt, **settings):
    model, tokenizer = load(path)
    config = GenerationConfig(eos_id=tokenizer.stop_ids, **settings)
    return generate_batch(model, [tokenizer.encode(prompt)], config, tokenizer)[0]


def test_generate_streams_the_prompt_and_its_continuation(model_dirs, capsys):
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--greedy",
                 "--max-new-tokens", 12) == 0
    expected = library(model_dirs["plain"], "Zini", max_new_tokens=12)
    assert capsys.readouterr().out == "Zini" + expected.text + "\n"


def test_generate_int4_says_once_why_a_model_is_not_fused(model_dirs, capsys, built_kernels):
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--greedy", "--dtype", "int4",
                 "--max-new-tokens", 3) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "fused" in line]
    assert len(said) == 1 and "GPT-2" in said[0]


def test_generate_json_has_text_new_token_ids_and_finish_reason(model_dirs, capsys):
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini pori", "--temperature", 0.9,
                 "--top-p", 0.9, "--top-k", 50, "--repetition-penalty", 1.2, "--seed", 4, "--max-new-tokens", 10,
                 "--json") == 0
    out = json.loads(capsys.readouterr().out)
    expected = library(model_dirs["plain"], "Zini pori", max_new_tokens=10, temperature=0.9, top_p=0.9, top_k=50,
                       repetition_penalty=1.2, seed=4)
    n_prompt = len(load(model_dirs["plain"])[1].encode("Zini pori"))
    assert out == {"text": expected.text, "token_ids": expected.token_ids, "finish_reason": expected.finish_reason,
                   "stop": expected.stop, "prompt_tokens": n_prompt}
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini pori", "--add-bos",
                 "--max-new-tokens", 4, "--json") == 0
    assert json.loads(capsys.readouterr().out)["prompt_tokens"] == n_prompt + 1


def test_generate_stop_string_cuts_the_text(model_dirs, capsys):
    free = library(model_dirs["plain"], "Zini", max_new_tokens=20, temperature=1.0, seed=2)
    stop = free.text[6:8]
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--seed", 2, "--max-new-tokens", 20,
                 "--stop", stop, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"] == free.text[:free.text.index(stop)]
    assert (out["finish_reason"], out["stop"]) == ("stop", stop)


def test_generate_beam_search(model_dirs, capsys):
    expected = library(model_dirs["plain"], "Zini", max_new_tokens=8, num_beams=3, length_penalty=0.5)
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--beams", 3,
                 "--length-penalty", 0.5, "--max-new-tokens", 8, "--json") == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == expected.token_ids
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--beams", 3,
                 "--length-penalty", 0.5, "--max-new-tokens", 8) == 0
    assert capsys.readouterr().out == "Zini" + expected.text + "\n"


@pytest.mark.parametrize("flags, fragment", [
    (["--temperature", "-1"], "--temperature -1.0 must be at least 0"),
    (["--top-p", "1.5"], "--top-p 1.5 must be in (0, 1]"),
    (["--top-p", "0"], "--top-p 0.0 must be in (0, 1]"),
    (["--top-k", "0"], "--top-k 0 must be at least 1"),
    (["--beams", "0"], "--beams 0 must be at least 1"),
    (["--max-new-tokens", "0"], "--max-new-tokens 0 must be at least 1"),
    (["--repetition-penalty", "0"], "--repetition-penalty 0.0 must be in [0.01, 100]"),
    (["--beams", "2", "--temperature", "0.7"], "beam search is deterministic"),
    (["--beams", "2", "--top-k", "5"], "beam search is deterministic"),
    (["--beams", "2", "--stop", "."], "stop strings work with step-by-step decoding only"),
    (["--greedy", "--top-p", "0.9"], "--top-p only apply when sampling"),
    (["--max-new-tokens", "60"], "exceeds the model's context of 64 tokens"),
])
def test_generate_bad_input_is_one_line_exit_2(model_dirs, capsys, flags, fragment):
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini pori teme", *flags) == 2
    one_line_error(capsys, fragment)


def test_prompt_beyond_context_is_one_line_exit_2(model_dirs, capsys):
    assert lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini pori teme. " * 30) == 2
    one_line_error(capsys, "exceeds the model's context of 64 tokens", "shorten the prompt")
    assert lmlab("logprobs", "--model", model_dirs["plain"], "--prompt", "Zini pori teme. " * 30) == 2
    one_line_error(capsys, "exceeds the model's context of 64 tokens")


def test_greedy_and_temperature_together_is_a_usage_error(model_dirs, capsys):
    with pytest.raises(SystemExit) as e:
        lmlab("generate", "--model", model_dirs["plain"], "--prompt", "Zini", "--greedy", "--temperature", "1")
    assert e.value.code == 2
    one_line_error(capsys, "--temperature", "--greedy")


@pytest.mark.parametrize("command", ["generate", "chat", "logprobs"])
def test_help_explains_the_command(command, capsys):
    with pytest.raises(SystemExit) as e:
        lmlab(command, "--help")
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--model" in out and "examples:" in out


def expected_chat(path, turns, system=None, max_new_tokens=8, template=None):
    """The replies the library gives to `turns`, each seeing the whole history (`template`: a named one)."""
    model, tokenizer = load(path)
    tokenizer = tokenizer.with_chat_template(template)
    messages = [{"role": "system", "content": system}] if system else []
    replies = []
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        config = GenerationConfig(max_new_tokens=max_new_tokens, eos_id=tokenizer.stop_ids,
                                  stop_strings=() if tokenizer.chat_template else ("\nUser:",))
        prompt = tokenizer.encode(chat_prompt(tokenizer, messages))
        replies.append(generate_batch(model, [prompt], config, tokenizer)[0].text.lstrip())
        messages.append({"role": "assistant", "content": replies[-1]})
    return replies


def test_chat_reads_turns_from_stdin_and_keeps_the_history(model_dirs, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Zini pori\n\nSegura teme\n/exit\nnever read\n"))
    assert lmlab("chat", "--model", model_dirs["chat"], "--greedy", "--max-new-tokens", 8) == 0
    replies = expected_chat(model_dirs["chat"], ["Zini pori", "Segura teme"])
    # Piped: each message echoed, each reply followed by a blank line, so the transcript shows the turns.
    assert capsys.readouterr().out == f"> Zini pori\n{replies[0]}\n\n> Segura teme\n{replies[1]}\n\n"
    alone = expected_chat(model_dirs["chat"], ["Segura teme"])
    assert alone != replies[1:]  # the second reply did depend on the first turn


def test_chat_prompt_answers_once_with_system_message(model_dirs, capsys):
    assert lmlab("chat", "--model", model_dirs["chat"], "--system", "Be brief.", "--prompt", "Zini?",
                 "--greedy", "--max-new-tokens", 8) == 0
    [reply] = expected_chat(model_dirs["chat"], ["Zini?"], system="Be brief.")
    assert capsys.readouterr().out == reply + "\n"


def test_chat_without_template_uses_plain_turns(model_dirs, capsys):
    assert lmlab("chat", "--model", model_dirs["plain"], "--prompt", "Zini?", "--greedy", "--max-new-tokens", 8) == 0
    [reply] = expected_chat(model_dirs["plain"], ["Zini?"])
    printed = capsys.readouterr()
    assert printed.out == reply + "\n" and "has no chat template; using plain 'User: … / Assistant: …' turns" in printed.err


def test_chat_that_fills_the_context_is_one_line_exit_2(model_dirs, capsys):
    assert lmlab("chat", "--model", model_dirs["chat"], "--system", "Zini pori teme. " * 30, "--prompt", "Hi") == 2
    one_line_error(capsys, "fills the model's context of 64 tokens")
    assert lmlab("chat", "--model", model_dirs["chat"], "--prompt", "Hi", "--top-p", "2") == 2
    one_line_error(capsys, "--top-p 2.0 must be in (0, 1]")


def test_logprobs_json_lists_the_top_tokens_best_first(model_dirs, capsys):
    assert lmlab("logprobs", "--model", model_dirs["plain"], "--prompt", "Zini pori", "--top", 5, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    model, tokenizer = load(model_dirs["plain"])
    with torch.no_grad():
        logprobs = model(torch.tensor([tokenizer.encode("Zini pori")]))[0, -1].log_softmax(-1)
    values, ids = logprobs.topk(5)
    assert out["prompt_tokens"] == len(tokenizer.encode("Zini pori"))
    assert [t["id"] for t in out["top"]] == ids.tolist()
    assert [t["logprob"] for t in out["top"]] == pytest.approx(values.tolist(), abs=1e-5)
    assert [t["text"] for t in out["top"]] == [tokenizer.token_text(i) for i in ids.tolist()]


def test_logprobs_table_shows_the_same_tokens(model_dirs, capsys):
    assert lmlab("logprobs", "--model", model_dirs["plain"], "--prompt", "Zini", "--top", 3, "--json") == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert lmlab("logprobs", "--model", model_dirs["plain"], "--prompt", "Zini", "--top", 3) == 0
    header, columns, *rows = capsys.readouterr().out.splitlines()
    assert "logprob" in columns and len(rows) == 3
    for row, t in zip(rows, top):
        token_id, logprob, prob, text = row.split(maxsplit=3)
        assert (int(token_id), json.loads(text)) == (t["id"], t["text"])
        assert float(logprob) == pytest.approx(t["logprob"], abs=1e-4)
        assert float(prob.rstrip("%")) == pytest.approx(100 * math.exp(t["logprob"]), abs=0.01)


@pytest.mark.parametrize("top", [0, 100000])
def test_logprobs_bad_top_is_one_line_exit_2(model_dirs, capsys, top):
    assert lmlab("logprobs", "--model", model_dirs["plain"], "--prompt", "Zini", "--top", top) == 2
    one_line_error(capsys, f"top {top} must be between 1 and the vocabulary size")


@pytest.mark.parametrize("command", ["generate", "chat", "logprobs"])
def test_a_tokenizer_with_ids_beyond_the_model_is_one_line_exit_2(model_dirs, capsys, command):
    assert lmlab(command, "--model", model_dirs["foreign"], "--prompt", "Zini pori") == 2
    assert capsys.readouterr().out == ""
    assert lmlab(command, "--model", model_dirs["foreign"], "--prompt", "Zini pori") == 2
    one_line_error(capsys, "token id 5000, outside the model's vocabulary of", "use the model's own tokenizer")


def test_chat_template_flag_picks_a_named_template(model_dirs, capsys):
    args = ["chat", "--model", model_dirs["named"], "--prompt", "Zini?", "--greedy", "--max-new-tokens", 8]
    assert lmlab(*args) == 0
    assert capsys.readouterr().out == expected_chat(model_dirs["chat"], ["Zini?"])[0] + "\n"
    assert lmlab(*args, "--chat-template", "terse") == 0
    terse = expected_chat(model_dirs["named"], ["Zini?"], template="terse")[0]
    assert capsys.readouterr().out == terse + "\n"
    assert terse != expected_chat(model_dirs["named"], ["Zini?"])[0]  # the template did change the prompt
    assert lmlab(*args, "--chat-template", "tools") == 2
    one_line_error(capsys, "--chat-template tools", "it has default, terse")


def test_finetuning_renders_with_the_chosen_named_template(model_dirs, capsys, tmp_path):
    tuned = load_tunable(model_dirs["named"], PostTrainConfig(chat_template="terse", block_size=32))
    assert chat_prompt(tuned.tokenizer, [{"role": "user", "content": "hi"}]).endswith("<|bos|>A\n")
    for command in ("sft", "reward", "dpo", "ppo"):
        assert lmlab(command, "--model", model_dirs["named"], "--data", "task", "--out", tmp_path / command,
                     "--chat-template", "tools") == 2
        one_line_error(capsys, "--chat-template tools", "it has default, terse")
        assert not (tmp_path / command).exists()


@pytest.mark.parametrize("command", ["chat", "sft", "reward", "dpo", "ppo"])
def test_chat_template_flag_has_help_in_every_command(command, capsys):
    with pytest.raises(SystemExit):
        lmlab(command, "--help")
    assert "named 'default'" in " ".join(capsys.readouterr().out.split())
