"""Every setting is checked where it enters, before any work: a bad one is one line that names its
flag, and the refusal writes nothing."""

import math

import pytest

from conftest import lmlab, one_line_error
from lmlab.config import EncoderConfig, LoopConfig, ModelConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.generation.config import GenerationConfig
from lmlab.models.elmo.config import ElmoConfig
from lmlab.models.presets import preset
from lmlab.models.rnn.config import RNNConfig
from lmlab.models.window.config import WindowConfig
from lmlab.models.word2vec.config import Word2VecConfig
from lmlab.recipes.dpo import DPOConfig
from lmlab.recipes.ppo import PPOConfig
from lmlab.training.post_training import PostTrainConfig

TINY = dict(family="gpt2", vocab_size=300, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)
ENCODER = dict(vocab_size=300, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)


@pytest.mark.parametrize("build, message", [
    (lambda: ModelConfig(**TINY | {"n_heads": 0}), "--n-heads 0 must be at least 1"),
    (lambda: ModelConfig(**TINY | {"d_model": -32}), "--d-model -32 must be at least 1"),
    (lambda: ModelConfig(**TINY | {"n_layers": 10**6}), "--n-layers 1000000 is more than lmlab supports"),
    (lambda: ModelConfig(**TINY | {"context_length": 2**32}), "--context-length 4294967296 is more than"),
    (lambda: ModelConfig(**TINY | {"n_layers": "4"}), "--n-layers '4' must be a whole number"),
    (lambda: ModelConfig(**TINY | {"norm_eps": math.nan}), "--norm-eps nan must be a finite number"),
    (lambda: ModelConfig(**TINY | {"rope_base": 0.0}), "--rope-base 0.0 must be greater than 0"),
    (lambda: ModelConfig(**TINY | {"dropout": 1.0}), "--dropout 1.0 must lie in [0, 1)"),
    (lambda: ModelConfig(**TINY | {"norm": "batchnorm"}), "--norm 'batchnorm' is not one of"),
    (lambda: ModelConfig(**TINY | {"d_model": 2**17, "d_ff": 2**17, "n_layers": 1000}), "about 1.2e+14 weights"),
    (lambda: preset("llama-tiny", d_model=132, n_heads=4), "rotary positions need an even head size"),
    (lambda: EncoderConfig(**ENCODER | {"type_vocab_size": 0}), "--type-vocab-size 0 must be at least 1"),
    (lambda: EncoderConfig(**ENCODER | {"layer_norm_eps": -1.0}), "--layer-norm-eps -1.0 must be greater than 0"),
    (lambda: preset("t5-tiny", n_decoder_layers=0), "--n-decoder-layers 0 must be at least 1"),
    (lambda: preset("t5-tiny", max_source_length=2**32), "--max-source-length 4294967296 is more"),
    (lambda: LoopConfig(max_steps=1000, batch_size=0), "--batch-size 0 must be at least 1"),
    (lambda: LoopConfig(max_steps=1000, batch_size=16, grad_accum=0), "--grad-accum 0 must be at least 1"),
    (lambda: OptimConfig(lr=math.inf), "--lr inf must be a finite number"),
    (lambda: TrainConfig(val_fraction=1.0), "--val-fraction 1.0 must lie in [0, 1)"),
    (lambda: LoopConfig(max_steps=1000, batch_size=16, seed=-1), "--seed -1 must be at least 0"),
    (lambda: PostTrainConfig(lora_rank=0), "--lora-rank 0 must be at least 1"),
    (lambda: LoopConfig(max_steps=0, batch_size=8), "--max-steps 0 must be at least 1"),
    (lambda: OptimConfig(warmup_ratio=1.5), "--warmup-ratio 1.5 must lie in [0, 1)"),
    (lambda: PPOConfig(gamma=2.0), "--gamma 2.0 must lie in [0, 1]"),
    (lambda: DPOConfig(beta=0.0), "--beta 0.0 must be positive"),
    (lambda: DPOConfig(sample_max_new_tokens=0), "--sample-max-new-tokens 0 must be at least 1"),
    (lambda: GenerationConfig(num_beams=0), "--beams 0 must be at least 1"),
    (lambda: GenerationConfig(max_new_tokens=2**32), "--max-new-tokens 4294967296 is more than"),
    (lambda: GenerationConfig(temperature=math.nan), "--temperature nan must be a finite number"),
    (lambda: RNNConfig(cell="gru", vocab_size=300, n_layers=10**6), "--n-layers 1000000 is more than"),
    (lambda: WindowConfig(vocab_size=300, window=0), "--window 0 must be at least 1"),
    (lambda: Word2VecConfig(dim=0), "--dim 0 must be at least 1"),
    (lambda: ElmoConfig(vocab_size=300, n_layers=10**6), "--n-layers 1000000 is more than"),
])
def test_a_bad_setting_is_refused_by_its_flag(build, message):
    with pytest.raises(LmlabError) as refused:
        build()
    assert message in str(refused.value) and "\n" not in str(refused.value)


# Each command refuses its bad setting before reading data, training a tokenizer or loading a model:
# before this, `train --batch-size 0` trained the tokenizer and left run.json and tokenizer.json behind.
TINY_FLAGS = ["--vocab-size", "300", "--context-length", "32", "--n-layers", "2", "--n-heads", "2", "--d-model",
              "32", "--d-ff", "64"]


@pytest.mark.parametrize("args, message", [
    (["train", "--model", "gpt2-tiny", *TINY_FLAGS, "--batch-size", "0"], "--batch-size 0 must be at least 1"),
    (["train", "--model", "gpt2-tiny", *TINY_FLAGS, "--block-size", "100000"],
     "--block-size 100000 exceeds the model's context of 32 tokens"),
    (["train", "--model", "llama-tiny", "--n-layers", "1000000"], "--n-layers 1000000 is more than"),
    (["train", "--model", "gpt2-tiny", "--batch-size", "6", "--grad-accum", "4"],
     "--batch-size 6 is not divisible by --grad-accum 4"),
    (["train", "--arch", "lstm", "--hidden", "0"], "--hidden 0 must be at least 1"),
    (["train", "--arch", "ngram", "--val-fraction", "1.5"], "--val-fraction 1.5 must lie in [0, 1)"),
    (["train", "--model", "bert-tiny", "--batch-size", "0"], "--batch-size 0 must be at least 1"),
    (["train", "--model", "t5-tiny", "--max-steps", "0"], "--max-steps 0 must be at least 1"),
    (["sft", "--model", "no-such-model", "--batch-size", "0"], "--batch-size 0 must be at least 1"),
    (["dpo", "--model", "no-such-model", "--lr", "0"], "--lr 0.0 must be greater than 0"),
    (["ppo", "--model", "no-such-model", "--ppo-epochs", "0"], "--ppo-epochs 0 must be at least 1"),
    (["reward", "--model", "no-such-model", "--max-steps", "-1"], "--max-steps -1 must be at least 1"),
    (["word2vec", "train", "--dim", "0"], "--dim 0 must be at least 1"),
    (["elmo", "train", "--d-model", "0"], "--d-model 0 must be at least 1"),
    (["seq2seq", "train", "--hidden", "3"], "--hidden 3 must be an even number"),
])
def test_a_command_refuses_a_bad_setting_before_any_work(tmp_path, corpus_file, capsys, args, message):
    data = [] if args[0] in ("seq2seq",) else ["--data", "task" if args[0] in ("sft", "dpo", "ppo", "reward")
                                              else corpus_file]
    assert lmlab(*args, *data, "--out", tmp_path / "out") == 2
    one_line_error(capsys, message)
    assert not (tmp_path / "out").exists()
