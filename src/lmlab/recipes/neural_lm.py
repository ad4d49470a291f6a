"""Training the fixed-window LM and the RNN / LSTM / GRU LMs with truncated backpropagation
through time (TBPTT).

Read top to bottom: documents -> the transformer's tokenizer and block split -> B parallel token
streams -> for each chunk of block_size tokens: run the model from the state the previous chunk
left, cross-entropy, backward (which stops at the chunk's start: the state is detached), clip the
gradient norm, AdamW step -> checkpoints (with the carried state) that resume exactly -> a model
directory. The window LM uses the same loop: its state is the last n - 1 tokens, so every
(n previous tokens -> next) pair of a chunk is a training example, the first ones included.
One process; validation scores the held-out blocks from a fresh state, as `mean_block_loss` does
for transformers.

Random resets. Evaluation reads every block from the initial state, but a state carried across a
whole epoch is never initial after the first chunk. An LSTM trained so can learn cell states that
drift over thousands of tokens, and then predicts badly from a fresh one (markov corpus, ±0.1
embeddings, constant lr: validation perplexity 80, against 14 for the same run with resets). So
at each chunk start, a row's carried state goes back to the initial one with probability
STATE_RESET_PROBABILITY: the model learns to start from nothing, as it is evaluated, while most
chunks still carry the state (truncated BPTT). The draw is a function of the seed and step, so a
resumed run draws the same resets.
"""

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from lmlab.config import RESUMABLE_CHANGES, TrainConfig, config_from_train_dict
from lmlab.data.blocks import split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.streams import parallel_streams
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import mean_block_loss
from lmlab.io.atomic import atomic_write_text
from lmlab.models.neural_lm_files import save_neural_lm_dir
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.models.rnn import RNNConfig, RNNLM
from lmlab.models.window import WindowConfig, WindowLM
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training.checkpoint import resume_checkpoint, save_checkpoint, set_rng_state, setting_differences
from lmlab.training.device import training_device
from lmlab.training.interrupt import sigint_flag
from lmlab.training.optim import build_optimizer, lr_multiplier
from lmlab.progress import progress_bar
from lmlab.training.progress import MetricsLog, save_loss_curve
from lmlab.training.result import PretrainResult

DEFAULT_BLOCK_SIZE = 64  # tokens per chunk (the BPTT truncation length) when TrainConfig.block_size is None
STATE_RESET_PROBABILITY = 0.1  # per row and chunk: a carried state lives 10 chunks on average
MODELS = {"window": WindowLM, "rnn": RNNLM}


def build_neural_lm(config: WindowConfig | RNNConfig) -> WindowLM | RNNLM:
    """The model a window or RNN config describes, freshly initialised."""
    return MODELS[config.model_type](config)


def train_neural_lm(model_cfg: WindowConfig | RNNConfig, train_cfg: TrainConfig, data: str, out: str | Path,
                    tokenizer: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
                    device: str = "auto", show_progress: bool = True) -> PretrainResult:
    """Train a window or recurrent LM on `data` (a path or an embedded corpus name) into the run directory `out`.

    As `lmlab.recipes.pretrain.pretrain`: `tokenizer` is a tokenizer.json (or its directory), else a
    byte-level BPE of `model_cfg.vocab_size` is trained on the data; `stop_after` ends the session
    after that many steps with a checkpoint (continue with `resume=True`); so does Ctrl-C.
    """
    out = Path(out)
    if train_cfg.grad_accum != 1:
        raise LmlabError(f"--grad-accum {train_cfg.grad_accum}: the window and RNN LMs train one batch per step; "
                         "drop --grad-accum")
    train_cfg = train_cfg.replace(block_size=train_cfg.block_size or DEFAULT_BLOCK_SIZE)
    ckpt = resume_checkpoint(out, resume)
    dev = training_device(device)

    # 1. Text and tokenizer, as for the transformers (nothing is written before the data is read).
    texts = load_corpus(data)
    tok_file = out / TOKENIZER_FILE
    if not tok_file.exists():
        save_tokenizer(load_tokenizer(tokenizer) if tokenizer else train_bpe(texts, model_cfg.vocab_size), out)
    tok = load_tokenizer(tok_file)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=tok.get_vocab_size())

    # 2. The transformer's block split (same validation blocks), training blocks laid out as B streams.
    tokens = tokenize_corpus(texts, tok)
    block_size = train_cfg.block_size
    split = split_blocks(tokens, block_size, train_cfg.val_fraction, train_cfg.seed)
    streams = parallel_streams(tokens, split.train_blocks, block_size, train_cfg.batch_size)
    data_key = Path(tokens.filename).stem
    if ckpt is not None:
        _check_same_run(ckpt, model_cfg, train_cfg, data_key)
        train_cfg = config_from_train_dict(ckpt["train_config"]).replace(
            **{k: getattr(train_cfg, k) for k in RESUMABLE_CHANGES})

    # 3. Model, optimizer, schedule and the carried state; restored exactly when resuming.
    torch.manual_seed(train_cfg.seed)
    model = build_neural_lm(model_cfg).to(dev)
    optimizer = build_optimizer(model, train_cfg.lr, train_cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(
        s, train_cfg.warmup_steps, train_cfg.max_steps, train_cfg.schedule, train_cfg.min_lr_ratio))
    start, carried = 0, model.initial_state(train_cfg.batch_size)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"])
        start, carried = ckpt["step"], tuple(part.to(dev) for part in ckpt["carried_state"])
    atomic_write_text(out / "run.json", json.dumps({"model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(
        train_cfg), "data": data, "data_key": data_key}, indent=2))
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=start if ckpt is not None else None)

    def checkpoint(step: int) -> None:
        save_checkpoint(out / "checkpoints", step, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "carried_state": [part.cpu() for part in carried], "model_config": dataclasses.asdict(model_cfg),
            "train_config": dataclasses.asdict(train_cfg), "data_key": data_key}, train_cfg.keep_checkpoints)

    def validate() -> float:
        model.eval()
        with _autocast(dev, train_cfg.bf16):
            starts = split.val_blocks[: train_cfg.eval_batches * train_cfg.batch_size]
            loss = mean_block_loss(model, split.tokens, starts, block_size, train_cfg.batch_size, dev)
        model.train()
        return loss

    # 4. The loop. Ctrl-C (SIGINT) only raises a flag; the step in flight finishes, then we save.
    end = train_cfg.max_steps if stop_after is None else min(train_cfg.max_steps, start + stop_after)
    bar = progress_bar(train_cfg.max_steps, start, disable=not show_progress)
    val_loss, step, stopped = None, start, False
    model.train()
    with sigint_flag() as interrupted:
        while step < end and not stopped:
            t0 = time.perf_counter()
            if streams.starts_epoch(step):
                carried = model.initial_state(train_cfg.batch_size)
            carried = model.reset_rows(carried, reset_draw(train_cfg.seed, step, train_cfg.batch_size).to(dev))
            inputs, targets = (t.to(dev, non_blocking=True) for t in streams.chunk(step))  # (B, T) each
            with _autocast(dev, train_cfg.bf16):
                logits, carried = model.unroll(inputs, carried)  # (B, T, V)
                loss = cross_entropy(logits, targets)
            loss.backward()
            carried = tuple(part.detach() for part in carried)  # truncation: the next chunk's gradient stops here
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip).item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            row = {"step": step, "loss": loss.item(), "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                   "tokens_per_s": inputs.numel() / (time.perf_counter() - t0)}
            if step % train_cfg.eval_every == 0 or step == train_cfg.max_steps:
                val_loss = validate()
                row |= {"val_loss": val_loss, "val_ppl": math.exp(min(val_loss, 700.0))}
            if step % train_cfg.log_every == 0 or "val_loss" in row or step == end:
                metrics.write(**row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}", refresh=False)
            bar.update(1)
            if step % train_cfg.checkpoint_every == 0 and step < end:
                checkpoint(step)
            stopped = interrupted()
    bar.close()

    # 5. Save: a checkpoint always; the model directory and the loss curve when training finished.
    checkpoint(step)
    done = step >= train_cfg.max_steps
    save_loss_curve(metrics.read(), out / "loss.png")
    if done:
        save_neural_lm_dir(model, out / "model", tok)
    return PretrainResult(step=step, val_loss=val_loss, model_dir=out / "model" if done else None,
                          interrupted=not done)


def reset_draw(seed: int, step: int, batch_size: int) -> torch.Tensor:
    """Which rows (B,) bool start the chunk at `step` from the initial state: each with probability
    STATE_RESET_PROBABILITY, drawn from (seed, step) alone."""
    rng = np.random.default_rng((seed, step))
    return torch.from_numpy(rng.random(batch_size) < STATE_RESET_PROBABILITY)


def _check_same_run(ckpt: dict, model_cfg, train_cfg: TrainConfig, data_key: str) -> None:
    """A resumed run must be the run that wrote the checkpoint, else 'resume' means nothing."""
    saved_train = dataclasses.asdict(config_from_train_dict(ckpt["train_config"]))
    diffs = setting_differences(ckpt["model_config"], dataclasses.asdict(model_cfg))
    diffs += setting_differences(saved_train, dataclasses.asdict(train_cfg), RESUMABLE_CHANGES)
    if ckpt["data_key"] != data_key:
        diffs.append("the training data (its tokens) differ")
    if diffs:
        raise LmlabError(f"--resume with a different config ({'; '.join(diffs)}); rerun with the original "
                         "settings or start a new --out directory")


def _autocast(dev: torch.device, bf16: bool):
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16)
