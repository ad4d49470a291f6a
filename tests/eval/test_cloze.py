"""LAMBADA-style cloze: passages split into context and last word, greedy prediction of whole words
(a word of several tokens, cut short, led by punctuation, ended by eos), last-word perplexity, the
embedded stories, and `lmlab eval cloze` end to end on a tiny model."""

import json
import math

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.data.cloze_passages import TEMPLATES, cloze_passages
from lmlab.errors import LmlabError
from lmlab.eval.cloze import ClozeResult, last_sentence, predict_word, score_passage, split_passage, summary
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

EOS = 1  # train_bpe's special tokens: <bos> 0, <eos> 1, <pad> 2, <unk> 3
CONTEXT = "The winner was"
WORD = "Quixby"  # ['ĠQu', 'i', 'x', 'b', 'y']: five tokens, none repeated


@pytest.fixture(scope="module")
def tokenizer():
    backend = train_bpe(["The winner was Quay. The winner of the race was Quay, who was happy."] * 20, 280)
    return TextTokenizer(backend, bos_id=0, eos_id=EOS, pad_id=2, stop_ids=(EOS,))


def bigram_model(tokenizer, chain: list[str]) -> torch.nn.Module:
    """A tiny llama whose next token depends only on the current one: each token of `chain` (texts of
    single tokens, or '<eos>') is followed by the next. Its blocks are zeroed (they add nothing to the
    residual), its embeddings one-hot and its LM head maps token t to the token after it."""
    V = tokenizer.vocab_size
    model = build_decoder(preset("llama-tiny", vocab_size=V, context_length=64, n_layers=1, n_heads=4, d_model=288,
                                 d_ff=32, tie_embeddings=False)).eval()
    ids = [EOS if text == "<eos>" else tokenizer.backend.token_to_id(text) for text in chain]
    assert None not in ids, chain
    with torch.no_grad():
        for p in model.blocks.parameters():
            p.zero_()
        model.token_embedding.weight.copy_(torch.eye(V, 288))
        model.lm_head.weight.zero_()
        for current, following in zip(ids, ids[1:]):
            model.lm_head.weight[following, current] = 10.0
    return model


def word_chain(*tail: str) -> list[str]:
    return ["Ġwas", "ĠQu", "i", "x", "b", "y", *tail]


def test_a_word_of_several_tokens_is_predicted_whole(tokenizer):
    assert len(tokenizer.encode(" " + WORD)) == 5
    assert predict_word(bigram_model(tokenizer, word_chain(".")), tokenizer, CONTEXT) == WORD


def test_the_word_ends_at_the_next_space(tokenizer):
    assert predict_word(bigram_model(tokenizer, word_chain("Ġwinner")), tokenizer, CONTEXT) == WORD


def test_a_word_cut_short_is_wrong(tokenizer):
    model = bigram_model(tokenizer, ["Ġwas", "ĠQu", "i", ","])
    result = score_passage(model, tokenizer, CONTEXT, WORD)
    assert result.predicted == "Qui" and not result.correct


def test_an_apostrophe_inside_the_word_keeps_it_going(tokenizer):
    model = bigram_model(tokenizer, ["Ġwas", "ĠQu", "i", "'", "x", "Ġwinner"])
    result = score_passage(model, tokenizer, CONTEXT, "Qui")
    assert result.predicted == "Qui'x" and not result.correct


def test_eos_ends_the_word(tokenizer):
    assert predict_word(bigram_model(tokenizer, ["Ġwas", "ĠQu", "i", "<eos>"]), tokenizer, CONTEXT) == "Qui"


def test_punctuation_first_predicts_no_word(tokenizer):
    assert predict_word(bigram_model(tokenizer, ["Ġwas", ".", "ĠQu", "i"]), tokenizer, CONTEXT) == ""


def test_a_leading_space_token_starts_the_word(tokenizer):
    model = bigram_model(tokenizer, ["Ġwas", "Ġ", "x", "b", "y", "Ġwinner"])
    assert predict_word(model, tokenizer, CONTEXT) == "xby"


def test_last_word_logprob_is_the_full_forward_sum(tokenizer):
    torch.manual_seed(0)
    model = build_decoder(preset("llama-tiny", vocab_size=tokenizer.vocab_size, context_length=64, n_layers=2,
                                 n_heads=2, d_model=32, d_ff=64)).eval()
    context_ids, word_ids = tokenizer.encode(CONTEXT), tokenizer.encode(" " + WORD)
    with torch.no_grad():
        logprobs = model(torch.tensor([context_ids + word_ids[:-1]]))[0].log_softmax(-1)  # (T, V)
    expected = sum(float(logprobs[len(context_ids) - 1 + i, t]) for i, t in enumerate(word_ids))
    assert score_passage(model, tokenizer, CONTEXT, WORD).logprob == pytest.approx(expected, abs=1e-4)


def test_split_passage_takes_the_last_word_without_its_punctuation():
    assert split_passage("He looked at the old clock.\n") == ("He looked at the old", "clock")
    assert split_passage("  and then came Anna") == ("  and then came", "Anna")
    assert split_passage("it was well-known!") == ("it was", "well-known")
    with pytest.raises(LmlabError, match="two words"):
        split_passage("Alone")


def test_last_sentence_drops_everything_before_the_last_full_stop():
    assert last_sentence('Tom sat down. "Why?" she asked. He stared at the') == "He stared at the"
    assert last_sentence("no stop here at all") == "no stop here at all"


def test_summary_perplexity_is_exp_of_mean_nll_per_passage():
    results = [ClozeResult("a", "a", -1.0), ClozeResult("b", "c", -3.0)]
    assert summary(results) == {"passages": 2, "accuracy": 0.5, "perplexity": pytest.approx(math.exp(2.0))}


def test_embedded_stories_are_seeded_and_ask_for_a_word_named_earlier():
    passages = cloze_passages(3 * len(TEMPLATES), seed=5)
    assert passages == cloze_passages(3 * len(TEMPLATES), seed=5) != cloze_passages(3 * len(TEMPLATES), seed=6)
    assert len(passages) == 3 * len(TEMPLATES)
    for passage in passages:
        context, target = split_passage(passage)
        assert passage == f"{context} {target}"
        assert target in context.removesuffix(last_sentence(context))  # named before the last sentence
        assert target not in last_sentence(context)


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory):
    model = bigram_model(tokenizer, word_chain("."))
    return save_hf_dir(model, tmp_path_factory.mktemp("cloze") / "model", tokenizer)


def test_cli_json_reports_accuracy_and_perplexity(model_dir, tmp_path, capsys):
    passages = tmp_path / "passages.txt"
    passages.write_text(f"The race was long. {CONTEXT} {WORD}\n\n{CONTEXT} Quay\nIt was {WORD}\n")
    assert lmlab("eval", "cloze", "--model", model_dir, "--data", passages, "--limit", 2, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"passages", "accuracy", "perplexity", "last_sentence"}
    assert result["passages"] == 2 and result["accuracy"] == 0.5
    assert result["last_sentence"]["accuracy"] == 0.5 and result["perplexity"] > 1


def test_cli_embedded_stories_and_table(model_dir, capsys):
    assert lmlab("eval", "cloze", "--model", model_dir, "--passages", 3, "--no-last-sentence") == 0
    out = capsys.readouterr().out
    assert "full passage" in out and "last sentence" not in out and "(3 passages)" in out


@pytest.mark.parametrize("content, args, fragments", [
    (None, ["--data", "missing.txt"], ["cannot read", "missing.txt"]),
    ("\n  \n", ["--data", "empty.txt"], ["no passages", "one passage per line"]),
    ("a b\n", ["--data", "empty.txt", "--passages", "5"], ["--passages", "--limit"]),
    (None, ["--passages", "0"], ["--passages 0"]),
    (None, ["--limit", "0"], ["--limit 0"]),
])
def test_cli_errors_are_one_line(model_dir, tmp_path, monkeypatch, capsys, content, args, fragments):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "empty.txt").write_text(content)
    assert lmlab("eval", "cloze", "--model", model_dir, *args) == 2
    one_line_error(capsys, *fragments)
