"""Pre-training a decoder on raw text with the causal-LM objective.

Read top to bottom: documents -> tokenizer -> packed token blocks -> (inputs, targets) ->
cross-entropy -> AdamW with warmup + decay -> checkpoints that resume exactly -> an HF-layout
model directory. Runs the same in one process or under `torchrun` (DDP).
"""

import contextlib
import dataclasses
import json
import math
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lmlab.config import RESUMABLE_CHANGES, ModelConfig, TrainConfig, config_from_train_dict, config_to_dict
from lmlab.data.blocks import batch_starts, gather, shard, split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import mean_block_loss
from lmlab.io.atomic import atomic_write_text
from lmlab.models.decoder_files import save_hf_dir
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models.decoder import build_decoder
from lmlab.objectives.causal_lm import causal_lm
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint, save_checkpoint, set_rng_state, setting_differences
from lmlab.training.compile import maybe_compile
from lmlab.training.device import training_device
from lmlab.training.interrupt import sigint_flag
from lmlab.training.optim import build_optimizer, lr_multiplier
from lmlab.progress import progress_bar
from lmlab.training.progress import MetricsLog, save_loss_curve
from lmlab.training.result import PretrainResult


def pretrain(model_cfg: ModelConfig, train_cfg: TrainConfig, data: str, out: str | Path,
             tokenizer: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
             device: str = "auto", show_progress: bool = True) -> PretrainResult:
    """Train `model_cfg` on `data` (a path or an embedded corpus name) into the run directory `out`.

    `tokenizer` is a tokenizer.json (or its directory); without one a byte-level BPE of the
    preset's vocab size is trained on the data. `stop_after` ends this session after that many
    steps with a checkpoint (resume later with `resume=True`); so does Ctrl-C.
    """
    out = Path(out)
    if (train_cfg.block_size or 0) > model_cfg.context_length:
        raise LmlabError(f"--block-size {train_cfg.block_size} exceeds the model's context of "
                         f"{model_cfg.context_length} tokens; lower --block-size or raise --context-length")
    ckpt = resume_checkpoint(out, resume)
    dev = training_device(device)
    d = distributed.setup(dev.type)
    if d.world_size > 1 and dev.type == "cuda":
        dev = torch.device("cuda", d.local_rank)
    try:
        if train_cfg.batch_size % (d.world_size * train_cfg.grad_accum):
            raise LmlabError(f"--batch-size {train_cfg.batch_size} must be a multiple of the processes "
                             f"({d.world_size}) x --grad-accum ({train_cfg.grad_accum})")
        return _run(model_cfg, train_cfg, data, out, tokenizer, ckpt, stop_after, dev, d, show_progress)
    finally:
        distributed.teardown(d)


def _run(model_cfg, train_cfg, data, out, tokenizer_path, ckpt, stop_after, dev, d, show_progress):
    # 1. Text and tokenizer (rank 0 trains and saves; the others wait, then read).
    texts = load_corpus(data)
    tok_file = out / TOKENIZER_FILE
    if d.is_main and not tok_file.exists():
        tok = load_tokenizer(tokenizer_path) if tokenizer_path else train_bpe(texts, model_cfg.vocab_size)
        save_tokenizer(tok, out)
    d.barrier()
    tok = load_tokenizer(tok_file)
    block_size = train_cfg.block_size or model_cfg.context_length
    model_cfg = model_cfg.replace(vocab_size=tok.get_vocab_size(), trained_context=block_size)

    # 2. Token blocks: tokenized once (cached by content hash), split, batched by step.
    if d.is_main:
        tokenize_corpus(texts, tok)
    d.barrier()
    tokens = tokenize_corpus(texts, tok)
    split = split_blocks(tokens, block_size, train_cfg.val_fraction, train_cfg.seed)
    data_key = Path(tokens.filename).stem
    if ckpt is not None:
        _check_same_run(ckpt, model_cfg, train_cfg, data_key)
        train_cfg = config_from_train_dict(ckpt["train_config"]).replace(
            **{k: getattr(train_cfg, k) for k in RESUMABLE_CHANGES})

    # 3. Model, optimizer, schedule; restored exactly when resuming.
    torch.manual_seed(train_cfg.seed)
    model = build_decoder(model_cfg).to(dev)
    optimizer = build_optimizer(model, train_cfg.lr, train_cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(
        s, train_cfg.warmup_steps, train_cfg.max_steps, train_cfg.schedule, train_cfg.min_lr_ratio))
    start = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        start = ckpt["step"]
    step_loss = CausalLMLoss(model)  # the head and the loss in one chunked op: no (N, vocab) logits
    wrapped = maybe_compile(DistributedDataParallel(step_loss) if d.world_size > 1 else step_loss, train_cfg.compile)
    if d.is_main:
        atomic_write_text(out / "run.json", json.dumps({"model": config_to_dict(model_cfg), "train": dataclasses.asdict(
            train_cfg), "data": data, "data_key": data_key}, indent=2))
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=start if ckpt is not None else None) if d.is_main else None

    def checkpoint(step: int) -> None:
        if d.is_main:
            save_checkpoint(out / "checkpoints", step, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "model_config": config_to_dict(model_cfg), "train_config": dataclasses.asdict(train_cfg),
                "data_key": data_key}, train_cfg.keep_checkpoints)
        d.barrier()

    def validate() -> float:
        model.eval()
        with _autocast(dev, train_cfg.bf16):
            starts = split.val_blocks[: train_cfg.eval_batches * micro_batch]
            loss = mean_block_loss(model, split.tokens, starts, block_size, micro_batch, dev)
        model.train()
        return loss

    # 4. The loop. Ctrl-C (SIGINT) only raises a flag; the step in flight finishes, then we save.
    micro_batch = train_cfg.batch_size // d.world_size // train_cfg.grad_accum
    tokens_per_step = train_cfg.batch_size * block_size
    end = train_cfg.max_steps if stop_after is None else min(train_cfg.max_steps, start + stop_after)
    bar = progress_bar(train_cfg.max_steps, start, disable=not (show_progress and d.is_main))
    val_loss, step, stopped = None, start, False
    model.train()
    with sigint_flag() as interrupted:
        while step < end and not stopped:
            t0 = time.perf_counter()
            starts = shard(batch_starts(split.train_blocks, train_cfg.batch_size, step, train_cfg.seed),
                           d.rank, d.world_size)
            loss_sum = 0.0
            for micro in range(train_cfg.grad_accum):
                block = gather(split.tokens, starts[micro * micro_batch:(micro + 1) * micro_batch], block_size)
                inputs, targets = causal_lm(block.to(dev, non_blocking=True))
                sync = micro == train_cfg.grad_accum - 1 or d.world_size == 1
                with _autocast(dev, train_cfg.bf16), (contextlib.nullcontext() if sync else wrapped.no_sync()):
                    loss = wrapped(inputs, targets) / train_cfg.grad_accum
                    loss.backward()
                loss_sum += loss.item()
            loss_sum = _mean_over_ranks(loss_sum, d)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip).item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            seconds = time.perf_counter() - t0
            row = {"step": step, "loss": loss_sum, "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                   "tokens_per_s": tokens_per_step / seconds}
            if len(split.val_blocks) and (step % train_cfg.eval_every == 0 or step == train_cfg.max_steps):
                val_loss = validate()
                row |= {"val_loss": val_loss, "val_ppl": _exp(val_loss)}
            if d.is_main and (step % train_cfg.log_every == 0 or "val_loss" in row or step == end):
                metrics.write(**row)
                bar.set_postfix(loss=f"{loss_sum:.3f}", tok_s=f"{row['tokens_per_s']:.0f}", refresh=False)
            bar.update(1)
            if step % train_cfg.checkpoint_every == 0 and step < end:
                checkpoint(step)
            stopped = _any_rank(interrupted(), d)
    bar.close()

    # 5. Save: a checkpoint always; the HF-layout model and the loss curve when training finished.
    checkpoint(step)
    done = step >= train_cfg.max_steps
    if d.is_main:
        save_loss_curve(metrics.read(), out / "loss.png")
        if done:
            save_hf_dir(model, out / "model", tok)
    return PretrainResult(step=step, val_loss=val_loss, model_dir=out / "model" if done else None,
                          interrupted=not done)


def _check_same_run(ckpt: dict, model_cfg: ModelConfig, train_cfg: TrainConfig, data_key: str) -> None:
    """A resumed run must be the run that wrote the checkpoint, else 'resume' means nothing."""
    saved_train = dataclasses.asdict(config_from_train_dict(ckpt["train_config"]))
    diffs = setting_differences(ckpt["model_config"], config_to_dict(model_cfg))
    diffs += setting_differences(saved_train, dataclasses.asdict(train_cfg), RESUMABLE_CHANGES)
    if ckpt["data_key"] != data_key:
        diffs.append("the training data (its tokens) differ")
    if diffs:
        raise LmlabError(f"--resume with a different config ({'; '.join(diffs)}); rerun with the original "
                         "settings or start a new --out directory")


def _autocast(dev: torch.device, bf16: bool):
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16)


def _any_rank(flag: bool, d: distributed.Dist) -> bool:
    """True on every rank if it is true on one, so all processes stop at the same step."""
    return flag if d.world_size == 1 else _all_reduce(float(flag), dist.ReduceOp.MAX) > 0


def _mean_over_ranks(value: float, d: distributed.Dist) -> float:
    """The global batch's loss, not just this rank's share of it."""
    return value if d.world_size == 1 else _all_reduce(value, dist.ReduceOp.SUM) / d.world_size


def _all_reduce(value: float, op) -> float:
    t = torch.tensor([value], dtype=torch.float64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=op)
    return t.item()


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))
