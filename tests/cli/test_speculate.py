"""`--speculate lookup|MODEL` on `lmlab generate` and `lmlab chat`: the tokens of plain decoding, the acceptance
counts in --json or on stderr, and each bad combination one line, exit code 2."""

import json
import re

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.data.markov import markov_corpus
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")
PROMPT = "Zini pori teme. Zini pori teme. Zini pori"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A tiny random Llama with a chat template, a smaller GPT-2 of its tokenizer (a draft), and one of
    another tokenizer."""
    root = tmp_path_factory.mktemp("speculate")
    backend, other = (train_bpe(markov_corpus(100, seed=seed)[0], 300) for seed in (3, 4))
    torch.manual_seed(0)
    target = build_decoder(preset("llama-tiny", vocab_size=backend.get_vocab_size(), context_length=96,
                                  n_layers=2)).eval()
    draft = build_decoder(preset("gpt2-tiny", vocab_size=backend.get_vocab_size(), context_length=96, n_layers=1,
                                 d_model=32, n_heads=2, d_ff=64)).eval()
    paths = {"target": save_hf_dir(target, root / "target", backend), "draft": save_hf_dir(draft, root / "draft",
                                                                                           backend),
             "foreign": save_hf_dir(draft, root / "foreign", other)}
    TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,), chat_template=TEMPLATE).save(paths["target"])
    return paths


def generated(capsys, *flags) -> dict:
    assert lmlab("generate", "--prompt", PROMPT, "--greedy", "--max-new-tokens", 24, "--json", *flags) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("drafter", ["lookup", "draft"])
def test_generate_speculates_to_the_same_tokens_and_reports_acceptance(dirs, capsys, drafter):
    plain = generated(capsys, "--model", dirs["target"])
    speculate = dirs["draft"] if drafter == "draft" else "lookup"
    out = generated(capsys, "--model", dirs["target"], "--speculate", speculate, "--draft-tokens", 3)
    speculation = out.pop("speculation")
    assert out == plain and "speculation" not in plain
    assert 0 < speculation["drafted"] and 0 <= speculation["accepted"] <= speculation["drafted"]
    assert speculation["acceptance_rate"] == speculation["accepted"] / speculation["drafted"]
    assert lmlab("generate", "--model", dirs["target"], "--prompt", PROMPT, "--greedy", "--max-new-tokens", 24,
                 "--speculate", speculate) == 0
    captured = capsys.readouterr()
    assert captured.out == PROMPT + plain["text"] + "\n"
    assert re.fullmatch(r"lmlab: speculation kept \d+ of \d+ drafted tokens \(\d+%\); 24 tokens in \d+ passes of "
                        r"the model\n", captured.err)


def test_chat_speculates_to_the_same_reply(dirs, capsys):
    assert lmlab("chat", "--model", dirs["target"], "--prompt", PROMPT, "--greedy", "--max-new-tokens", 16) == 0
    plain = capsys.readouterr().out
    for speculate in ("lookup", dirs["draft"]):
        assert lmlab("chat", "--model", dirs["target"], "--prompt", PROMPT, "--greedy", "--max-new-tokens", 16,
                     "--speculate", speculate) == 0
        assert capsys.readouterr().out == plain


@pytest.mark.parametrize("flags, fragment", [
    (["--draft-tokens", "3"], "add --speculate"),
    (["--speculate", "lookup", "--beams", "2"], "not beams"),
    (["--speculate", "lookup", "--draft-tokens", "-1"], "--draft-tokens -1 must be in 1..64"),
    (["--speculate", "FOREIGN"], "another tokenizer"),
])
def test_bad_speculation_is_one_line_exit_2(dirs, capsys, flags, fragment):
    flags = [str(dirs["foreign"]) if flag == "FOREIGN" else flag for flag in flags]
    assert lmlab("generate", "--model", dirs["target"], "--prompt", PROMPT, *flags) == 2
    one_line_error(capsys, fragment)


def test_an_int4_model_speculates_to_its_tokens_checked_by_the_fused_step(dirs, capsys, built_kernels):
    plain = generated(capsys, "--model", dirs["target"], "--dtype", "int4")
    assert lmlab("generate", "--model", dirs["target"], "--dtype", "int4", "--prompt", PROMPT, "--greedy",
                 "--max-new-tokens", 24, "--json", "--speculate", "lookup") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    out.pop("speculation")
    assert out == plain
    assert "modules" not in captured.err  # its drafts are checked by the fused step: nothing to warn about
