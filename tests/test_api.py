"""The front door: `import lmlab` is cheap, each name is the deep function itself, `lmlab.train` picks the recipe."""

import subprocess
import sys

import pytest

import lmlab
from conftest import TINY_MODEL
from conftest import lmlab as run_cli
from lmlab.config import ENCODER_PRESETS, EncoderConfig, ModelConfig
from lmlab.config import PRESETS as DECODER_PRESETS
from lmlab.errors import LmlabError
from lmlab.models.elmo.config import ELMO_PRESETS
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS, EncoderDecoderConfig
from lmlab.models.gemma2.family import PRESETS as GEMMA2_PRESETS
from lmlab.models.gemma3.family import PRESETS as GEMMA3_PRESETS
from lmlab.models.load import load
from lmlab.models.mistral.family import PRESETS as MISTRAL_PRESETS
from lmlab.models.ngram.model import NGRAM_PRESETS
from lmlab.models.olmo2.family import PRESETS as OLMO2_PRESETS
from lmlab.models.phi3.family import PRESETS as PHI3_PRESETS
from lmlab.models.presets import names, preset
from lmlab.models.qwen2.family import PRESETS as QWEN2_PRESETS
from lmlab.models.qwen3.family import PRESETS as QWEN3_PRESETS
from lmlab.models.rnn.config import RNN_PRESETS, RNNConfig
from lmlab.models.seq2seq.config import SEQ2SEQ_PRESETS
from lmlab.models.window.config import WINDOW_PRESETS
from lmlab.models.word2vec.config import WORD2VEC_PRESETS
from lmlab.recipes.sft import sft

pytestmark = pytest.mark.usefixtures("one_thread")


def test_import_lmlab_loads_no_torch():
    code = "import sys, lmlab; assert 'torch' not in sys.modules, 'torch imported'; print(len(dir(lmlab)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == len(lmlab.__all__)


def test_names_are_the_deep_functions():
    assert lmlab.load is load and lmlab.sft is sft
    for name in lmlab.__all__:
        assert getattr(lmlab, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'lod'"):
        _ = lmlab.lod


def test_a_renamed_name_still_works_for_a_release_and_names_its_replacement():
    assert lmlab._RENAMED  # old name -> new name (FinetuneConfig -> PostTrainConfig)
    for old, new in lmlab._RENAMED.items():
        with pytest.warns(DeprecationWarning, match=f"lmlab.{old} is deprecated; use lmlab.{new}"):
            assert getattr(lmlab, old) is getattr(lmlab, new)
        assert old not in lmlab.__all__ and new in lmlab.__all__


def test_train_picks_the_recipe_from_the_config(tmp_path, tiny_train):
    result = lmlab.train(lmlab.preset("llama-tiny", **TINY_MODEL), tiny_train, "markov", tmp_path / "decoder",
                         show_progress=False)
    model, tokenizer = lmlab.load(result.model_dir)
    assert model.config.family == "llama" and tokenizer.vocab_size <= 300
    encoder_cfg = preset("bert-tiny", vocab_size=300, context_length=32, n_layers=1, n_heads=2,
                                 d_model=32, d_ff=64)
    encoder_result = lmlab.train(encoder_cfg, tiny_train, "markov", tmp_path / "encoder", show_progress=False)
    assert lmlab.load_encoder(encoder_result.model_dir)[0].config.n_layers == 1
    with pytest.raises(LmlabError, match="a TrainConfig is the config of no family"):
        lmlab.train(tiny_train, tiny_train, "markov", tmp_path / "nothing")
    with pytest.raises(LmlabError, match="does not train word2vec models; train them with `lmlab word2vec train`"):
        lmlab.train(lmlab.preset("word2vec-sgns"), tiny_train, "markov", tmp_path / "nothing")


def test_one_preset_registry_serves_every_kind(capsys):
    assert isinstance(lmlab.preset("gpt2-tiny"), ModelConfig)
    assert isinstance(lmlab.preset("bert-tiny", n_layers=1), EncoderConfig) and lmlab.preset("bert-tiny", n_layers=1).n_layers == 1
    assert isinstance(lmlab.preset("t5-tiny"), EncoderDecoderConfig)
    assert isinstance(lmlab.preset("lstm-small"), RNNConfig) and lmlab.preset("lstm-small").cell == "lstm"
    tables = [DECODER_PRESETS, MISTRAL_PRESETS, QWEN2_PRESETS, QWEN3_PRESETS, GEMMA2_PRESETS, GEMMA3_PRESETS,
              PHI3_PRESETS, OLMO2_PRESETS, ENCODER_PRESETS, ENCODER_DECODER_PRESETS, NGRAM_PRESETS, WINDOW_PRESETS,
              RNN_PRESETS, SEQ2SEQ_PRESETS, ELMO_PRESETS, WORD2VEC_PRESETS]
    assert set(names()) == set().union(*tables) and len(names()) == sum(len(table) for table in tables)
    with pytest.raises(LmlabError, match="lmlab list --presets"):
        lmlab.preset("gpt5")
    assert run_cli("list", "--presets") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["name", "kind", "family"] and len(lines) == len(names()) + 1
    assert any(line.split()[:3] == ["bart-tiny", "encoder-decoder", "bart"] for line in lines)
    assert any(line.split()[:3] == ["lstm-small", "classic", "rnn"] for line in lines)
