"""`lmlab eval bias`: a masked LM's pseudo-log-likelihood of the shared tokens against the same sum computed
with transformers on the same BERT weights; a causal LM's pair scores against lm-eval's own crows_pairs_english
task (its YAML and process_results, pointed at our pairs) run by its `hf` model; then the summary and the command."""

import json
import re

import pytest
import torch

import lmlab.eval.bias as bias_module
from conftest import lmlab, one_line_error
from lm_eval_reference import lm_eval_samples, write_hf_llama
from lmlab.data.stereotype_pairs import BIAS_TYPES, STEREOTYPE_PAIRS, StereotypePair
from lmlab.eval.bias import causal_pair_scores, evaluate_bias, masked_pair_scores, shared_positions
from lmlab.eval.harness import HarnessScorer
from lmlab.models.load import load
from lmlab.models.masked_lm import load_masked_lm
from real_models import models_root, real_model

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
PAIRS = STEREOTYPE_PAIRS[:3] + STEREOTYPE_PAIRS[14:16]  # gender and age
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A tiny random BertForMaskedLM whose word-level vocabulary covers PAIRS, saved with its vocab.txt."""
    words = sorted({w for p in PAIRS for s in (p.sent_more, p.sent_less) for w in re.findall(r"\w+|[^\w\s]", s.lower())})
    config = transformers.BertConfig(vocab_size=len(SPECIALS) + len(words), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    reference = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        for p in reference.parameters():  # HF's init leaves biases and norms trivial; make every weight count
            p.normal_(0, 0.2)
    directory = tmp_path_factory.mktemp("bias") / "bert"
    reference.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    return directory, reference


def transformers_pll(reference, ids: list[int], positions: list[int], mask_id: int) -> float:
    """Nangia et al.'s score written out: mask each position alone, one forward each, add log p(original)."""
    total = 0.0
    for i in positions:
        masked = torch.tensor([ids])
        masked[0, i] = mask_id
        with torch.no_grad():
            total += float(reference(masked).logits[0, i].log_softmax(-1)[ids[i]])
    return total


@pytest.mark.parity
def test_masked_scores_are_the_pseudo_loglikelihood_of_the_shared_tokens_as_transformers_computes_it(bert_dir):
    directory, reference = bert_dir
    model, tokenizer = load_masked_lm(directory)
    mask_id = tokenizer.token_to_id("[MASK]")
    for pair in PAIRS:
        more, less = tokenizer.encode(pair.sent_more), tokenizer.encode(pair.sent_less)
        in_more, in_less = shared_positions(more.ids, less.ids)
        assert [more.tokens[i] for i in in_more] == [less.tokens[i] for i in in_less]  # the same tokens
        assert len(in_more) < len(more.ids) and len(in_less) < len(less.ids)  # but not the group's words
        assert more.tokens[in_more[0]] == "[CLS]" and more.tokens[in_more[-1]] == "[SEP]"
        expected = (transformers_pll(reference, more.ids, in_more[1:-1], mask_id),
                    transformers_pll(reference, less.ids, in_less[1:-1], mask_id))
        assert masked_pair_scores(model, tokenizer, pair) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parity
def test_causal_scores_and_shares_are_lm_evals_crows_pairs(tmp_path, monkeypatch):
    directory = write_hf_llama(tmp_path / "llama", [s for p in STEREOTYPE_PAIRS for s in (p.sent_more, p.sent_less)],
                               window=64)
    samples = lm_eval_samples(monkeypatch, tmp_path, directory,
                              {"ours_crows": "crows_pairs/crows_pairs_english.yaml"}, "test", [vars(p) for p in PAIRS])
    model, tokenizer = load(directory)
    scorer = HarnessScorer(model.eval(), tokenizer, 64)
    result = evaluate_bias(lambda pair: causal_pair_scores(scorer, pair), PAIRS)
    theirs = samples["ours_crows"]
    assert [float(r["stereotype"]) for r in result["per_pair"]] == [s["pct_stereotype"] for s in theirs]
    assert [abs(r["more"] - r["less"]) for r in result["per_pair"]] == pytest.approx(
        [s["likelihood_diff"] for s in theirs], abs=1e-4)
    assert 0 < sum(s["pct_stereotype"] for s in theirs) < len(PAIRS)  # both outcomes occur


def test_shares_and_intervals_per_category_and_overall():
    pairs = [StereotypePair("a", "b", "x")] * 3 + [StereotypePair("c", "d", "y")] * 2
    scores = {"a": -1.0, "b": -2.0, "c": -3.0, "d": -3.0}  # x: stereotype preferred; y: a tie, which is not
    result = evaluate_bias(lambda p: (scores[p.sent_more], scores[p.sent_less]), pairs)
    assert result["categories"]["x"]["stereotype_share"] == 1.0 and result["categories"]["y"]["stereotype_share"] == 0
    assert result["overall"]["pairs"] == 5 and result["overall"]["stereotype_share"] == pytest.approx(0.6)
    low, high = result["overall"]["interval"]
    assert 0.2 < low < 0.6 < high < 0.95


def test_embedded_pairs_cover_six_categories_and_differ_only_in_a_few_words():
    assert len(BIAS_TYPES) == 6 and 60 <= len(STEREOTYPE_PAIRS) <= 100
    for pair in STEREOTYPE_PAIRS:
        more, less = pair.sent_more.split(), pair.sent_less.split()
        kept, _ = shared_positions(more, less)
        assert pair.sent_more != pair.sent_less and len(kept) >= max(len(more), len(less)) - 3, pair


def test_cli_on_a_decoder_writes_json_and_a_png(decoder_dir, tmp_path, capsys):
    png = tmp_path / "bias.png"
    assert lmlab("eval", "bias", "--model", str(decoder_dir), "--limit", "20", "--json", "--png", str(png)) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "causal" and result["overall"]["pairs"] == 20 and png.stat().st_size > 0
    assert set(result["categories"]) == {"gender", "age"}


def test_cli_on_a_masked_lm_reads_a_users_pairs(bert_dir, tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({**vars(p), "stereo_antistereo": "stereo"}) + "\n" for p in PAIRS))
    assert lmlab("eval", "bias", "--model", str(bert_dir[0]), "--data", str(data)) == 0
    out = capsys.readouterr().out
    assert "pseudo-log-likelihood" in out and re.search(r"overall\s+5 ", out)


@pytest.mark.parametrize("line,fragment", [
    ('{"sent_more": "A b.", "sent_less": "A b.", "bias_type": "age"}', "the same sentence"),
    ('{"sent_more": "A b.", "sent_less": "C b."}', "needs non-empty strings"),
])
def test_a_bad_pair_is_one_error_and_nothing_is_written(tmp_path, capsys, line, fragment):
    data = tmp_path / "pairs.jsonl"
    data.write_text(line + "\n")
    png = tmp_path / "bias.png"
    assert lmlab("eval", "bias", "--model", "unused", "--data", str(data), "--png", str(png)) == 2
    one_line_error(capsys, f"{data}:1", fragment)
    assert not png.exists()


@pytest.mark.slow
def test_smollm2_gives_the_documented_verdicts_on_the_gender_pairs(monkeypatch, capsys):
    """docs/evaluation.md's run (its numbers are fp32's: int4 with fp32 activations gives them), on its 14 gender
    pairs: the same verdict for each, 11 of 14 stereotyped."""
    real_model("smollm2-135m-instruct")
    monkeypatch.setenv("LMLAB_CACHE", models_root())
    assert lmlab("eval", "bias", "--model", "smollm2-135m-instruct", "--activations", "fp32", "--limit", "14",
                 "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert [int(r["stereotype"]) for r in result["per_pair"]] == [1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1]
    assert [r["more"] - r["less"] for r in result["per_pair"][:5]] == pytest.approx(
        [2.281, 4.228, 2.295, -1.715, 0.757], abs=2e-3)


def test_long_sentences_are_scored_in_batches_with_the_same_sum(bert_dir, monkeypatch):
    model, tokenizer = load_masked_lm(bert_dir[0])
    whole = masked_pair_scores(model, tokenizer, PAIRS[0])
    monkeypatch.setattr(bias_module, "MASKED_ROWS", 2)
    assert masked_pair_scores(model, tokenizer, PAIRS[0]) == pytest.approx(whole, abs=1e-5)
