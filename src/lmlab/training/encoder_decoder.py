"""Where an encoder-decoder run starts, and how its text becomes token ids.

A run starts from a preset (fresh weights, and a byte-level BPE with the family's special tokens
trained on the run's own text) or from a trained model directory (an lmlab run, or an HF T5 /
BART / Marian directory) with its tokenizer. A decoder-only or encoder-only model is refused with
one line: it has no encoder to read a source, or no decoder to write a target.

Sources are `tokens </s>`, targets `tokens </s>`; a text longer than the model reads is an error
naming it, or, when asked, is cut (the caller warns).
"""

import hashlib
from pathlib import Path

import torch

from lmlab.errors import LmlabError
from lmlab.losses.linear_cross_entropy import EncoderDecoderLoss
from lmlab.models import registry
from lmlab.models.encoder_decoder.config import EncoderDecoderConfig
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.models.encoder_decoder.model import EncoderDecoder
from lmlab.models.presets import family_of, names, preset
from lmlab.objectives.encoder_decoder_batch import encoder_decoder_batch
from lmlab.tokenizers.bpe import load_tokenizer
from lmlab.tokenizers.encoder_decoder_bpe import BOS, EOS, PAD, train_encoder_decoder_bpe
from tokenizers import Tokenizer

IdPair = tuple[list[int], list[int]]  # (source ids, target ids), each ending with </s>


def starting_model(model: str, texts: list[str], vocab_size: int, seed: int, extra_tokens: tuple[str, ...] = (),
                   tokenizer: str | Path | None = None, **overrides) -> tuple[EncoderDecoder, Tokenizer, str]:
    """(model, tokenizer, what to call the model in run.json) for `--model`: a preset built from
    `seed` (its `overrides` applied to the config) with a BPE of `vocab_size` trained on `texts`
    (holding `extra_tokens` too), or a trained model directory (a run directory's model/ too).
    `tokenizer` (a tokenizer.json or its directory) replaces the trained or the model's own."""
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    if model in names("encoder-decoder") and not Path(model).exists():
        tok = tok or train_encoder_decoder_bpe(texts, vocab_size, family_of(model).name, extra_tokens)
        missing = [t for t in (PAD, EOS, *extra_tokens) if tok.token_to_id(t) is None]
        if missing:
            raise LmlabError(f"tokenizer '{tokenizer}' lacks the special tokens {missing}; leave out --tokenizer "
                             "to train one with them")
        cfg = fit_to_tokenizer(preset(model, **overrides), tok)
        torch.manual_seed(seed)
        return registry.build(cfg), tok, model
    check_model_name(model)
    encoder_decoder, own = load_encoder_decoder(model)
    if tok is None and own is None:
        raise LmlabError(f"'{model}' has no tokenizer.json; pass --tokenizer with the tokenizer the model was trained "
                         "with")
    if tok is not None and tok.get_vocab_size() > encoder_decoder.config.vocab_size:
        raise LmlabError(f"tokenizer '{tokenizer}' has {tok.get_vocab_size()} tokens but the model's vocabulary "
                         f"has {encoder_decoder.config.vocab_size}; use the tokenizer the model was trained with")
    return encoder_decoder, tok or own, str(Path(model).resolve())


def fit_to_tokenizer(cfg: EncoderDecoderConfig, tok: Tokenizer) -> EncoderDecoderConfig:
    """`cfg` with the tokenizer's vocabulary size and its pad / </s> ids; the decoder starts from its
    family's start token (`Family.decoder_start`: </s> in BART, <pad> in T5 and the original Transformer,
    as in HF)."""
    start = registry.lookup(cfg.family).decoder_start
    return cfg.replace(vocab_size=tok.get_vocab_size(), pad_id=tok.token_to_id(PAD), eos_id=tok.token_to_id(EOS),
                       decoder_start_id=tok.token_to_id(start))


def check_model_name(model: str) -> None:
    """A decoder-only or encoder-only preset, or a path that does not exist, is an error naming the
    encoder-decoder presets (`load_encoder_decoder` refuses a directory of another kind)."""
    presets = ", ".join(names("encoder-decoder"))
    if model in names("decoder") or model in names("encoder"):
        raise LmlabError(f"'{model}' is a {family_of(model).kind}-only preset; sequence-to-sequence needs an "
                         f"encoder-decoder: {presets}, or a T5 / BART / Marian model directory")
    if not Path(model).exists():
        raise LmlabError(f"'{model}' is neither an encoder-decoder preset ({presets}) nor a model directory")


def fingerprint(model: EncoderDecoder) -> str:
    """A hash of the starting weights: a resumed run must start from the same model."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return f"{model.config.family}-{digest.hexdigest()[:16]}"


def encode_text(tok: Tokenizer, text: str, eos_id: int, bos_id: int | None = None) -> list[int]:
    """`text` as ids with </s> at the end (and <s> at the start when `bos_id` is given, as BART reads)."""
    ids = tok.encode(text, add_special_tokens=False).ids + [eos_id]
    return ids if bos_id is None else [bos_id, *ids]


def source_bos(model: EncoderDecoder, tok: Tokenizer) -> int | None:
    """The id of <s> where the model's family starts its sources with it (BART); None where they start
    with the first word (`Family.source_bos`)."""
    return tok.token_to_id(BOS) if registry.lookup(model.config.family).source_bos else None


def fit_length(ids: list[int], limit: int, truncate: bool, what: str) -> tuple[list[int], bool]:
    """(ids, whether they were cut): ids longer than `limit` are cut to it, ending with their last
    id (</s>), when `truncate`; otherwise they are an error naming `what`."""
    if len(ids) <= limit:
        return ids, False
    if not truncate:
        raise LmlabError(f"{what} has {len(ids)} tokens but the model reads at most {limit}; shorten it, "
                         "or pass --truncate to cut such texts")
    return ids[:limit - 1] + ids[-1:], True


def teacher_forced_loss(model: EncoderDecoder, pairs: list[IdPair]) -> torch.Tensor:
    """Mean cross-entropy of the targets given the sources, the decoder reading the reference prefix."""
    cfg, device = model.config, model.lm_head.weight.device
    batch = {k: v.to(device) for k, v in encoder_decoder_batch(pairs, cfg.pad_id, cfg.decoder_start_id).items()}
    return EncoderDecoderLoss(model)(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"],
                                     batch["labels"], batch["decoder_attention_mask"])


def mean_loss(model: EncoderDecoder, pairs: list[IdPair], batch_size: int) -> float:
    """Cross-entropy per target token over all `pairs`."""
    total = tokens = 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        n = sum(len(target) for _, target in chunk)
        total += teacher_forced_loss(model, chunk).item() * n
        tokens += n
    return total / tokens
