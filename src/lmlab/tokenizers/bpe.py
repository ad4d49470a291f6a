"""Byte-level BPE: train a tokenizer on text, save it, load it back.

Text is first turned into bytes (every byte has its own token), then the most frequent adjacent
pairs are merged until the vocabulary is full. Because all 256 bytes are in the vocabulary from
the start, any Unicode string encodes without an unknown token and decodes back exactly.

Encoding adds no special tokens: callers decide where `<|bos|>` / `<|eos|>` go (the data
pipeline puts an eos after every document). Text that spells a special token, say "<|eos|>",
encodes to that token, as in GPT-2; set `tokenizer.encode_special_tokens = True` to encode it as
plain text instead, and decode with `skip_special_tokens=False` to get such text back.
"""

import ctypes
import functools
import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.io.json_file import parse_json_object, read_json_text
from lmlab.tokenizers.bpe_tables import REST_FILE, has_tables, load_tables
from lmlab.tokenizers.file_checks import MAX_FILE_BYTES, check_tokenizer_json
from lmlab.tokenizers.panics import library_panics
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
UNK = "<|unk|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, UNK)  # ids 0, 1, 2, 3 in a tokenizer trained here
TOKENIZER_FILE = "tokenizer.json"

N_BYTES = 256
LONGEST_WORD = 100  # characters trained on as one word (as BERT's WordPiece encodes at most)
_LONG_RUN = re.compile(rf"(?<!\S)\S{{{LONGEST_WORD + 1},}}")  # anchored at a run's start: one pass over the text
MIN_VOCAB_SIZE = N_BYTES + len(SPECIAL_TOKENS) + 1  # every byte, the specials, one merge


def train_bpe(texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str] = SPECIAL_TOKENS,
              split_digits: bool = False) -> Tokenizer:
    """Train a byte-level BPE tokenizer with `vocab_size` tokens (bytes + specials + merges).

    `special_tokens` take ids 0, 1, … in order (encoder-decoders pass their own: T5's sentinels,
    BART's <mask>). `split_digits` keeps every digit a token of its own (as Llama does), so that a
    number is read and written digit by digit. `vocab_size` is a ceiling: the vocabulary ends up
    smaller when the texts have fewer distinct pairs to merge (a preset's size on a small text), and
    the model is built for the size it gets; a command that took the size from the user says so
    (`warn_if_smaller`).
    """
    if vocab_size < N_BYTES + len(special_tokens) + 1:
        raise LmlabError(
            f"vocab size {vocab_size} is too small; byte-level BPE needs at least {N_BYTES + len(special_tokens) + 1} "
            f"({N_BYTES} bytes + {len(special_tokens)} special tokens + 1 merge)"
        )
    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                               if split_digits else byte_level)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_words(texts), trainer)
    return tokenizer


def training_words(texts: Iterable[str]) -> Iterator[str]:
    """`texts` with every run of more than LONGEST_WORD non-space characters cut into lines that
    long, for a tokenizer trainer: its time grows with each distinct word's length times the merges,
    so one unbroken run (a base64 blob, a 2 MB line without spaces) took hours, and no token that
    long is worth learning. Text without such runs is passed as it is."""
    for text in texts:
        yield _LONG_RUN.sub(_cut, text) if len(text) > LONGEST_WORD else text


def _cut(run: re.Match) -> str:
    word = run[0]
    return "\n".join(word[i:i + LONGEST_WORD] for i in range(0, len(word), LONGEST_WORD))


def warn_if_smaller(size: int, vocab_size: int) -> None:
    """Say (a warning, one line in the CLI) that a tokenizer trained to the `vocab_size` the user asked
    for (`--vocab-size`) stopped short at `size` tokens: the text had no more pairs worth merging.
    Only the commands that took the size from the user call it: a preset's size is a ceiling nobody
    asked for, so falling short of it is not news."""
    if size < vocab_size:
        warnings.warn(f"asked for a vocabulary of {vocab_size} tokens, but the text gives only {size}; "
                      f"using {size} (more text would give more; or ask for {size} or fewer with --vocab-size)",
                      stacklevel=2)


def save_tokenizer(tokenizer: Tokenizer, directory: str | os.PathLike) -> Path:
    """Write `tokenizer` as `directory/tokenizer.json` (atomically) and return that file's path."""
    path = Path(directory) / TOKENIZER_FILE
    atomic_write_text(path, tokenizer.to_str())
    return path


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load a tokenizer from a `tokenizer.json` file or from a directory that contains one (or the BPE
    tables that lmlab's caches keep instead, `bpe_tables.py`: read first where a directory has them).
    The file is parsed and bounded (`file_checks.py`) before the library builds anything from it, and
    the padding and truncation it may set are turned off, as transformers does unless a call asks for
    them: lmlab encodes whole texts (a `truncation` of 1 token in a downloaded file would otherwise cut
    every prompt and every training document silently); the encoders' loader sets its own."""
    path = Path(path)
    tables = path.is_dir() and has_tables(path)
    file = path / (REST_FILE if tables else TOKENIZER_FILE) if path.is_dir() else path
    if not file.is_file():
        raise LmlabError(
            f"tokenizer '{file}' does not exist; "
            f"pass a tokenizer.json file or a directory containing one"
        )
    fix = "re-save or re-train it"
    try:
        with library_panics(f"loading '{file}'"):
            if tables:
                tokenizer = load_tables(path)
            else:
                text = read_json_text(file, fix, MAX_FILE_BYTES)
                check_tokenizer_json(parse_json_object(text, file, fix), file)
                tokenizer = Tokenizer.from_str(text)
    except LmlabError:
        raise
    except Exception as error:  # the Rust library raises a bare Exception for any parse failure
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise LmlabError(
            f"tokenizer '{file}' is not a valid {file.name} ({first_line}); {fix}"
        ) from error
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return_freed_memory()  # the parse's buffers, freed but still resident: see there
    return tokenizer


def return_freed_memory() -> None:
    """Give the pages that C and Rust code have freed back to the operating system (glibc's `malloc_trim`).

    Why: parsing a tokenizer.json builds its tables from the JSON text and freed temporaries interleaved
    with them. SmolLM2's (1.5 MB, 49k tokens and merges) takes ~30 MiB of heap for a tokenizer that keeps
    ~8.5 MiB; glibc gives back only the free memory at the top of its heap, so ~16 MiB of freed pages stay
    resident until `malloc_trim` releases every whole free page (1-3 ms). Nothing allocated is touched: the
    tokenizer and its results are the same. Where malloc_trim does not exist (not Linux, or a C library
    other than glibc, such as musl) this does nothing."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's `int malloc_trim(size_t pad)`, or None where the process's C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the symbols already loaded into the process: its C library
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int | None]:
    """The ids of lmlab's bos / eos / pad / unk tokens in `tokenizer`, None for any it lacks."""
    names = {"bos": BOS, "eos": EOS, "pad": PAD, "unk": UNK}
    return {role: tokenizer.token_to_id(token) for role, token in names.items()}
