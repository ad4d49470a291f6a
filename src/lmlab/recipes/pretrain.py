"""Pre-training a decoder on raw text with a decoder objective of `objectives.registry` (the family's
own, causal LM, unless `objective` names another).

Read top to bottom: documents -> tokenizer -> packed token blocks -> (inputs, targets) by the
objective's `batch` transformation ->
the LM head and cross-entropy in chunks (`CausalLMLoss`) -> the training loop
(`lmlab.training.loop`: AdamW with warmup + decay, gradient accumulation, checkpoints that resume
exactly) -> an HF-layout model directory. Runs the same in one process or under `torchrun`: each
process takes its parts of every step's batch and the loop averages the gradients (or, with
`fsdp`, shards the model over the processes). The memory a process will need is estimated first.
"""

import dataclasses
from pathlib import Path

import torch

from lmlab.config import ModelConfig, TrainConfig, config_to_dict
from lmlab.data.blocks import batch_starts, gather, split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import held_out_loss
from lmlab.io.outputs import claim_run_dir
from lmlab.losses.linear_cross_entropy import CausalLMLoss
from lmlab.models import registry
from lmlab.models.decoder_files import check_hf_form, save_hf_dir
from lmlab.objectives.registry import choose_objective
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.compile import maybe_compile
from lmlab.training.device import training_device
from lmlab.training.loop import last_evaluation, part_of, run_steps, start_session
from lmlab.training.memory import check_memory
from lmlab.training.result import PretrainResult
from lmlab.training.sharding import unsharded


def pretrain(model_cfg: ModelConfig, train_cfg: TrainConfig, data: str, out: str | Path,
             objective: str | None = None, tokenizer: str | Path | None = None, resume: bool = False,
             stop_after: int | None = None, device: str = "auto", show_progress: bool = True) -> PretrainResult:
    """Train `model_cfg` on `data` (a path or an embedded corpus name) into the run directory `out`.

    `objective` is a decoder objective of `objectives.registry` the family can train with (default: the
    family's own); its record's `batch` turns a batch of blocks into (inputs, targets). Held-out blocks
    are scored by next-token loss whatever the objective (`eval.perplexity.held_out_loss`), so runs compare.
    `tokenizer` is a tokenizer.json (or its directory); without one a byte-level BPE of the
    preset's vocab size is trained on the data. `stop_after` ends this session after that many
    steps with a checkpoint (resume later with `resume=True`); so does Ctrl-C.
    """
    out = Path(out)
    family = registry.lookup(model_cfg.family, kind="decoder")
    record = choose_objective(family, objective)
    check_hf_form(model_cfg)  # the run ends by saving it in HF layout: refuse now, not after training
    if (train_cfg.block_size or 0) > model_cfg.context_length:
        raise LmlabError(f"--block-size {train_cfg.block_size} exceeds the model's context of "
                         f"{model_cfg.context_length} tokens; lower --block-size or raise --context-length")
    ckpt = resume_checkpoint(out, resume)
    if ckpt is not None:  # a run saved before decoders chose an objective trained with the family's default
        ckpt["settings"].setdefault("objective", family.objective)
    d = distributed.current()  # under torchrun: joins the process group and takes this process's GPU
    dev = training_device(device)
    block_size = train_cfg.block_size or model_cfg.context_length

    # 1. Text, the memory a process needs (shapes on the meta device, before anything is written), and the
    # tokenizer (the first process trains and saves it; the others wait, then read).
    texts = load_corpus(data)
    with torch.device("meta"):
        loop = train_cfg.loop
        memory = check_memory(registry.build(model_cfg), loop.batch_size, loop.grad_accum, block_size, loop.fsdp,
                              loop.bf16, train_cfg.max_memory)
    tok_file = out / TOKENIZER_FILE
    if d.is_main and not tok_file.exists():
        made = load_tokenizer(tokenizer) if tokenizer else train_bpe(texts, model_cfg.vocab_size)
        claim_run_dir(out)  # after the tokenizer is read or trained: a bad one leaves nothing behind
        save_tokenizer(made, out)
    d.barrier()
    tok = load_tokenizer(tok_file)
    model_cfg = model_cfg.replace(vocab_size=tok.get_vocab_size(), trained_context=block_size)

    # 2. Token blocks: tokenized once (cached by content hash, by the first process), split, batched by step.
    if d.is_main:
        tokenize_corpus(texts, tok)
    d.barrier()
    tokens = tokenize_corpus(texts, tok)
    split = split_blocks(tokens, block_size, train_cfg.val_fraction, train_cfg.loop.seed)
    settings = {"recipe": "pretrain", "objective": record.name, "model": config_to_dict(model_cfg),
                "train": dataclasses.asdict(train_cfg), "data": data, "data_key": Path(tokens.filename).stem}

    # 3. The model and its training session (restored exactly when resuming).
    torch.manual_seed(train_cfg.loop.seed)
    model = registry.build(model_cfg).to(dev)
    session = start_session(out, model, train_cfg.optim, train_cfg.loop, settings, ckpt, memory=memory)
    head_loss = maybe_compile(CausalLMLoss(model), train_cfg.compile)  # no (N, vocab) logits in memory
    micro_batch = train_cfg.loop.batch_size // session.parts

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        batch = batch_starts(split.train_blocks, train_cfg.loop.batch_size, step, train_cfg.loop.seed)
        starts = part_of(batch, part, parts)
        inputs, targets = record.batch(gather(split.tokens, starts, block_size).to(dev, non_blocking=True))  # (b, T)
        return head_loss(inputs, targets), {}

    def validate() -> dict:
        return held_out_loss(model, split, train_cfg.eval_batches, micro_batch, dev)

    # 4. Train; then the HF-layout model, once training has reached max_steps.
    finished = run_steps(session, step_loss, validate if len(split.val_blocks) else None, stop_after,
                         show_progress, ylabel="loss (nats/token)",
                         throughput=("tokens_per_s", train_cfg.loop.batch_size * block_size))
    whole = unsharded(model, lambda: registry.build(model_cfg)) if finished else None  # every process gathers
    if whole is not None and d.is_main:
        save_hf_dir(whole, out / "model", tok)
    d.barrier()
    return PretrainResult(step=session.step, val_loss=last_evaluation(session).get("val_loss"),
                          model_dir=out / "model" if finished else None, interrupted=not finished)
