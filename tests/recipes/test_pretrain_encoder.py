"""Encoder pre-training (`lmlab train --model bert-tiny|roberta-tiny|albert-tiny|electra-tiny|deberta-tiny`): each
preset trains with its objectives and writes a model that lmlab and transformers load with the
same outputs; metrics carry MLM and NSP / SOP / RTD accuracies; a stopped run resumes to the same
weights bit for bit; bad input is one line, exit 2, nothing written."""

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import lmlab, one_line_error
from encoder_parity import real_diff
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.data.corpora import load_corpus
from lmlab.data.markov import markov_corpus
from lmlab.models.load import load_encoder
from lmlab.models.presets import preset
from lmlab.recipes.pretrain_encoder import pretrain_encoder
from lmlab.tokenizers.bpe import save_tokenizer, train_bpe
from lmlab.tokenizers.wordpiece import train_wordpiece

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=200, n_layers=2, n_heads=2, d_model=32, d_ff=64)
TINY_ARGS = ["--vocab-size", "200", "--n-layers", "2", "--n-heads", "2", "--d-model", "32", "--d-ff", "64",
             "--max-steps", "4", "--batch-size", "4", "--block-size", "32", "--warmup-steps", "1", "--eval-every",
             "2", "--eval-batches", "1", "--checkpoint-every", "2", "--log-every", "1"]
FACTORISED = ["--embedding-size", "16"]


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """A JSONL file of 30 documents, one sentence a line (sentence pairs need several documents)."""
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    texts = markov_corpus(30, seed=5)[0]
    path.write_text("".join(json.dumps({"text": t.replace(". ", ".\n")}) + "\n" for t in texts))
    return path


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_bert_mlm_nsp_writes_a_model_lmlab_and_transformers_load_alike(tmp_path, documents):
    transformers = pytest.importorskip("transformers")
    run = tmp_path / "run"
    assert lmlab("train", "--model", "bert-tiny", "--objective", "mlm+nsp", "--data", documents, "--out", run,
                 *TINY_ARGS) == 0
    metrics = rows(run)
    assert {"val_mlm_acc", "val_nsp_acc", "val_loss"} <= metrics[0].keys() and metrics[0]["step"] == 0
    assert {"mlm_acc", "nsp_acc", "mlm_loss", "nsp_loss", "loss", "lr"} <= metrics[1].keys()
    assert (run / "loss.png").read_bytes().startswith(b"\x89PNG")
    encoder, tokenizer = load_encoder(run)
    reference = transformers.BertForPreTraining.from_pretrained(run / "model").eval()
    batch = tokenizer.encode_batch(["Bata kodi.", "Zu ma li.", "Kodi"])
    ids = torch.tensor([e.ids for e in batch])
    mask = torch.tensor([e.attention_mask for e in batch])
    with torch.no_grad():
        expected = reference.bert(ids, attention_mask=mask).last_hidden_state
        assert real_diff(encoder(ids, mask), expected, mask) <= 1e-5


@pytest.mark.parametrize("name, objective, extra, architecture, accuracy", [
    ("roberta-tiny", "mlm", ["--whole-word-masking"], "RobertaForMaskedLM", "mlm_acc"),
    ("albert-tiny", "mlm+sop", FACTORISED, "AlbertForPreTraining", "sop_acc"),
    ("electra-tiny", "rtd", FACTORISED, "ElectraForPreTraining", "rtd_acc"),
    ("bert-tiny", "span", [], "BertForPreTraining", "mlm_acc"),
    ("deberta-tiny", "mlm", [], "DebertaV2ForMaskedLM", "mlm_acc"),
    ("deberta-tiny", "rtd", [], "DebertaV2Model", "rtd_acc"),
])
def test_each_preset_trains_with_its_objective(tmp_path, documents, name, objective, extra, architecture, accuracy):
    transformers = pytest.importorskip("transformers")
    run = tmp_path / "run"
    assert lmlab("train", "--model", name, "--objective", objective, "--data", documents, "--out", run,
                 *TINY_ARGS, *extra) == 0
    assert accuracy in rows(run)[1] and f"val_{accuracy}" in rows(run)[0]
    config = json.loads((run / "model" / "config.json").read_text())
    assert config["architectures"] == [architecture]
    getattr(transformers, architecture).from_pretrained(run / "model")
    if objective == "rtd":
        generator = json.loads((run / "generator" / "config.json").read_text())["architectures"][0]
        assert generator == architecture.replace("ForPreTraining", "ForMaskedLM").replace("Model", "ForMaskedLM")
        getattr(transformers, generator).from_pretrained(run / "generator")
    encoder, _ = load_encoder(run)
    assert encoder.config.family == name.split("-")[0]


@pytest.mark.parametrize("name, objective, whole_word", [("roberta-tiny", "mlm", True),
                                                           ("electra-tiny", "rtd", False),
                                                           ("deberta-tiny", "rtd", False)])
def test_resume_gives_bit_identical_weights(tmp_path, documents, name, objective, whole_word):
    cfg = preset(name, **TINY, **({"embedding_size": 16} if name == "electra-tiny" else {}))
    train = TrainConfig(loop=LoopConfig(max_steps=6, batch_size=4, eval_every=3, checkpoint_every=2, log_every=1),
                        block_size=128, optim=OptimConfig(warmup_steps=1), eval_batches=1, val_fraction=0.1)
    # 128-token rows: ~20 training examples, so the 24 drawn in 6 steps cross into a second epoch,
    # where dynamic masks are drawn again.
    # Both runs get one tokenizer: HF's WordPiece trainer breaks ties differently from run to run.
    tokenizer = tmp_path / "tokenizer.json"
    train_wordpiece(load_corpus(str(documents)), 200).save(str(tokenizer))
    kwargs = dict(objective=objective, whole_word=whole_word, tokenizer=tokenizer, show_progress=False)
    pretrain_encoder(cfg, train, str(documents), tmp_path / "full", **kwargs)
    first = pretrain_encoder(cfg, train, str(documents), tmp_path / "split", stop_after=4, **kwargs)
    assert not first.finished and first.step == 4 and first.model_dir is None
    second = pretrain_encoder(cfg, train, str(documents), tmp_path / "split", resume=True, **kwargs)
    assert second.finished and second.step == 6
    full = load_file(tmp_path / "full" / "model" / "model.safetensors")
    split = load_file(tmp_path / "split" / "model" / "model.safetensors")
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)
    assert [r["step"] for r in rows(tmp_path / "split")] == [0, 1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("args, fragments", [
    (["--model", "bert-tiny", "--objective", "rtd"], ["rtd does not apply to bert", "mlm+nsp"]),
    (["--model", "roberta-tiny", "--objective", "mlm+sop"], ["mlm+sop does not apply to roberta"]),
    (["--model", "gpt2-tiny", "--objective", "mlm"], ["objective 'mlm' is unknown for a decoder", "causal_lm"]),
    (["--model", "gpt2-tiny", "--whole-word-masking"], ["--whole-word-masking apply to encoder", "gpt2-tiny"]),
    (["--model", "roberta-tiny", "--objective", "span", "--whole-word-masking"],
     ["--objective span", "no whole-word masking", "mask runs of whole words"]),
    (["--model", "bert-tiny", "--norm", "rmsnorm"], ["--norm do not apply to encoder"]),
])
def test_bad_objective_is_one_line_exit_2_and_nothing_written(tmp_path, documents, capsys, args, fragments):
    run = tmp_path / "run"
    assert lmlab("train", *args, "--data", documents, "--out", run, *TINY_ARGS) == 2
    one_line_error(capsys, *fragments)
    assert not run.exists()


def test_a_tokenizer_without_mask_token_is_refused_before_anything_is_written(tmp_path, documents, capsys):
    save_tokenizer(train_bpe(load_corpus(str(documents)), 300), tmp_path / "bpe")
    assert lmlab("train", "--model", "bert-tiny", "--data", documents, "--tokenizer", tmp_path / "bpe",
                 "--out", tmp_path / "run", *TINY_ARGS) == 2
    one_line_error(capsys, "lacks", "[MASK]")
    assert not (tmp_path / "run").exists()


def test_empty_data_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    assert lmlab("train", "--model", "bert-tiny", "--data", empty, "--out", tmp_path / "run", *TINY_ARGS) == 2
    one_line_error(capsys, "holds no text")
    assert not (tmp_path / "run").exists()
