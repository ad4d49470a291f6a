"""`lmlab list --presets`, `--families` and `--objectives`: one table each, every preset, family and objective."""

import pytest

from conftest import lmlab, one_line_error
from lmlab.models.presets import names
from lmlab.models.registry import FAMILIES
from lmlab.objectives.registry import REGISTRY as OBJECTIVES


def rows(capsys) -> list[list[str]]:
    return [line.split() for line in capsys.readouterr().out.splitlines()]


def test_presets_lists_every_preset_with_its_kind_and_family(capsys):
    assert lmlab("list", "--presets") == 0
    table = rows(capsys)
    assert table[0] == ["name", "kind", "family", "layers", "d_model", "heads", "vocab", "context", "settings"]
    assert [row[0] for row in table[1:]] == names()
    assert ["trigram-kn", "classic", "ngram", "-", "-", "-", "8192", "256", "order=3", "smoothing=kn"] in table


def test_families_lists_every_family_with_its_reader_and_presets(capsys):
    assert lmlab("list", "--families") == 0
    table = rows(capsys)
    assert table[0] == ["name", "kind", "model_type", "gguf", "read", "with", "trained", "with", "presets"]
    assert [row[0] for row in table[1:]] == list(FAMILIES)
    assert ["transformer", "encoder-decoder", "marian", "-", "lmlab.load_encoder_decoder", "denoising",
            "transformer-tiny,", "transformer-base"] in table
    assert ["llama", "decoder", "llama", "llama", "lmlab.load", "causal_lm"] == table[2][:6]
    assert table[-1][:5] == ["word2vec", "classic", "word2vec", "-", "`lmlab"]
    assert table[-1][-5:-2] == ["lmlab", "word2vec", "train"]


def test_objectives_lists_every_objective_with_its_kind_and_whose_default_it_is(capsys):
    assert lmlab("list", "--objectives") == 0
    table = rows(capsys)
    assert table[0][:4] == ["name", "kind", "default", "of"]
    assert [row[0] for row in table[1:]] == list(OBJECTIVES)
    assert ["span_corruption", "encoder-decoder", "t5"] == next(row for row in table if row[0] == "span_corruption")[:3]


def test_presets_and_families_are_one_or_the_other(capsys):
    with pytest.raises(SystemExit) as exit_:
        lmlab("list", "--presets", "--families")
    assert exit_.value.code == 2
    one_line_error(capsys, "--families", "not allowed with argument --presets")
