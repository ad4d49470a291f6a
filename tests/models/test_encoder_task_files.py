"""`models.encoder_task_files`: a fine-tuned encoder saved and loaded back computes the same, a run written
by the previous version (head tensors "classifier.weight", …, beside task.json) still loads, and every
way task.json or head.safetensors can be wrong is one line."""

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import lmlab, one_line_error
from encoder_data import tiny_encoder_dir
from lmlab.errors import LmlabError
from lmlab.heads.task_model import EncoderWithHead
from lmlab.models.encoder_files import save_hf_encoder_dir
from lmlab.models.encoder_task_files import HEAD_FILE, TASK_FILE, load_finetuned, save_finetuned
from lmlab.models.finetuned_encoder import TASK_HEADS, FinetunedEncoder, task_head
from lmlab.models.load import load_encoder

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = {"classify": ["neg", "pos"], "pair": ["no", "yes"], "tag": ["O", "B-LOC", "I-LOC"]}


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return tiny_encoder_dir(tmp_path_factory.mktemp("enc") / "tiny")


def tuned_model(encoder_dir, task: str) -> FinetunedEncoder:
    encoder, tokenizer = load_encoder(encoder_dir)
    torch.manual_seed(1)
    head = task_head(task, encoder.config.d_model, len(LABELS.get(task, [])))
    for p in head.parameters():  # no zero biases that could hide a tensor left unread
        torch.nn.init.normal_(p)
    return FinetunedEncoder(EncoderWithHead(encoder, head).eval(), tokenizer, task, LABELS.get(task, []), 24, 10)


def ids_for(task: str):
    generator = torch.Generator().manual_seed(3)
    shape = (2, 3, 9) if task == "choice" else (2, 9)
    ids = torch.randint(5, 100, shape, generator=generator)
    return ids, torch.ones_like(ids), torch.zeros_like(ids)


def old_run(directory, encoder_dir, head_tensors: dict, task: str = "classify", labels=("neg", "pos"),
            head: str = "SequenceClassifier"):
    """A model directory exactly as the previous version's `save_finetuned` wrote it."""
    encoder, tokenizer = load_encoder(encoder_dir)
    save_hf_encoder_dir(encoder, directory, tokenizer)
    save_file(head_tensors, directory / HEAD_FILE)
    (directory / TASK_FILE).write_text(json.dumps({"task": task, "labels": list(labels), "max_length": 32,
                                                   "max_answer_length": 30, "head": head,
                                                   "scores": {"accuracy": 0.75}}, indent=2))
    return encoder


@pytest.mark.parametrize("task", list(TASK_HEADS))
def test_a_saved_model_loads_back_computing_the_same(encoder_dir, tmp_path, task):
    tuned = tuned_model(encoder_dir, task)
    save_finetuned(tuned, tmp_path / "model", {"accuracy": 1.0})
    loaded = load_finetuned(tmp_path)  # the run directory finds its model/
    assert (loaded.task, loaded.labels, loaded.max_length, loaded.max_answer_length) == (
        task, tuned.labels, 24, 10)
    assert not loaded.model.training
    with torch.no_grad():
        expected, got = tuned.model(*ids_for(task)), loaded.model(*ids_for(task))
    for e, g in zip(expected if task == "qa" else [expected], got if task == "qa" else [got]):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-5)
    info = json.loads((tmp_path / "model" / TASK_FILE).read_text())
    assert info["head"] == type(tuned.model.head).__name__ and info["scores"] == {"accuracy": 1.0}


def test_a_classifier_saved_by_the_previous_version_loads_and_predicts(encoder_dir, tmp_path):
    weight, bias = torch.randn(2, 32), torch.randn(2)
    encoder = old_run(tmp_path, encoder_dir, {"classifier.weight": weight, "classifier.bias": bias})
    tuned = load_finetuned(tmp_path)
    ids = torch.tensor([[2, 17, 40, 23, 3]])
    with torch.no_grad():
        by_hand = encoder.pooled(ids) @ weight.T + bias  # the pooled [CLS] vector through the stored layer
        torch.testing.assert_close(tuned.model(ids), by_hand, atol=1e-6, rtol=1e-5)
    assert tuned.labels == ["neg", "pos"] and tuned.task == "classify"


def test_a_span_head_saved_by_the_previous_version_loads(encoder_dir, tmp_path):
    weight, bias = torch.randn(2, 32), torch.randn(2)
    encoder = old_run(tmp_path, encoder_dir, {"span.weight": weight, "span.bias": bias}, "qa", (), "SpanExtractor")
    ids = torch.tensor([[2, 17, 40, 23, 3]])
    with torch.no_grad():
        start, end = load_finetuned(tmp_path).model(ids)
        by_hand = encoder(ids) @ weight.T + bias  # (1, T, 2)
    torch.testing.assert_close(torch.stack([start, end], -1), by_hand, atol=1e-6, rtol=1e-5)


HEAD = {"classifier.weight": torch.randn(2, 32), "classifier.bias": torch.randn(2)}


@pytest.mark.parametrize("change, message", [
    ({"task": "summarise"}, "task 'summarise' is not one of"),
    ({"labels": "neg,pos"}, "labels must be a list of names"),
    ({"labels": []}, "needs its label names"),
    ({"max_length": "32"}, "max_length must be a whole number"),
    ({"max_answer_length": 0}, "max_answer_length must be a whole number"),
    ({"max_length": 1000}, "exceeds the encoder's 64 positions"),
    ({"head": "TokenClassifier"}, "head 'TokenClassifier' is not the SequenceClassifier"),
    ({"labels": ["neg", "neutral", "pos"]}, "classifier.weight has shape (2, 32)"),
])
def test_a_wrong_task_file_is_one_line(encoder_dir, tmp_path, change, message):
    old_run(tmp_path, encoder_dir, HEAD)
    info = json.loads((tmp_path / TASK_FILE).read_text()) | change
    (tmp_path / TASK_FILE).write_text(json.dumps(info))
    with pytest.raises(LmlabError, match="^[^\n]*$") as error:
        load_finetuned(tmp_path)
    assert message in str(error.value) and "lmlab finetune" in str(error.value)


@pytest.mark.parametrize("tensors, message", [
    ({"classifier.weight": HEAD["classifier.weight"]}, "not the head's"),
    (HEAD | {"classifier.scale": torch.zeros(1)}, "not the head's"),
    ({"classifier.weight": torch.randn(2, 16), "classifier.bias": torch.randn(2)}, "classifier.weight has shape"),
    ({"classifier.weight": torch.full((2, 32), float("nan")), "classifier.bias": torch.randn(2)}, "NaN"),
])
def test_wrong_head_tensors_are_one_line(encoder_dir, tmp_path, tensors, message):
    old_run(tmp_path, encoder_dir, tensors)
    with pytest.raises(LmlabError, match=message):
        load_finetuned(tmp_path)


def test_a_missing_or_damaged_head_file_is_one_line(encoder_dir, tmp_path):
    old_run(tmp_path, encoder_dir, HEAD)
    (tmp_path / HEAD_FILE).write_bytes(b"\x00" * 20)
    with pytest.raises(LmlabError, match="corrupt or truncated"):
        load_finetuned(tmp_path)
    (tmp_path / HEAD_FILE).unlink()
    with pytest.raises(LmlabError, match="head.safetensors is missing"):
        load_finetuned(tmp_path)


def test_the_cli_reports_a_broken_task_file_in_one_line(encoder_dir, tmp_path, capsys):
    old_run(tmp_path, encoder_dir, HEAD)
    (tmp_path / TASK_FILE).write_text("{not json")
    assert lmlab("inspect", "saliency", "--model", tmp_path, "--text", "good") == 2
    one_line_error(capsys, "task.json is not valid JSON")
