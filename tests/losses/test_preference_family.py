"""The DPO family (dpo, cdpo, robust, ipo, simpo, orpo) and KTO against TRL's own loss code on the same
log-probs: TRL's trainers compute their losses inside their forward code, so each is called with a
stand-in for the trainer (its settings) and for the model (per-token log-probs from a table)."""

import types
from collections import defaultdict

import pytest
import torch

from lmlab.losses.dpo import PREFERENCE_LOSSES, preference_loss
from lmlab.losses.kto import kto_loss

pytestmark = pytest.mark.parity
trl = pytest.importorskip("trl")

CASES = range(25)
TOKEN_LOGPS = -torch.rand(512, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 4  # token id -> logp


def accelerator() -> types.SimpleNamespace:
    same = lambda x: x  # noqa: E731 (one process: gathering changes nothing)
    return types.SimpleNamespace(device=torch.device("cpu"), gather=same, gather_for_metrics=same)


def table_model(**kwargs) -> types.SimpleNamespace:
    """A stand-in for TRL's model under `fused_lm_head`: the log-prob of each labelled next token is
    TOKEN_LOGPS[token], 0 where the label is -100."""
    labels = kwargs["labels"][:, 1:]  # (N, T-1)
    logps = torch.where(labels == -100, 0.0, TOKEN_LOGPS[labels.clamp(min=0)])
    zeros = torch.zeros_like(logps)
    return types.SimpleNamespace(log_probs=logps, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool())


def completions(n: int, rng: torch.Generator, width: int = 14) -> dict:
    """`n` random sequences: a prompt of 1-4 tokens, an answer of 1 token or more, then padding."""
    input_ids = torch.randint(1, len(TOKEN_LOGPS), (n, width), generator=rng)
    completion_mask = torch.zeros(n, width, dtype=torch.long)
    for row in range(n):
        start = int(torch.randint(1, 5, (1,), generator=rng))
        end = int(torch.randint(start + 1, width + 1, (1,), generator=rng))
        completion_mask[row, start:end] = 1
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "completion_mask": completion_mask}


def summed(batch: dict, prefix: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """lmlab's inputs from a TRL batch: each answer's summed log-prob and its token count."""
    ids, mask = batch[f"{prefix}input_ids"], batch[f"{prefix}completion_mask"].bool()
    return torch.where(mask, TOKEN_LOGPS[ids], 0.0)[:, 1:].sum(1), mask.sum(1).double()


def trainer(**settings) -> types.SimpleNamespace:
    return types.SimpleNamespace(model=types.SimpleNamespace(training=True), accelerator=accelerator(),
                                 aux_loss_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)),
                                 _total_train_tokens=0, _tp_size=1, **settings)


def trl_dpo(loss_type: str, batch: dict, beta: float, label_smoothing: float) -> torch.Tensor:
    """DPOTrainer's loss (TRL 1.x) with reference log-probs precomputed."""
    this = trainer(ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type],
                   loss_weights=[1.0], beta=beta, label_smoothing=label_smoothing, use_weighting=False)
    return trl.DPOTrainer._compute_loss(this, table_model, batch, False)


def trl_pairwise(cls, batch: dict, nll: torch.Tensor, **settings) -> torch.Tensor:
    """CPOTrainer's or ORPOTrainer's loss on the mean log-probs per token of the answers."""
    logps, lengths = summed(batch)
    chosen, rejected = (logps / lengths).chunk(2)
    this = trainer(**settings)
    this.concatenated_forward = lambda model, inputs: (chosen, rejected, chosen, rejected, nll)
    for name in ("cpo_loss", "odds_ratio_loss"):  # the loss of the one, or of the other
        if hasattr(cls, name):
            setattr(this, name, types.MethodType(getattr(cls, name), this))
    return cls.get_batch_loss_metrics(this, None, batch)[0]


def case(seed: int) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, float, float]:
    """A random batch of pairs (TRL's layout: B chosen rows, then B rejected), lmlab's (B, 2) log-probs,
    token counts and reference log-probs, beta and e."""
    rng = torch.Generator().manual_seed(seed)
    n_pairs = int(torch.randint(1, 7, (1,), generator=rng))
    batch = completions(2 * n_pairs, rng)
    reference = -torch.rand(n_pairs, 2, dtype=torch.float64, generator=rng) * 30
    batch |= {"ref_chosen_logps": reference[:, 0], "ref_rejected_logps": reference[:, 1]}
    logps, lengths = summed(batch)
    beta = float(torch.empty(1).uniform_(0.05, 3.0, generator=rng))
    label_smoothing = float(torch.empty(1).uniform_(0.0, 0.45, generator=rng))
    return batch, logps.view(2, -1).T, lengths.view(2, -1).T, reference, beta, label_smoothing


@pytest.mark.parametrize("loss,trl_name", [("dpo", "sigmoid"), ("ipo", "ipo"), ("robust", "robust")])
def test_dpo_ipo_and_robust_match_trls_dpo_trainer(loss, trl_name):
    for seed in CASES:
        batch, policy, lengths, reference, beta, e = case(seed)
        ours, _, _ = preference_loss(loss, policy, lengths, reference, beta, e if loss == "robust" else 0.0)
        assert torch.allclose(ours, trl_dpo(trl_name, batch, beta, e), atol=1e-6, rtol=0), (loss, seed)


def test_cdpo_matches_trls_label_smoothed_sigmoid_on_the_log_ratios():
    """cDPO is TRL's "sigmoid" with label_smoothing (DPOTrainer before 1.0, CPOTrainer's on log-ratios now)."""
    cpo = pytest.importorskip("trl.experimental.cpo").CPOTrainer
    for seed in CASES:
        batch, policy, lengths, reference, beta, e = case(seed)
        ours, _, _ = preference_loss("cdpo", policy, lengths, reference, beta, e)
        ratios = policy - reference
        this = trainer(loss_type="sigmoid", beta=beta, label_smoothing=e, alpha=0.0)
        theirs, _, _ = cpo.cpo_loss(this, ratios[:, 0], ratios[:, 1])
        assert torch.allclose(ours, theirs.mean(), atol=1e-6, rtol=0), seed


def test_simpo_matches_trls_cpo_trainer_with_loss_type_simpo():
    cpo = pytest.importorskip("trl.experimental.cpo").CPOTrainer
    for seed in CASES:
        batch, policy, lengths, _, beta, e = case(seed)
        gamma = seed / 20
        ours, _, _ = preference_loss("simpo", policy, lengths, None, beta, e, gamma)
        theirs = trl_pairwise(cpo, batch, torch.tensor(7.0), loss_type="simpo", beta=beta, label_smoothing=e,
                              simpo_gamma=gamma, alpha=0.0, cpo_alpha=0.0)
        assert torch.allclose(ours, torch.as_tensor(theirs, dtype=ours.dtype), atol=1e-6, rtol=0), seed


def test_orpo_matches_trls_orpo_trainer_given_the_same_nll():
    """ORPO = NLL - beta * mean log sigma(log odds ratio): TRL's combination and odds-ratio code, fed the NLL
    lmlab computes (the mean over the chosen answers' tokens; TRL's also counts the prompt's)."""
    orpo = pytest.importorskip("trl.experimental.orpo").ORPOTrainer
    for seed in CASES:
        batch, policy, lengths, _, beta, _ = case(seed)
        nll = -policy[:, 0].sum() / lengths[:, 0].sum()
        ours, _, _ = preference_loss("orpo", policy, lengths, None, beta)
        theirs = trl_pairwise(orpo, batch, nll, beta=beta)
        assert torch.allclose(ours, theirs, atol=1e-6, rtol=0), seed


def test_kto_matches_trls_kto_trainer_with_mismatched_pairs_for_the_reference_point():
    for seed in CASES:
        rng = torch.Generator().manual_seed(seed)
        n = int(torch.randint(1, 9, (1,), generator=rng))
        batch = completions(n, rng)
        batch |= {f"KL_{k}": v for k, v in completions(n, rng).items()}
        batch["label"] = torch.rand(n, generator=rng) < 0.5
        reference, reference_kl = (-torch.rand(n, dtype=torch.float64, generator=rng) * 30 for _ in range(2))
        batch |= {"ref_logps": reference, "ref_KL_logps": reference_kl}
        beta, weights = 0.05 + seed / 20, (1.0 + seed % 3 / 3, 1.0 + seed % 5 / 5)
        this = trainer(calculate_KL=True, precompute_ref_logps=True, loss_type="kto", beta=beta,
                       desirable_weight=weights[0], undesirable_weight=weights[1])
        this._compute_kl_logps = types.MethodType(trl.KTOTrainer._compute_kl_logps, this)
        theirs = trl.KTOTrainer._compute_loss(this, table_model, batch, False)
        ours, _, _ = kto_loss(summed(batch)[0], reference, batch["label"], summed(batch, "KL_")[0], reference_kl, beta,
                              *weights)
        assert torch.allclose(ours, theirs, atol=1e-6, rtol=0), seed


def test_dpo_is_cdpo_and_robust_without_smoothing_and_every_name_is_known():
    batch, policy, lengths, reference, beta, _ = case(3)
    dpo = preference_loss("dpo", policy, lengths, reference, beta)[0]
    for loss in ("cdpo", "robust"):
        assert torch.allclose(preference_loss(loss, policy, lengths, reference, beta, 0.0)[0], dpo)
    assert set(PREFERENCE_LOSSES) == {"dpo", "ipo", "cdpo", "robust", "simpo", "orpo"}
    with pytest.raises(ValueError, match="dpo, ipo, cdpo, robust, simpo, orpo"):
        preference_loss("kto", policy, lengths, reference)
