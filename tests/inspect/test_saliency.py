"""Saliency from input-embedding gradients: integrated gradients are complete, grad-x-input is the
gradient times the embedding, tokens that cannot reach the output score zero, classifier heads work
the same way; `lmlab inspect saliency` prints JSON or a table and draws escaped HTML and a PNG strip."""

import json

import pytest
import torch

from conftest import lmlab, one_line_error
from encoder_data import tiny_encoder_dir, write_csv
from lmlab.config import EncoderConfig
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.task_model import EncoderWithHead
from lmlab.inspect.saliency import classifier_saliency, next_token_saliency, saliency
from lmlab.inspect.subject import load_subject
from lmlab.models.decoder import build_decoder
from lmlab.models.encoders import build
from lmlab.models.presets import preset
from real_models import models_root, real_model

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = torch.tensor([[5, 17, 3, 42, 8, 61]])  # distinct tokens


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=97, context_length=16, n_layers=2, n_heads=4,
                                d_model=32, d_ff=48, tie_embeddings=False)).eval()  # embedding grads are its own


def next_token_score(model, position: int = -1, target: int = 7):
    return lambda ids: model(ids)[:, position].log_softmax(-1)[:, target]


def test_integrated_gradients_sum_to_f_x_minus_f_baseline_at_the_default_steps(llama):
    result = saliency(next_token_score(llama), llama.token_embedding, IDS, list("abcdef"), "t")
    assert result.completeness_gap < 0.01
    assert sum(result.scores) == pytest.approx(result.f_x - result.f_baseline, rel=0.01)
    with torch.no_grad():
        assert result.f_x == pytest.approx(float(next_token_score(llama)(IDS)), abs=1e-5)


def test_grad_x_input_is_the_gradient_times_the_embedding_by_hand(llama):
    weight = llama.token_embedding.weight
    weight.grad = None
    next_token_score(llama)(IDS).sum().backward()  # each token occurs once: its row's gradient is its own
    by_hand = (weight.grad[IDS[0]] * weight[IDS[0]]).sum(-1).detach()
    weight.grad = None
    result = saliency(next_token_score(llama), llama.token_embedding, IDS, list("abcdef"), "t", "grad-x-input")
    assert torch.allclose(torch.tensor(result.scores), by_hand, atol=1e-6)
    grads = saliency(next_token_score(llama), llama.token_embedding, IDS, list("abcdef"), "t", "grad")
    assert all(score >= 0 for score in grads.scores) and grads.f_baseline is None and grads.completeness_gap is None


@pytest.mark.parametrize("method", ["grad", "grad-x-input", "integrated-gradients"])
def test_tokens_after_the_predicted_position_score_zero(llama, method):
    result = saliency(next_token_score(llama, position=2), llama.token_embedding, IDS, list("abcdef"), "t", method,
                      steps=8)
    assert result.scores[3:] == [0.0, 0.0, 0.0]  # a causal decoder's position 2 never sees them
    assert all(abs(score) > 0 for score in result.scores[:3])


def test_classifier_head_is_explained_for_its_predicted_label_or_a_named_one():
    torch.manual_seed(0)
    encoder = build(EncoderConfig(vocab_size=50, context_length=16, n_layers=2, n_heads=2, d_model=16, d_ff=32))
    head = EncoderWithHead(encoder, SequenceClassifier(16, 3)).eval()
    ids = torch.tensor([[2, 11, 7, 30, 3]])
    with torch.no_grad():
        log_probs = head(ids).log_softmax(-1)[0]
    labels = ["neg", "neu", "pos"]
    predicted = classifier_saliency(head, encoder.embeddings.token, ids, list("abcde"), labels)
    assert predicted.target == labels[int(log_probs.argmax())]
    named = classifier_saliency(head, encoder.embeddings.token, ids, list("abcde"), labels, "neu")
    assert named.target == "neu" and named.f_x == pytest.approx(float(log_probs[1]), abs=1e-5)
    assert named.completeness_gap < 0.01 and named.scores[0] != 0  # [CLS] is scored too


def test_json_has_a_score_per_token_and_the_figures_are_written(decoder_dir, capsys, tmp_path):
    html, png = tmp_path / "s.html", tmp_path / "s.png"
    assert lmlab("inspect", "saliency", "--model", decoder_dir, "--text", "the cat sat on", "--integration-steps", "32",
                 "--json", "--html", html, "--png", png) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"tokens", "target", "method", "scores", "f_x", "f_baseline", "completeness_gap"}
    assert len(result["scores"]) == len(result["tokens"]) and result["method"] == "integrated-gradients"
    assert result["completeness_gap"] < 0.01
    subject = load_subject(decoder_dir)
    top = next_token_saliency(subject.model, subject.tokenizer, "the cat sat on", method="grad")
    assert result["target"] == top.target and result["f_x"] == pytest.approx(top.f_x, abs=1e-5)
    assert html.read_text().startswith("<!DOCTYPE html>") and png.read_bytes()[:4] == b"\x89PNG"


def test_table_prints_a_line_per_token(decoder_dir, capsys):
    assert lmlab("inspect", "saliency", "--model", decoder_dir, "--text", "the cat", "--method", "grad") == 0
    lines = capsys.readouterr().out.splitlines()
    subject = load_subject(decoder_dir)
    assert lines[0].startswith("grad saliency of log p(") and len(lines) == 1 + subject.tokens("the cat")[0].size(1)


@pytest.mark.parametrize("flags, fragment", [
    (["--target", "the cat sat"], "not one"),
    (["--integration-steps", "0"], "--integration-steps 0"),
    (["--text", ""], "--text is empty"),
])
def test_bad_input_is_a_one_line_error(decoder_dir, capsys, flags, fragment):
    args = ["inspect", "saliency", "--model", decoder_dir, "--text", "the cat", *flags]
    assert lmlab(*args) == 2
    one_line_error(capsys, fragment)


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    train = write_csv(root / "train.csv", ["text,label", "the movie was good,pos", "the food was awful,neg",
                                           "a good day,pos", "the cat was bad,neg"])
    out = root / "run"
    encoder = tiny_encoder_dir(root / "enc", vocab_size=128)
    assert lmlab("finetune", "--model", encoder, "--task", "classify", "--data", train, "--out", out,
                 "--epochs", "1", "--batch-size", "4", "--max-length", "16") == 0
    return out


def test_a_classify_run_is_explained_per_wordpiece_for_a_label(classifier_run, capsys):
    assert lmlab("inspect", "saliency", "--model", classifier_run, "--text", "the movie was good", "--target", "neg",
                 "--integration-steps", "32", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["target"] == "neg" and result["tokens"][0] == "[CLS]" and result["tokens"][-1] == "[SEP]"
    assert result["completeness_gap"] < 0.01
    assert lmlab("inspect", "saliency", "--model", classifier_run, "--text", "good", "--target", "maybe") == 2
    one_line_error(capsys, "'maybe'", "neg, pos")


@pytest.mark.slow
def test_smollm2_integrated_gradients_are_complete_within_one_percent(monkeypatch):
    real_model("smollm2-135m-instruct")
    monkeypatch.setenv("LMLAB_CACHE", models_root())
    subject = load_subject("smollm2-135m-instruct")
    result = next_token_saliency(subject.model, subject.tokenizer, "The capital of France is", " Paris")
    assert result.completeness_gap < 0.01, result
    assert result.target == " Paris" and result.f_x > -1.0  # the model knows it
    assert result.scores[0] == 0.0  # the first token is held in the baseline
