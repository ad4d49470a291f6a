"""PPO from a reward, with a KL penalty to the reference policy: the RL step of RLHF (InstructGPT).

Read top to bottom: prompts (a JSONL file of chats to reply to, or the embedded addition task)
-> the policy: the model with a PEFT method applied, and a value head on its hidden states ->
every `ppo_epochs` steps a rollout: a sampled reply to each of `batch_size` prompts, scored by a
reward function or a reward model; under the policy (old), the reference (the same network with
its adapters off, or a frozen copy: `training.preference.frozen_reference`) and the value head, the
log-probs and values of the sampled tokens (`rollout`) -> per-token rewards (the score on the last
token, -beta * log(pi / pi_ref) on each; `losses.kl`) -> GAE advantages (whitened) and returns
(`losses.ppo`) -> `ppo_epochs` optimizer steps on that rollout, each minimising the clipped policy
loss + vf_coef * the clipped value loss (`ppo_loss`; + ptx_coef * the LM loss on pre-training text:
PPO-ptx) -> beta adapted towards a target KL, or fixed.

A rollout is made from the step number alone (its prompts by `batch_indices`, its samples by a
seed derived from it) and kept in the checkpoint with beta, so a resumed run continues exactly.
Logged per step: reward (the score alone), KL to the reference (per reply, summed over its
tokens), beta, entropy, clip fraction, value loss, reply length; on the task, the greedy replies'
reward before and after.
"""

import dataclasses
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lmlab.data.blocks import batch_starts, gather
from lmlab.data.corpora import load_corpus
from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.heads.reward import ScalarHead
from lmlab.losses.cross_entropy import cross_entropy, token_logprobs
from lmlab.losses.kl import AdaptiveKLController, FixedKLController, kl_penalty, shaped_rewards
from lmlab.losses.ppo import entropy_from_logits, gae, ppo_policy_loss, ppo_value_loss, whiten
from lmlab.objectives.registry import REGISTRY
from lmlab.objectives.sft import response_batch
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.alignment_configs import PPOConfig
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.loop import evaluated, log_before, part_of, run_steps
from lmlab.training.post_train_config import TASK
from lmlab.training.post_training import (
    PostTrainConfig,
    PostTrainResult,
    batch_indices,
    finish,
    load_tunable,
    run_settings,
    split_examples,
    start_tuning,
    unique,
)
from lmlab.training.preference import Logits, frozen_reference
from lmlab.training.rewards import RewardFn, load_prompts, reward_source
from lmlab.training.task_score import task_score

PRETRAINING_MIX = REGISTRY["causal_lm"]  # PPO-ptx: the policy keeps its causal-LM loss on pre-training text


class PolicyWithValue(nn.Module):
    """The policy (a decoder) and a value head on its final hidden states: one pass gives both."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.value_head = ScalarHead(policy.config.d_model).to(next(policy.parameters()).device)
        nn.init.zeros_(self.value_head.proj.weight)  # values start at 0: no made-up advantages at first
        nn.init.zeros_(self.value_head.proj.bias)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids (B, T) -> logits (B, T, V), values (B, T)."""
        hidden = self.policy.hidden_states(input_ids)  # (B, T, C)
        return self.policy.logits(hidden), self.value_head(hidden)


def ppo(model: str | Path, data: str, out: str | Path, cfg: PostTrainConfig = PostTrainConfig(),
        ppo_cfg: PPOConfig = PPOConfig(), reward_fn: str | None = None, reward_model: str | Path | None = None,
        adapter: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
        device: str = "auto", show_progress: bool = True) -> PostTrainResult:
    """Optimise `model` (a zoo name, model or run directory, .gguf) for a reward on the prompts in
    `data` (a JSONL file of {"messages": [...]}, the reply left out, or "task") into run directory
    `out`. The reward is `reward_fn` ("module:function", called with the prompt's messages and the
    reply text) or the reward model of a `lmlab reward` run directory; on the task the task's own
    reward by default. `adapter`, `stop_after` and `resume` work as for `recipes.sft.sft`."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    prompts = load_prompts(data, cfg)
    score = reward_source(data, reward_fn, reward_model, cfg.block_size)
    train, val = split_examples(prompts, cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)
    agent = PolicyWithValue(tuned.model)
    reference = frozen_reference(tuned, adapter)
    settings = run_settings("ppo", tuned, data, prompts, cfg, adapter, reward_fn=reward_fn,
                            reward_model=str(reward_model) if reward_model else None, **dataclasses.asdict(ppo_cfg))
    session = start_tuning(out, agent, cfg, settings, ckpt)
    if ppo_cfg.ptx_coef > 0 and ppo_cfg.ptx_batch_size % session.parts:
        raise LmlabError(f"--ptx-batch-size {ppo_cfg.ptx_batch_size} must be a multiple of the processes x "
                         f"--grad-accum ({session.parts})")
    kl_control = (AdaptiveKLController(ppo_cfg.kl_coef, ppo_cfg.kl_target, ppo_cfg.kl_horizon)
                  if ppo_cfg.adaptive_kl else FixedKLController(ppo_cfg.kl_coef))
    kl_control.value = session.state.get("kl_coef", kl_control.value)
    ptx = ptx_blocks(ppo_cfg, tuned.tokenizer) if ppo_cfg.ptx_coef > 0 else None

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        """PPO's loss on part `part` of the step's rollout. Every process samples the whole rollout (the
        same replies: same weights, same seed) and trains on its part, so the KL controller stays in step."""
        index = step // ppo_cfg.ppo_epochs
        if session.state.get("rollout", {}).get("index") != index:
            rows = [train[i] for i in batch_indices(len(train), cfg.loop.batch_size, index, cfg.loop.seed)]
            session.state["rollout"] = evaluated(agent, lambda: rollout(
                agent, reference, tuned.tokenizer, rows, score, ppo_cfg, kl_control,
                seed=cfg.loop.seed * 1_000_003 + index) | {"index": index})
            session.state["kl_coef"] = kl_control.value
        batch = {key: part_of(value, part, parts) if torch.is_tensor(value) else value
                 for key, value in session.state["rollout"].items()}
        loss, logged = ppo_loss(agent, batch, ppo_cfg)
        if ptx is not None:
            tokens, starts = ptx
            block = gather(tokens, part_of(batch_starts(starts, ppo_cfg.ptx_batch_size, step, cfg.loop.seed), part,
                                          parts), ppo_cfg.ptx_block_size)
            inputs, targets = PRETRAINING_MIX.batch(block)  # (B, ptx_block_size) each
            ptx_loss = cross_entropy(tuned.model(inputs.to(tuned.device)), targets.to(tuned.device))
            loss = loss + ppo_cfg.ptx_coef * ptx_loss
            logged["ptx_loss"] = ptx_loss.item()
        return loss, logged

    graded_prompts = unique(val)[:cfg.task_eval_size] if data == TASK else []

    def graded() -> dict:
        return task_score(tuned.model, tuned.tokenizer, graded_prompts) if graded_prompts else {}

    log_before(session, graded)
    finished = run_steps(session, step_loss, None, stop_after, show_progress,
                         curves={"reward": "reward", "KL to reference": "kl"}, ylabel="reward / KL (nats)")
    return finish(session, tuned, finished, graded)


def rollout(agent: PolicyWithValue, reference: Logits, tokenizer: TextTokenizer, prompts: list[list[dict]],
            score: RewardFn, ppo_cfg: PPOConfig, kl_control: AdaptiveKLController | FixedKLController,
            seed: int) -> dict:
    """Sample a reply to each prompt (at `seed`), score it, and evaluate it under the policy (old), the
    reference and the value head: what `ppo_loss` trains on for `ppo_epochs` steps. Call it without
    gradients, in eval mode (`evaluated`); it updates `kl_control` with the rollout's KL."""
    device = next(agent.parameters()).device
    queries = [tokenizer.encode(chat_prompt(tokenizer, prompt)) for prompt in prompts]
    config = GenerationConfig(max_new_tokens=ppo_cfg.max_new_tokens, temperature=ppo_cfg.temperature,
                              eos_id=tokenizer.stop_ids, seed=seed)
    replies = generate_batch(agent.policy, queries, config, tokenizer)
    responses = [r.sampled_ids for r in replies]
    inputs, targets, mask = response_batch(queries, responses, tokenizer)  # (B, T) each
    inputs, targets, mask = inputs.to(device), targets.to(device), mask.to(device)
    scores = torch.tensor([score(prompt, r.text) for prompt, r in zip(prompts, replies)], device=device)
    logits, values = agent(inputs)
    old_logprobs = token_logprobs(logits / ppo_cfg.temperature, targets)  # (B, T), the sampling policy's
    ref_logprobs = token_logprobs(reference(inputs) / ppo_cfg.temperature, targets)
    rewards = shaped_rewards(scores, old_logprobs, ref_logprobs, mask, kl_control.value)
    advantages, returns = gae(rewards, values, mask, ppo_cfg.gamma, ppo_cfg.lam)
    kl = (torch.where(mask.bool(), kl_penalty(old_logprobs, ref_logprobs), 0.0).sum(1)).mean().item()
    logged = {"reward": scores.mean().item(), "kl": kl, "kl_coef": kl_control.value,
              "reply_tokens": mask.sum(1).float().mean().item()}
    kl_control.update(kl, len(prompts))
    return {"inputs": inputs, "targets": targets, "mask": mask, "old_logprobs": old_logprobs,
            "old_values": values, "advantages": whiten(advantages, mask), "returns": returns, "logged": logged}


def ppo_loss(agent: PolicyWithValue, batch: dict, ppo_cfg: PPOConfig) -> tuple[torch.Tensor, dict]:
    """The clipped policy loss + vf_coef * the clipped value loss on (a part of) a rollout, and what
    is logged: the rollout's own measures, both losses, the clip fraction, approximate KL, entropy."""
    logits, values = agent(batch["inputs"])
    logits = logits / ppo_cfg.temperature  # the policy PPO improves is the one that samples
    logprobs = token_logprobs(logits, batch["targets"])
    policy_loss, clip_fraction, approx_kl = ppo_policy_loss(
        logprobs, batch["old_logprobs"], batch["advantages"], batch["mask"], ppo_cfg.clip)
    value_loss = ppo_value_loss(values, batch["old_values"], batch["returns"], batch["mask"], ppo_cfg.value_clip)
    loss = policy_loss + ppo_cfg.vf_coef * value_loss
    logged = batch["logged"] | {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                                "clip_fraction": clip_fraction.item(), "approx_kl": approx_kl.item(),
                                "entropy": entropy_from_logits(logits.detach(), batch["mask"]).item()}
    return loss, logged


def ptx_blocks(ppo_cfg: PPOConfig, tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """The PPO-ptx pre-training text as one token array (documents joined by eos) and the start
    offsets of its blocks."""
    eos = tokenizer.eos_id if tokenizer.eos_id is not None else 0
    ids: list[int] = []
    for text in load_corpus(ppo_cfg.ptx_data):
        ids += tokenizer.encode(text) + [eos]
        if len(ids) > 200 * (ppo_cfg.ptx_block_size + 1):  # enough blocks for a run; the rest is not read
            break
    if len(ids) < 2 * (ppo_cfg.ptx_block_size + 1):
        raise LmlabError(f"--ptx-data {ppo_cfg.ptx_data} holds too little text for blocks of "
                         f"{ppo_cfg.ptx_block_size} tokens; pass more text or lower --ptx-block-size")
    tokens = np.asarray(ids, dtype=np.int64)
    return tokens, np.arange(0, len(tokens) - ppo_cfg.ptx_block_size, ppo_cfg.ptx_block_size)
