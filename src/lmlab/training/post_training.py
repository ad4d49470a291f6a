"""What every post-training recipe (SFT, reward model, PPO, DPO: tuning a trained decoder) shares, apart
from its loss. (`lmlab finetune`, task heads on encoders and encoder-decoders, is `recipes/finetune_*.py`.)

A post-training run starts from a trained model (zoo name, model directory, run directory, .gguf),
adds a PEFT method to it (or trains every weight: "none") and trains on examples split into a
training and a held-out part. A recipe reads, top to bottom:

    ckpt = resume_checkpoint(out, resume)                     # training.checkpoint
    train, val = split_examples(examples, cfg.val_fraction, cfg.loop.seed)
    tuned = load_tunable(model, cfg, adapter, device)        # model + tokenizer, PEFT applied
    session = start_tuning(out, tuned.model, cfg, run_settings("sft", tuned, data, examples, cfg), ckpt)
    finished = run_steps(session, step_loss, evaluate)       # training.loop
    return finish(session, tuned, finished)                   # save_tuned: adapter, merged or full model

What is saved: with PEFT the adapter (`out/adapter`, a few MB) and, in run.json, the base model it
belongs to; for LoRA also the merged model (`out/model`), so `lmlab generate --model OUT` works.
Without PEFT the whole model, in Hugging Face layout with its tokenizer (`out/model`).
`lmlab.models.tuned_files` writes these files and `load_tuned(out)` reads either back.
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.data.blocks import batch_starts
from lmlab.data.chat_jsonl import read_chat_jsonl
from lmlab.errors import LmlabError
from lmlab.models import registry
from lmlab.models.load import load
from lmlab.models.peft_files import base_fingerprint, load_peft
from lmlab.models.tuned_files import save_tuned
from lmlab.modules.peft import applied_method, apply_peft, describe
from lmlab.modules.transformer import TransformerDecoder
from lmlab.objectives.sft import check_chat
from lmlab.targets import IGNORE_INDEX
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.device import training_device
from lmlab.training.loop import Session, evaluated, measured, start_session
from lmlab.training.memory import check_memory
from lmlab.training.post_train_config import PostTrainConfig, PostTrainResult
from lmlab.training.sharding import decoder_only, unsharded


def peft_settings(cfg: PostTrainConfig) -> dict:
    """The settings of `cfg.peft` as `apply_peft` takes them (and `save_peft` records them)."""
    return {
        "lora": {"rank": cfg.lora_rank, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                 "targets": list(cfg.lora_targets)},
        "adapter": {"bottleneck": cfg.adapter_bottleneck},
        "prefix": {"n_prefix": cfg.n_prefix},
        "prompt": {"n_tokens": cfg.n_prompt_tokens},
        "none": {},
    }[cfg.peft]


@dataclass
class Tunable:
    """A model ready to fine-tune, and what is needed to save it and to find its base again."""

    model: TransformerDecoder  # PEFT applied (only its parameters train), or every weight trainable
    tokenizer: TextTokenizer
    base_model: str  # the base model, for loading it again: an absolute path or a zoo name
    fingerprint: str  # `base_fingerprint` of the base weights: an adapter fits only these
    method: str  # the PEFT method, "none" when every weight trains
    settings: dict  # the method's settings

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load_tunable(model: str | Path, cfg: PostTrainConfig, adapter: str | Path | None = None,
                 device: str = "auto") -> Tunable:
    """The model `model` (anything `lmlab.load` reads) with PEFT applied as `cfg` says, or with the
    saved `adapter` loaded to train on (its method and settings then replace cfg's), on `device`.
    A LoRA target that matches nothing, or an adapter trained on another base model, is an error."""
    dev = training_device(device)
    lm, tokenizer = load(model, "fp32")  # training needs float weights: a quantized GGUF file is dequantized
    tokenizer = tokenizer.with_chat_template(cfg.chat_template)
    if cfg.block_size > lm.config.context_length:
        raise LmlabError(f"--block-size {cfg.block_size} exceeds the model's context of {lm.config.context_length} "
                         "tokens; lower --block-size")
    fingerprint = base_fingerprint(lm)
    torch.manual_seed(cfg.loop.seed)  # the added parameters' starting values (LoRA's A, prefix tokens) follow the seed
    if adapter is not None:
        method, settings = applied_method(load_peft(lm, adapter))
    else:
        method, settings = cfg.peft, peft_settings(cfg)
        apply_peft(lm, method, **settings)
    if method == "none":
        lm.requires_grad_(True)
    source = str(Path(model).resolve()) if Path(model).exists() else str(model)
    return Tunable(lm.to(dev), tokenizer, source, fingerprint, method, settings)


def run_settings(recipe: str, tuned: Tunable, data: str, examples: list, cfg: PostTrainConfig,
                 adapter: str | Path | None = None, **extra) -> dict:
    """What identifies a run (written to run.json, checked on resume): the recipe, the base model,
    the data (its content, hashed), the config and the recipe's own settings (`extra`)."""
    return {"recipe": recipe, "base_model": tuned.base_model, "base_fingerprint": tuned.fingerprint,
            "adapter": str(Path(adapter).resolve()) if adapter is not None else None,
            "peft_method": tuned.method, "peft_settings": tuned.settings,
            "data": data, "data_key": data_key(examples)} | dataclasses.asdict(cfg) | extra


def read_chats(path: str | Path) -> list[list[dict]]:
    """The chats of a JSONL file, each checked as SFT needs it (known roles, an assistant reply), so a
    bad example fails before anything is written."""
    chats = read_chat_jsonl(path)
    for index, chat in enumerate(chats):
        check_example(path, index + 1, chat)
    return chats


def with_reply(prompt: list[dict], answer: str) -> list[dict]:
    """The chat of `prompt` followed by `answer` as the assistant's reply."""
    return [*prompt, {"role": "assistant", "content": answer}]


def check_example(path: str | Path, index: int, chat: list[dict]) -> None:
    """`check_chat` on example `index` (from 1) of the file `path`, the file named in its error."""
    try:
        check_chat(chat, index)
    except LmlabError as e:
        raise LmlabError(f"{path}: {e}") from None


def data_key(examples: list) -> str:
    """A short hash of the examples' content: a resumed run must train on the same data."""
    return hashlib.sha256(json.dumps(examples, sort_keys=True).encode()).hexdigest()[:16]


def unique(examples: list, key: Callable = lambda example: example) -> list:
    """`examples` without repeats of `key(example)` (the first is kept): the embedded task draws
    questions with replacement, and a question in both the training and the held-out part would
    not be held out."""
    seen, kept = set(), []
    for example in examples:
        name = json.dumps(key(example), sort_keys=True)
        if name not in seen:
            seen.add(name)
            kept.append(example)
    return kept


def split_examples(examples: list, val_fraction: float, seed: int) -> tuple[list, list]:
    """(training, held-out) examples: a seeded random `val_fraction` is held out (at least one when
    the fraction is positive and there are two examples or more)."""
    if not examples:
        raise LmlabError("the data holds no examples; pass a file with at least one line")
    n = len(examples)
    n_val = 0 if val_fraction == 0 else min(max(1, round(n * val_fraction)), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    return [examples[i] for i in sorted(order[n_val:])], [examples[i] for i in sorted(order[:n_val])]


def batch_indices(n_examples: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Which training examples the batch at `step` holds: a pure function of (seed, step), through
    seeded epoch permutations as for pre-training blocks, so a resumed run sees the same batches."""
    return batch_starts(np.arange(n_examples), batch_size, step, seed).tolist()


def held_out_means(loss_of: Callable[[list[int]], tuple[torch.Tensor, dict]], n_examples: int,
                   batch_size: int) -> dict:
    """A recipe's held-out measures: `loss_of(indices)` -> (loss, {name: value}) over the `n_examples` held-out
    examples in batches of `batch_size`, each measure averaged over the examples (a batch weighs its size),
    as {"val_loss": ..., "val_<name>": ...}; {} with no held-out examples."""
    totals: dict[str, float] = {}
    for start in range(0, n_examples, batch_size):
        indices = list(range(start, min(start + batch_size, n_examples)))
        loss, logged = loss_of(indices)
        for name, value in ({"loss": loss.item()} | logged).items():
            totals[name] = totals.get(name, 0.0) + value * len(indices)
    return {f"val_{name}": total / n_examples for name, total in totals.items()}


def trim_padding(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the columns after the last labelled target of a right-padded batch (B, T) -> (B, T').
    Attention is causal, so no kept position reads a dropped one: the loss is unchanged, the work
    is what the longest example needs rather than the whole block."""
    labelled = (targets != IGNORE_INDEX).any(dim=0).nonzero()  # (n, 1) labelled columns
    end = int(labelled.max()) + 1 if len(labelled) else 1
    return inputs[:, :end], targets[:, :end]


def start_tuning(out: Path, module: torch.nn.Module, cfg: PostTrainConfig, settings: dict,
                 ckpt: dict | None) -> Session:
    """The training session of a post-training recipe: `module` (the tuned model, or a network around
    it) trained as `cfg` says. For a decoder, the memory a process needs is estimated first (and
    checked against --max-memory); --fsdp shards only a decoder trained on its own (sft, dpo)."""
    memory = None
    if isinstance(module, TransformerDecoder):
        memory = check_memory(module, cfg.loop.batch_size, cfg.loop.grad_accum, cfg.block_size, cfg.loop.fsdp,
                              cfg.loop.bf16, cfg.max_memory)
    else:
        decoder_only(cfg.loop.fsdp, cfg.max_memory, f"a {type(module).__name__} around one")
    return start_session(out, module, cfg.optim, cfg.loop, settings, ckpt, memory=memory)


def finish(session: Session, tuned: Tunable, finished: bool, after: Callable[[], dict] | None = None,
           merge: bool = True) -> PostTrainResult:
    """The end of a recipe: once training is done, save the model (`save_tuned`; `merge` a LoRA
    into a full model too) and log the held-out measures of `after()` at the last step."""
    model_dir = adapter_dir = None
    model = unsharded(tuned.model, lambda: registry.build(tuned.model.config)) if finished else None
    if model is not None and session.dist.is_main:
        model_dir, adapter_dir = save_tuned(model, tuned.tokenizer, session.out, tuned.method, tuned.settings,
                                            tuned.fingerprint, merge, tuned.base_model)
    if finished and after is not None:
        measures = evaluated(session.module, after)  # on every process: a sharded model computes together
        if session.metrics is not None:
            session.metrics.write(step=session.step, **measures)
    session.dist.barrier()
    before, last = measured(session)
    return PostTrainResult(session.step, finished, model_dir, adapter_dir, before, last, describe(session.module))
