"""Encoder-decoder pre-training (`lmlab train --model t5-tiny|bart-tiny|transformer-tiny`): each preset
trains with its own objective (or --objective's), writes a model that loads back, resumes to the same
weights bit for bit; bad input is one line, exit 2, nothing written."""

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import lmlab, one_line_error
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.models.presets import preset
from lmlab.objectives.registry import REGISTRY, build_objective
from lmlab.objectives.span_corruption import t5_sentinel_tokens
from lmlab.objectives.span_noise import SpanNoise
from lmlab.recipes.pretrain_encoder_decoder import pretrain_encoder_decoder, sentence_chunks, training_pairs
from lmlab.tokenizers.bpe import save_tokenizer, train_bpe
from lmlab.tokenizers.encoder_decoder_bpe import MASK, train_encoder_decoder_bpe
from lmlab.training.encoder_decoder import fit_to_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE = dict(vocab_size=420, n_encoder_layers=1, n_decoder_layers=1, n_heads=2, d_model=32, d_ff=64)
TINY_ARGS = ["--vocab-size", "420", "--n-layers", "1", "--n-heads", "2", "--d-model", "32", "--d-ff", "64",
             "--max-steps", "4", "--batch-size", "4", "--block-size", "32", "--warmup-steps", "1", "--eval-every", "2",
             "--eval-batches", "1", "--checkpoint-every", "2", "--log-every", "1"]
TRAIN = TrainConfig(loop=LoopConfig(max_steps=4, batch_size=4, eval_every=2, checkpoint_every=2, log_every=1),
                    block_size=32, optim=OptimConfig(warmup_steps=1), eval_batches=1)


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preset, objective", [("t5-tiny", None), ("bart-tiny", None),
                                               ("transformer-tiny", "gap_sentences"),
                                               ("transformer-tiny", "span_corruption")])
def test_each_preset_trains_and_writes_a_model_that_loads_back(tmp_path, corpus_file, preset, objective):
    run = tmp_path / "run"
    extra = ["--objective", objective] if objective else []
    assert lmlab("train", "--model", preset, "--data", corpus_file, "--out", run, *TINY_ARGS, *extra) == 0
    metrics = rows(run)
    assert metrics[0]["step"] == 0 and "val_loss" in metrics[0] and [r["step"] for r in metrics[1:5]] == [1, 2, 3, 4]
    expected = objective or {"t5-tiny": "span_corruption", "bart-tiny": "denoising"}[preset]
    assert json.loads((run / "run.json").read_text())["objective"] == expected
    model, tokenizer = load_encoder_decoder(run / "model")
    assert model.config.family == preset.split("-")[0] and model.config.n_encoder_layers == 1
    if expected == "span_corruption":  # sentinels are single special tokens
        assert tokenizer.encode("a <extra_id_7> b").ids.count(tokenizer.token_to_id("<extra_id_7>")) == 1


def test_resume_gives_bit_identical_weights(tmp_path, corpus_file):
    cfg = preset("bart-tiny", **SHAPE)
    pretrain_encoder_decoder(cfg, TRAIN, str(corpus_file), tmp_path / "full", show_progress=False)
    first = pretrain_encoder_decoder(cfg, TRAIN, str(corpus_file), tmp_path / "split", stop_after=3,
                                     show_progress=False)
    assert not first.finished and first.step == 3 and first.model_dir is None
    second = pretrain_encoder_decoder(cfg, TRAIN, str(corpus_file), tmp_path / "split", resume=True,
                                      show_progress=False)
    assert second.finished and second.step == 4
    full, split = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("full", "split"))
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)


def test_chunks_are_whole_sentences_within_the_block():
    end = 0
    a, b, c, d = [5, 6, 7, 8, end], [9, 10, 11, end], [*range(20, 41), end], [1, 2, 3, 4, 5, 6, 7, end]
    assert sentence_chunks(a + b + c + d, {end}, block=12) == [a + b, c[:12], c[12:], d]  # c is longer than a block
    assert sentence_chunks([1, 2, end], {end}, block=12) == []  # under 8 tokens: nothing to corrupt


def test_objectives_corrupt_the_input_and_end_both_sides_with_eos(corpus_file):
    texts = corpus_file.read_text().splitlines()[:50]
    tok = train_encoder_decoder_bpe(texts, 420, "transformer", (*t5_sentinel_tokens(), MASK))
    cfg = fit_to_tokenizer(preset("transformer-tiny"), tok)
    chunk = tok.encode(" ".join(texts[:3])).ids[:60]
    sentinel0, mask = tok.token_to_id("<extra_id_0>"), tok.token_to_id(MASK)
    def pairs(name):
        return training_pairs(build_objective(REGISTRY[name], tok), cfg)(chunk, (0,))
    inputs, targets = pairs("span_corruption")
    assert sentinel0 in inputs and targets[0] == sentinel0 and inputs[-1] == targets[-1] == cfg.eos_id
    inputs, targets = pairs("denoising")
    assert targets == chunk + [cfg.eos_id] and mask in inputs and inputs[-1] == cfg.eos_id
    inputs, targets = pairs("gap_sentences")
    assert mask in inputs and 0 < len(targets) < len(chunk)


def test_span_noise_sets_how_much_span_corruption_drops(corpus_file):
    texts = corpus_file.read_text().splitlines()[:50]
    tok = train_encoder_decoder_bpe(texts, 420, "t5", t5_sentinel_tokens())
    cfg = fit_to_tokenizer(preset("t5-tiny"), tok)
    chunk = tok.encode(" ".join(texts[:5])).ids[:60]
    sentinels = set(tok.token_to_id(t) for t in t5_sentinel_tokens())
    for noise, dropped, spans in ((SpanNoise(), 9, 3), (SpanNoise(0.5, 8.0), 30, 4)):  # round(60 * d), round(n / l)
        objective = build_objective(REGISTRY["span_corruption"], tok, noise=noise)
        _, targets = training_pairs(objective, cfg)(chunk, (0,))
        assert sum(t in sentinels for t in targets) == spans and len(targets) - 1 - spans == dropped


def test_train_flags_set_the_span_noise_and_run_json_records_it(tmp_path, corpus_file):
    run = tmp_path / "run"
    assert lmlab("train", "--model", "t5-tiny", "--data", corpus_file, "--out", run, *TINY_ARGS,
                 "--noise-density", "0.5", "--mean-span-length", "8") == 0
    assert json.loads((run / "run.json").read_text())["span_noise"] == {"noise_density": 0.5, "mean_span_length": 8.0}


def test_span_flags_for_a_model_that_is_not_an_encoder_decoder_are_one_line(tmp_path, capsys, corpus_file):
    assert lmlab("train", "--model", "gpt2-tiny", "--data", corpus_file, "--out", tmp_path / "run",
                 "--noise-density", "0.5") == 2
    one_line_error(capsys, "--noise-density apply to encoder-decoder presets", "not to gpt2-tiny")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("density, span", [(0.0, 3.0), (1.0, 3.0), (0.5, 0.5)])
def test_span_noise_outside_its_range_is_one_clear_error(density, span):
    with pytest.raises(LmlabError, match="noise_density|mean_span_length"):
        SpanNoise(density, span)


@pytest.mark.parametrize("flags, fragments", [
    (["--objective", "mlm"], ["objective 'mlm' is unknown for an encoder-decoder", "span_corruption"]),
    (["--whole-word-masking"], ["--whole-word-masking do not apply to encoder-decoder preset t5-tiny"]),
    (["--n-kv-heads", "1"], ["--n-kv-heads do not apply to encoder-decoder preset t5-tiny"]),
    (["--compile"], ["--compile is not supported by encoder-decoder pre-training"]),
    (["--block-size", "4"], ["--block-size 4 must be at least 8"]),
    (["--noise-density", "1.5"], ["noise_density 1.5 must be between 0 and 1"]),
    (["--objective", "denoising", "--mean-span-length", "8"], ["--mean-span-length apply to span_corruption, not to denoising"]),
])
def test_bad_settings_are_one_line_and_write_nothing(tmp_path, capsys, corpus_file, flags, fragments):
    assert lmlab("train", "--model", "t5-tiny", "--data", corpus_file, "--out", tmp_path / "run", *TINY_ARGS,
                 *flags) == 2
    one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_without_the_sentinels_is_refused(tmp_path, capsys, corpus_file):
    save_tokenizer(train_bpe(corpus_file.read_text().splitlines()[:50], 300), tmp_path / "tok")
    assert lmlab("train", "--model", "t5-tiny", "--data", corpus_file, "--out", tmp_path / "run", *TINY_ARGS,
                 "--tokenizer", tmp_path / "tok") == 2
    one_line_error(capsys, "lacks", "span_corruption needs", "<extra_id_0>")
    assert not (tmp_path / "run").exists()

