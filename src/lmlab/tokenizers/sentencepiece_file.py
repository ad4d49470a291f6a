"""SentencePiece model files (`tokenizer.model`, `spiece.model`, `spm.model`): read, checked, as a tokenizer.

Llama-2-style, T5 and DeBERTa-v3 directories ship their tokenizer as the `.model` file `sentencepiece`
trained, a protocol-buffer message: the pieces with their scores and types, the trainer's settings
(unigram or BPE, byte fallback, the ids of <unk> <s> </s> <pad>) and the normalizer's (the precompiled
character map, the dummy prefix, extra whitespace). `sentencepiece`'s own message class parses it; the
file comes from someone else, so its size is bounded first and what it holds is checked before the
`tokenizers` pipeline (`sentencepiece_pipeline.py`, which checks the pieces) is built from it.
"""

from dataclasses import dataclass
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.tokenizers.file_checks import MAX_CHARSMAP_CHARS, MAX_VOCAB
from lmlab.tokenizers.sentencepiece_pipeline import BPE, UNIGRAM, SentencePieceModel

MODEL_FILES = ("tokenizer.model", "spiece.model", "spm.model")  # Llama-style, T5 / ALBERT, DeBERTa-v3
MAX_MODEL_BYTES = 64 << 20  # published models: Llama-2's is 0.5 MB, Gemma's 4.5 MB
ALGORITHMS = {1: UNIGRAM, 2: BPE}  # TrainerSpec.model_type; WORD (3) and CHAR (4) models are not read


@dataclass(frozen=True)
class SentencePieceFile:
    model: SentencePieceModel
    special_ids: dict[str, int | None]  # "unk", "bos", "eos", "pad" as the trainer set them (None: none)


def model_file(directory: Path) -> Path | None:
    """The SentencePiece model file in `directory`, None when it has none."""
    return next((directory / name for name in MODEL_FILES if (directory / name).is_file()), None)


def read_model_file(path: Path) -> SentencePieceFile:
    """The model in the SentencePiece file `path`, checked; anything wrong with it is one LmlabError line."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415
    from sentencepiece import sentencepiece_model_pb2  # noqa: PLC0415 (imports protobuf: only when a file is read)

    def refuse(what: str) -> LmlabError:
        return LmlabError(f"'{path}' {what}; use the model's published {path.name}")

    size = path.stat().st_size
    if size > MAX_MODEL_BYTES:
        raise refuse(f"is {size:,} bytes, more than the {MAX_MODEL_BYTES:,} lmlab reads as a SentencePiece model")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except (DecodeError, RuntimeError, ValueError) as error:
        raise refuse(f"is not a SentencePiece model ({str(error)[:100] or type(error).__name__})") from None
    trainer, normalizer = proto.trainer_spec, proto.normalizer_spec
    pieces = tuple(p.piece for p in proto.pieces)
    scores = tuple(p.score for p in proto.pieces)
    types = tuple(p.type for p in proto.pieces)
    if not all(isinstance(piece, str) for piece in pieces):  # protobuf gives the bytes of one that is not UTF-8
        raise refuse("has a piece that is not UTF-8 text")
    if not 0 < len(pieces) <= MAX_VOCAB:
        raise refuse(f"holds {len(pieces):,} pieces; a SentencePiece model has between 1 and {MAX_VOCAB:,}")
    if trainer.model_type not in ALGORITHMS:
        raise refuse(f"is a SentencePiece model of type {trainer.model_type} (word or character); lmlab reads "
                     "unigram and BPE models")
    if trainer.treat_whitespace_as_suffix or not normalizer.escape_whitespaces:
        raise refuse("puts the space after each word or keeps it a space (treat_whitespace_as_suffix, "
                     "escape_whitespaces false), which lmlab does not read")
    if len(normalizer.precompiled_charsmap) > MAX_CHARSMAP_CHARS:
        raise refuse(f"has a normalization table of {len(normalizer.precompiled_charsmap):,} bytes, more than "
                     f"{MAX_CHARSMAP_CHARS:,}")
    model = SentencePieceModel(pieces, scores, types, ALGORITHMS[trainer.model_type], trainer.byte_fallback,
                               normalizer.add_dummy_prefix, normalizer.remove_extra_whitespaces,
                               normalizer.precompiled_charsmap)
    ids = {"unk": trainer.unk_id, "bos": trainer.bos_id, "eos": trainer.eos_id, "pad": trainer.pad_id}
    return SentencePieceFile(model, {role: i if 0 <= i < len(pieces) else None for role, i in ids.items()})
