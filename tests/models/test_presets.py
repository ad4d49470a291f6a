"""Every preset, of every kind, comes from `preset(name)`: each belongs to one family, builds with that
family's builder, and takes overrides checked like the preset itself."""

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.models.presets import family_of, kind, names, preset, summary
from lmlab.models.registry import FAMILIES


def test_each_preset_belongs_to_the_family_that_lists_it():
    for name in names():
        family, cfg = family_of(name), preset(name)
        assert getattr(cfg, "family", getattr(cfg, "model_type", family.name)) == family.name, name
        assert isinstance(cfg, family.config_class) and kind(name) == family.kind, name
    assert sum(len(family.presets) for family in FAMILIES.values()) == len(set(names())), "one name, two families"


@pytest.mark.parametrize("name", [name for name in names() if family_of(name).build is not None])
def test_every_preset_builds_with_its_family_builder(name):
    with torch.device("meta"):  # shapes only: the 800k-word ELMo and SmolLM2 cost nothing
        model = family_of(name).build(preset(name))
    assert sum(p.numel() for p in model.parameters()) > 0


def test_classic_presets_take_checked_overrides():
    assert preset("lstm-small", hidden=64, d_model=64).hidden == 64
    assert preset("seq2seq-dot", src_vocab_size=40).attention == "dot"
    with pytest.raises(LmlabError, match="n-gram order 0 must be at least 1"):
        preset("trigram-kn", order=0)
    with pytest.raises(LmlabError, match=r"unknown word2vec setting\(s\) \['n_heads'\]"):
        preset("word2vec-sgns", n_heads=2)
    assert preset("gru-small") is FAMILIES["rnn"].presets["gru-small"]
    with pytest.raises(LmlabError, match="unknown preset 'lstm-huge'.*lstm-small"):
        kind("lstm-huge")


def test_a_summary_shows_what_the_family_has_and_dashes_the_rest():
    assert summary("5gram-mkn") == {"name": "5gram-mkn", "kind": "classic", "family": "ngram", "layers": "-",
                                    "d_model": "-", "heads": "-", "vocab": "8192", "context": "256",
                                    "settings": "order=5 smoothing=mkn"}
    assert summary("t5-small")["layers"] == "6+6" and summary("t5-small")["settings"] == "-"
    assert summary("lstm-medium")["settings"] == "cell=lstm hidden=650"
