"""Fine-tuning an encoder-decoder (T5, BART, the original Transformer) on (source, target) text pairs.

Read top to bottom: pairs (a CSV/JSONL file, or a task generated in code with its own validation
and test splits) -> the model (a preset with fresh weights and a BPE trained on the pairs, or a
trained model directory and its tokenizer) -> token ids, checked against the lengths the model
reads -> teacher-forced batches (`encoder_decoder_batch`: the decoder reads <start> y_1 .. y_{n-1} and
predicts y_1 .. y_n </s>) -> cross-entropy -> AdamW with warmup + decay and checkpoints that
resume exactly (`training.loop`) -> validation loss and sequence accuracy of greedy outputs every
`eval_every` steps -> the model directory (`save_encoder_decoder`) and, for a generated task, the
test split's sequence accuracy.
"""

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from lmlab.data.pair_files import read_pairs
from lmlab.data.pair_tasks import TASKS, make_task
from lmlab.data.pairs import Pair, PairSplits, TaskSizes
from lmlab.errors import LmlabError
from lmlab.eval.sequence_accuracy import sequence_accuracy
from lmlab.generation.config import GenerationConfig
from lmlab.generation.encoder_decoder import generate_encoder_decoder
from lmlab.io.outputs import claim_run_dir
from lmlab.models.encoder_decoder.files import save_encoder_decoder
from lmlab.models.encoder_decoder.model import EncoderDecoder
from lmlab.tokenizers.bpe import TOKENIZER_FILE, save_tokenizer
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.encoder_decoder import (
    IdPair,
    encode_text,
    fingerprint,
    fit_length,
    mean_loss,
    source_bos,
    starting_model,
    teacher_forced_loss,
)
from lmlab.training.loop import evaluated, last_evaluation, log_before, measured, part_of, run_steps, start_session
from lmlab.training.post_training import batch_indices, data_key, split_examples
from lmlab.training.progress import save_loss_curve
from lmlab.training.recipe_configs import EncoderDecoderFinetuneConfig
from tokenizers import Tokenizer

ACCURACY_CURVE = {"validation sequence accuracy": "val_seq_acc"}


class TruncationWarning(UserWarning):
    """Some sources or targets were longer than the model reads and were cut."""


@dataclass(frozen=True)
class EncoderDecoderFinetuneResult:
    """How a fine-tuning session ended, what it saved, and its held-out scores."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None
    before: dict  # val_loss, val_seq_acc before training
    after: dict  # the last validation scores
    test: dict  # test_seq_acc, test_n once finished on a generated task; {} otherwise


def finetune_encoder_decoder(model: str, train: str, out: str | Path, eval_data: str | None = None,
                             cfg: EncoderDecoderFinetuneConfig = EncoderDecoderFinetuneConfig(),
                             tokenizer: str | Path | None = None, resume: bool = False,
                             stop_after: int | None = None, device: str = "auto",
                             show_progress: bool = True) -> EncoderDecoderFinetuneResult:
    """Fine-tune encoder-decoder `model` (a preset, a model directory, a run directory) on `train`
    (a CSV/JSONL file of source/target pairs, or a generated task: dates, reverse, numbers) into
    the run directory `out`. `eval_data` is a pair file to validate on (default: a held-out part of
    the file, or the task's validation split). `tokenizer` (a tokenizer.json or its directory)
    replaces the BPE a preset would train. Stops after `stop_after` steps this session when given."""
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)
    splits = load_pairs(train, eval_data, cfg)
    if ckpt is not None and (out / TOKENIZER_FILE).is_file():  # the run's own tokenizer, never retrained
        tokenizer = out / TOKENIZER_FILE
    texts = [text for pair in splits.train for text in pair]
    network, tok, source = starting_model(model, texts, cfg.vocab_size, cfg.loop.seed, tokenizer=tokenizer)
    if cfg.max_new_tokens > network.config.max_target_length:
        raise LmlabError(f"--max-new-tokens {cfg.max_new_tokens} exceeds the {network.config.max_target_length} "
                         "target tokens the model decodes; lower --max-new-tokens")
    data = {name: encode_pairs(network, tok, pairs, cfg.truncate, where)
            for name, pairs, where in (("train", splits.train, train), ("val", splits.validation, eval_data or train),
                                       ("test", splits.test, train))}
    settings = {"recipe": "finetune_encoder_decoder", "base_model": source, "base_fingerprint": fingerprint(network),
                "train": train, "eval": eval_data,
                "data_key": data_key([splits.train, splits.validation, splits.test])} | dataclasses.asdict(cfg)
    network.to(training_device(device))
    if ckpt is None and distributed.current().is_main:
        claim_run_dir(out)
        save_tokenizer(tok, out)
    session = start_session(out, network, cfg.optim, cfg.loop, settings, ckpt)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        rows = part_of(batch_indices(len(data["train"]), cfg.loop.batch_size, step, cfg.loop.seed), part, parts)
        return teacher_forced_loss(network, [data["train"][i] for i in rows]), {}

    def validate() -> dict:
        return {"val_loss": mean_loss(network, data["val"], cfg.loop.batch_size),
                "val_seq_acc": accuracy(network, tok, data["val"], splits.validation, cfg)}

    log_before(session, validate)
    finished = run_steps(session, step_loss, validate, stop_after, show_progress)
    if not session.dist.is_main:  # under torchrun the first process saves and reports
        return EncoderDecoderFinetuneResult(session.step, finished, None, {}, {}, {})
    save_loss_curve(session.metrics.read(), out / "accuracy.png", ACCURACY_CURVE, ylabel="sequence accuracy")
    (before, _), after = measured(session), last_evaluation(session)
    if not finished:
        return EncoderDecoderFinetuneResult(session.step, False, None, before, after, {})
    model_dir = save_encoder_decoder(network, tok, out / "model")
    test = {}
    if data["test"]:
        test = {"test_seq_acc": evaluated(network, lambda: accuracy(network, tok, data["test"], splits.test, cfg)),
                "test_n": len(splits.test)}
        session.metrics.write(step=session.step, **test)
    return EncoderDecoderFinetuneResult(session.step, True, model_dir, before, after, test)


def load_pairs(train: str, eval_data: str | None, cfg: EncoderDecoderFinetuneConfig) -> PairSplits:
    """(train, validation, test) pairs: a generated task's own splits, or a file's pairs with a
    held-out part (or `eval_data`) for validation and no test split."""
    if train in TASKS and not Path(train).exists():
        splits = make_task(train, cfg.loop.seed, TaskSizes(cfg.train_size, cfg.val_size, cfg.test_size))
        return splits if eval_data is None else PairSplits(splits.train, read_pairs(eval_data), splits.test)
    if not Path(train).is_file():
        raise LmlabError(f"training data '{train}' not found; pass a CSV/JSONL file of source/target pairs or a "
                         f"generated task: {', '.join(TASKS)}")
    pairs = read_pairs(train)
    if eval_data is not None:
        return PairSplits(pairs, read_pairs(eval_data), [])
    if len(pairs) < 2:
        raise LmlabError(f"'{train}' holds {len(pairs)} pair; pass --eval or more pairs")
    training, validation = split_examples(pairs, cfg.val_fraction, cfg.loop.seed)
    return PairSplits(training, validation, [])


def encode_pairs(model: EncoderDecoder, tok: Tokenizer, pairs: list[Pair], truncate: bool, where: str
                 ) -> list[IdPair]:
    """Token ids of `pairs` (sources and targets ending with </s>); a text longer than the model
    reads is an error naming the pair, or is cut with a warning when `truncate`."""
    cfg, bos = model.config, source_bos(model, tok)
    encoded, cut = [], []
    for number, (source, target) in enumerate(pairs, start=1):
        src, src_cut = fit_length(encode_text(tok, source, cfg.eos_id, bos), cfg.max_source_length, truncate,
                                  f"the source of pair {number} of '{where}'")
        tgt, tgt_cut = fit_length(encode_text(tok, target, cfg.eos_id), cfg.max_target_length, truncate,
                                  f"the target of pair {number} of '{where}'")
        encoded.append((src, tgt))
        if src_cut or tgt_cut:
            cut.append(number)
    if cut:
        warnings.warn(f"{where}: {len(cut)} of {len(pairs)} pairs are longer than the model reads "
                      f"({cfg.max_source_length} source / {cfg.max_target_length} target tokens) and were cut "
                      f"(first: pair {cut[0]})", TruncationWarning, stacklevel=2)
    return encoded


def greedy_texts(model: EncoderDecoder, tok: Tokenizer, sources: list[list[int]], batch_size: int,
                 max_new_tokens: int) -> list[str]:
    """The greedy output text for each source (ids ending with </s>), batched by length."""
    cfg, device = model.config, model.lm_head.weight.device
    generation = GenerationConfig(max_new_tokens=max_new_tokens, eos_id=cfg.eos_id)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    texts = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(sources[i]) for i in rows)
        ids = torch.full((len(rows), width), cfg.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, :len(sources[i])] = torch.tensor(sources[i])
            mask[r, :len(sources[i])] = 1
        for i, output in zip(rows, generate_encoder_decoder(model, ids.to(device), mask.to(device), generation)):
            texts[i] = tok.decode(output, skip_special_tokens=True)
    return texts


def accuracy(model: EncoderDecoder, tok: Tokenizer, encoded: list[IdPair], pairs: list[Pair],
             cfg: EncoderDecoderFinetuneConfig) -> float:
    """Sequence accuracy: the share of greedy outputs exactly equal to their reference target."""
    outputs = greedy_texts(model, tok, [source for source, _ in encoded], 2 * cfg.loop.batch_size, cfg.max_new_tokens)
    return sequence_accuracy([o.strip() for o in outputs], [target.strip() for _, target in pairs])
