"""Pre-training an encoder-decoder (T5, BART, the original Transformer) on raw text with a
denoising objective: the encoder reads corrupted text, the decoder writes what was lost.

Read top to bottom: documents -> a byte-level BPE with the family's special tokens and the ones
the objective writes (T5's sentinels, BART's <mask>) -> token ids cut into chunks of whole
sentences of at most `block_size` tokens -> for each step a batch of chunks, each corrupted by the
objective into (inputs, targets) -> teacher-forced cross-entropy -> AdamW steps with checkpoints
that resume exactly (`training.loop`) -> the model directory (`save_encoder_decoder`).

The objectives (`lmlab.objectives.registry`, kind "encoder-decoder"), each the default of one family:
    span_corruption  (T5)     15 % of the tokens in spans of mean length 3 (or `SpanNoise`'s share
                              and length), each span replaced by a sentinel; the target lists the
                              sentinels and their spans
    denoising        (BART)   sentences permuted, then 30 % of the tokens in Poisson(3) spans each
                              replaced by one <mask>; the target is the clean chunk
    gap_sentences    (Pegasus) the sentences that overlap most with the rest replaced by <mask>; the
                              target is those sentences

Every random choice is a function of the seed and the step (or, for held-out chunks, the chunk):
a run stopped at step k and resumed trains on the same batches as one that never stopped.
"""

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lmlab.config import TrainConfig
from lmlab.data.corpora import load_corpus
from lmlab.errors import LmlabError
from lmlab.io.outputs import claim_run_dir
from lmlab.models import registry
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.encoder_decoder.files import save_encoder_decoder
from lmlab.objectives.objective import Key, Objective
from lmlab.objectives.registry import ObjectiveRecord, build_objective, choose_objective
from lmlab.objectives.sentences import sentence_end_ids, split_sentences
from lmlab.objectives.span_noise import SpanNoise
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer
from lmlab.tokenizers.encoder_decoder_bpe import EOS, PAD, train_encoder_decoder_bpe
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.encoder_decoder import IdPair, fit_to_tokenizer, mean_loss, teacher_forced_loss
from lmlab.training.loop import log_before, measured, part_of, run_steps, start_session
from lmlab.training.post_training import batch_indices, split_examples
from lmlab.training.sharding import decoder_only
from tokenizers import Tokenizer

DEFAULT_BLOCK = 128  # tokens per chunk unless --block-size says otherwise


@dataclass(frozen=True)
class EncoderDecoderPretrainResult:
    """How a pre-training session ended, and its held-out loss before and after."""

    step: int
    finished: bool  # False when it stopped early (stop_after, Ctrl-C): resume to finish
    model_dir: Path | None
    before: dict  # val_loss at step 0
    after: dict  # val_loss at the last step

    @property
    def val_loss(self) -> float | None:
        return self.after.get("val_loss")


def pretrain_encoder_decoder(model_cfg: EncoderDecoderConfig, train_cfg: TrainConfig, data: str, out: str | Path,
                             objective: str | None = None, tokenizer: str | Path | None = None, resume: bool = False,
                             stop_after: int | None = None, device: str = "auto", span_noise: SpanNoise = SpanNoise(),
                             show_progress: bool = True) -> EncoderDecoderPretrainResult:
    """Pre-train an encoder-decoder of shape `model_cfg` on `data` (a path or an embedded corpus)
    into the run directory `out` with `objective`, an encoder-decoder objective of
    `objectives.registry` (default: the family's own).

    `tokenizer` is a tokenizer.json or its directory holding the objective's special tokens;
    without one, a BPE of the preset's vocabulary size is trained on the data. `stop_after` ends
    this session after that many steps with a checkpoint (so does Ctrl-C); `resume=True` goes on.
    `span_noise` sets span corruption's share of dropped tokens and mean span length.
    """
    record = choose_objective(registry.lookup(model_cfg.family, kind="encoder-decoder"), objective)
    _check_train_config(train_cfg)
    out = Path(out)
    ckpt = resume_checkpoint(out, resume)

    # 1. Text and tokenizer (the run's own tokenizer.json when resuming).
    texts = load_corpus(data)
    tok = _tokenizer(out / TOKENIZER_FILE if ckpt is not None else tokenizer, texts, model_cfg, record)
    cfg = fit_to_tokenizer(model_cfg, tok)
    block = train_cfg.block_size or min(DEFAULT_BLOCK, cfg.max_source_length - 1, cfg.max_target_length - 1)
    if not 8 <= block < min(cfg.max_source_length, cfg.max_target_length):
        raise LmlabError(f"--block-size {block} must be at least 8 and below the model's {cfg.max_source_length} "
                         f"source and {cfg.max_target_length} target tokens; change --block-size")

    # 2. Chunks of whole sentences; a held-out part; the objective as chunk -> (inputs, targets).
    sentence_ends = sentence_end_ids(tok)
    chunks = [c for text in texts for c in sentence_chunks(tok.encode(text, add_special_tokens=False).ids,
                                                             sentence_ends, block)]
    train, val = split_examples(chunks, train_cfg.val_fraction, train_cfg.loop.seed)
    val = val[:train_cfg.eval_batches * train_cfg.loop.batch_size]
    corrupt = training_pairs(build_objective(record, tok, noise=span_noise), cfg)

    # 3. Model and session (optimizer, schedule, checkpoint restored when resuming).
    dev = training_device(device)
    torch.manual_seed(train_cfg.loop.seed)
    model = registry.build(cfg).to(dev)
    settings = {"recipe": f"{cfg.family} {record.name}", "base_model": None, "base_fingerprint": None,
                "model": dataclasses.asdict(cfg), "objective": record.name, "data": data,
                "span_noise": dataclasses.asdict(span_noise) if "noise" in record.settings else None,
                "data_key": _data_key(chunks), "block_size": block} | dataclasses.asdict(train_cfg)
    if ckpt is None and distributed.current().is_main:
        claim_run_dir(out)
        save_tokenizer(tok, out)
    session = start_session(out, model, train_cfg.optim, train_cfg.loop, settings, ckpt)

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        rows = part_of(list(enumerate(batch_indices(len(train), train_cfg.loop.batch_size, step, train_cfg.loop.seed))),
                       part, parts)  # (k, example): the k-th example of the step's batch is corrupted by seed k
        pairs = [corrupt(train[i], (train_cfg.loop.seed, step, k)) for k, i in rows]
        return teacher_forced_loss(model, pairs), {}

    def validate() -> dict:  # the same corruption of each held-out chunk at every evaluation
        pairs = [corrupt(chunk, (train_cfg.loop.seed, "val", k)) for k, chunk in enumerate(val)]
        return {"val_loss": mean_loss(model, pairs, train_cfg.loop.batch_size)}

    if val:
        log_before(session, validate)
    finished = run_steps(session, step_loss, validate if val else None, stop_after, show_progress,
                         ylabel="loss (nats/token)")
    model_dir = save_encoder_decoder(model, tok, out / "model") if finished and session.dist.is_main else None
    before, after = measured(session)
    return EncoderDecoderPretrainResult(session.step, finished, model_dir, before, after)


def sentence_chunks(tokens: list[int], sentence_ends: set[int], block: int) -> list[list[int]]:
    """`tokens` cut into chunks of whole sentences of at most `block` tokens (a longer sentence is cut
    into pieces of `block`); chunks under 8 tokens carry too little to corrupt and are dropped."""
    chunks, current = [], []
    for sentence in split_sentences(tokens, sentence_ends):
        for start in range(0, len(sentence), block):
            piece = sentence[start:start + block]
            if len(current) + len(piece) > block:
                chunks.append(current)
                current = []
            current = current + piece
    chunks.append(current)
    return [c for c in chunks if len(c) >= 8]


def training_pairs(objective: Objective, cfg: EncoderDecoderConfig) -> Callable[[list[int], Key], IdPair]:
    """corrupt(chunk, key) -> the objective's (inputs, targets), each ending with </s>."""
    def corrupt(chunk: list[int], key: Key) -> IdPair:
        inputs, targets = objective(chunk, key)
        # text infilling may insert a few <mask>s: the input is cut to what the encoder reads
        return inputs[:cfg.max_source_length - 1] + [cfg.eos_id], targets + [cfg.eos_id]
    return corrupt


def _tokenizer(path: str | Path | None, texts: list[str], cfg: EncoderDecoderConfig,
               objective: ObjectiveRecord) -> Tokenizer:
    """The tokenizer at `path`, or a BPE of the preset's size trained on `texts`; it must hold
    <pad>, </s> and the tokens the objective writes."""
    needed = (PAD, EOS, *objective.tokens)
    tok = (load_tokenizer(path) if path is not None
           else train_encoder_decoder_bpe(texts, cfg.vocab_size, cfg.family, needed))
    missing = [t for t in needed if tok.token_to_id(t) is None]
    if missing:
        shown = missing if len(missing) < 4 else [*missing[:3], "…"]
        raise LmlabError(f"tokenizer '{path}' lacks {len(missing)} token(s) {objective.name} needs ({', '.join(shown)}); "
                         "leave out --tokenizer to train one with them")
    return tok


def _check_train_config(cfg: TrainConfig) -> None:
    decoder_only(cfg.loop.fsdp, cfg.max_memory, "encoder-decoder pre-training")
    if cfg.compile:
        raise LmlabError("--compile is not supported by encoder-decoder pre-training; drop it")


def _data_key(chunks: list[list[int]]) -> str:
    """A short hash of the chunks' token ids: a resumed run must train on the same data."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(np.asarray([len(chunk), *chunk], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]
