"""The networks encoder pre-training trains, by the name an objective's record gives (`ObjectiveRecord.head`):
how each is built, what its loss is and how it is saved, so the encoder recipe asks its objective's
record instead of branching on the objective's name.

    masked_lm       the encoder, its masked-LM head and, with a sentence-pair task (NSP / SOP), the pair
                    head (`EncoderForPreTraining`); MLM (+ pair) loss; one HF directory, `model/`
    replaced_token  a small generator and the discriminator (`ElectraForPreTraining`); the generator's MLM
                    loss + RTD_WEIGHT * the discriminator's replaced-token loss; `model/` (the
                    discriminator, the model to fine-tune) and `generator/`

The table lives here, not in the objective registry, because objectives sit below models and losses
(docs/development.md, "Layout of src/lmlab/"): the record names a row, the training layer holds it.
A new kind of encoder pre-training is one row here and `head=` on its records.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lmlab.config import EncoderConfig
from lmlab.losses.masked_lm import Batch, electra_losses, masked_lm_losses
from lmlab.models.encoder_files import save_electra_dirs, save_pretraining_dir
from lmlab.models.pretraining import build_electra_for_pretraining, build_for_pretraining
from lmlab.objectives.registry import ObjectiveRecord


@dataclass(frozen=True)
class EncoderHead:
    """How encoder pre-training builds, trains and saves one kind of network."""

    build: Callable[[EncoderConfig, ObjectiveRecord], nn.Module]  # (cfg, objective) -> a fresh network
    # (model, batch, objective, generator) -> (loss, metrics); the generator draws what the step samples
    losses: Callable[[nn.Module, Batch, ObjectiveRecord, torch.Generator], tuple[torch.Tensor, dict]]
    save: Callable[[nn.Module, Path, object], Path]  # (model, run directory, tokenizer) -> the model directory


HEADS = {
    "masked_lm": EncoderHead(
        build=lambda cfg, objective: build_for_pretraining(cfg, sentence_pair=objective.pair_task is not None),
        losses=lambda model, b, objective, generator: masked_lm_losses(model, b, objective.pair_task),
        save=lambda model, out, tokenizer: save_pretraining_dir(model, out / "model", tokenizer)),
    "replaced_token": EncoderHead(
        build=lambda cfg, objective: build_electra_for_pretraining(cfg),
        losses=lambda model, b, objective, generator: electra_losses(model, b, generator),
        save=lambda model, out, tokenizer: save_electra_dirs(model, out / "model", out / "generator", tokenizer)[0]),
}
