"""The networks encoder pre-training trains, by `ObjectiveRecord.head`: every encoder objective names a
row of `HEADS`, and every row is some objective's (the recipes' runs of each are in
tests/recipes/test_pretrain_encoder.py)."""

from lmlab.objectives.registry import REGISTRY
from lmlab.training.encoder_heads import HEADS


def test_every_encoder_objective_names_a_head_and_every_head_is_named():
    named = {record.head for record in REGISTRY.values() if record.kind == "encoder"}
    assert named == set(HEADS)
