"""WordPiece tokenizers as BERT checkpoints ship them, and batches of encoder inputs.

A BERT directory holds a `tokenizer.json`, or only the older `vocab.txt` (+ `tokenizer_config.json`
saying whether to lower-case); both give the same HF `tokenizers.Tokenizer`: BERT's normaliser and
pre-tokeniser, WordPiece, and "[CLS] A [SEP] (B [SEP])" around every text.
"""

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing

from lmlab.errors import LmlabError
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer

VOCAB_FILE = "vocab.txt"
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_wordpiece(directory: str | Path, max_length: int) -> Tokenizer:
    """The tokenizer in `directory` (tokenizer.json, else vocab.txt), padding each batch to its longest
    text and truncating to `max_length` tokens (the model's positions), whatever the file says."""
    directory = Path(directory)
    if (directory / TOKENIZER_FILE).is_file():
        tokenizer = load_tokenizer(directory)
    elif (directory / VOCAB_FILE).is_file():
        tokenizer = wordpiece_from_vocab(directory / VOCAB_FILE, lowercase=_lowercase(directory))
    else:
        raise LmlabError(f"'{directory}' has neither {TOKENIZER_FILE} nor {VOCAB_FILE}; "
                         "put the model's tokenizer next to its weights")
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length)
    return tokenizer


def wordpiece_from_vocab(vocab_file: str | Path, lowercase: bool = True) -> Tokenizer:
    """BERT's tokenizer from a vocab.txt (one token a line, id = line number)."""
    vocab = WordPiece.read_file(str(vocab_file))
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise LmlabError(f"'{vocab_file}' lacks BERT's special token(s) {missing}; it is not a BERT vocabulary")
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = BertNormalizer(lowercase=lowercase)  # also strips accents when lower-casing, as BERT does
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])  # "[MASK]" in text stays one token
    return tokenizer


def encode_batch(tokenizer: Tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and token_type_ids, each (B, T), for an encoder (padding on the right)."""
    encodings = tokenizer.encode_batch(texts)
    return (torch.tensor([e.ids for e in encodings]), torch.tensor([e.attention_mask for e in encodings]),
            torch.tensor([e.type_ids for e in encodings]))


def _lowercase(directory: Path) -> bool:
    """`do_lower_case` from tokenizer_config.json; BERT's default (True) when it is not there."""
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return True
    try:
        return bool(json.loads(config.read_text()).get("do_lower_case", True))
    except json.JSONDecodeError as e:
        raise LmlabError(f"{config} is not valid JSON ({e}); re-export the tokenizer") from None
