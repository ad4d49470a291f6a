"""The losses of encoder pre-training: masked-LM cross-entropy over the masked positions, plus the
sentence-pair loss (NSP or SOP) when the objective has one, and ELECTRA's (and DeBERTa-v3's)
generator MLM plus discriminator replaced-token detection. Each returns (loss, metrics to log)."""

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.objectives.replaced_token import RTD_WEIGHT, replace_with_samples
from lmlab.targets import IGNORE_INDEX

Batch = dict[str, torch.Tensor]  # ids, inputs, targets, attention, types (B, T) and labels (B,)


def masked_lm_losses(model: nn.Module, b: Batch, pair_task: str | None = None) -> tuple[torch.Tensor, dict]:
    """MLM loss over the masked positions (+ the sentence-pair loss of `pair_task`, "nsp" or "sop"),
    and their accuracies. `model` is an encoder with pre-training heads (`models.pretraining`)."""
    hidden = model(b["inputs"], b["attention"], b["types"])  # (B, T, C)
    chosen = b["targets"] != IGNORE_INDEX
    mlm_loss, logged = mlm_loss_and_accuracy(model.mlm_logits(hidden[chosen]), b["targets"][chosen])
    if pair_task is None:
        return mlm_loss, logged | {"loss": mlm_loss.item()}
    logits = model.pair_logits(hidden)  # (B, 2)
    pair_loss = F.cross_entropy(logits, b["labels"])
    loss = mlm_loss + pair_loss
    return loss, logged | {"loss": loss.item(), f"{pair_task}_loss": pair_loss.item(),
                           f"{pair_task}_acc": (logits.argmax(-1) == b["labels"]).float().mean().item()}


def electra_losses(model: nn.Module, b: Batch, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
    """ELECTRA and DeBERTa-v3: the generator's MLM loss + RTD_WEIGHT * the discriminator's replaced-token loss
    (the generator's samples, drawn with `generator`, carry no gradient)."""
    chosen = b["targets"] != IGNORE_INDEX
    logits = model.generator_logits(model.generator_states(b["inputs"], b["attention"], b["types"])[chosen])  # (N, V)
    mlm_loss, logged = mlm_loss_and_accuracy(logits, b["targets"][chosen])
    inputs, replaced = replace_with_samples(b["ids"], chosen, logits, generator)
    real = b["attention"].bool()
    rtd = model.rtd_logits(inputs, b["attention"], b["types"])[real]  # (n_real,)
    rtd_loss = F.binary_cross_entropy_with_logits(rtd, replaced[real])
    loss = mlm_loss + RTD_WEIGHT * rtd_loss
    return loss, logged | {"loss": loss.item(), "rtd_loss": rtd_loss.item(),
                           "rtd_acc": ((rtd > 0).float() == replaced[real]).float().mean().item(),
                           "replaced": replaced[real].mean().item()}


def mlm_loss_and_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Cross-entropy and accuracy of logits (N, V) against targets (N,); 0 when nothing was masked."""
    if targets.numel() == 0:
        return logits.sum() * 0.0, {"mlm_loss": 0.0, "mlm_acc": 0.0}
    loss = F.cross_entropy(logits, targets)
    return loss, {"mlm_loss": loss.item(), "mlm_acc": (logits.argmax(-1) == targets).float().mean().item()}
