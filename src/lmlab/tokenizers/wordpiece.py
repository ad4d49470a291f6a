"""WordPiece tokenizers: trained on your text, or as BERT checkpoints ship them; batches of encoder inputs.

A BERT directory holds a `tokenizer.json`, or only the older `vocab.txt` (+ `tokenizer_config.json`
saying whether to lower-case); both give the same HF `tokenizers.Tokenizer`: BERT's normaliser and
pre-tokeniser, WordPiece, and "[CLS] A [SEP] (B [SEP])" around every text. A DeBERTa-v3 directory may
hold only its SentencePiece model (spm.model), read as `sentencepiece_dir.py` reads it, with the same
"[CLS] A [SEP]" around each text.
"""

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing
from tokenizers.trainers import WordPieceTrainer

from lmlab.errors import LmlabError
from lmlab.io.json_file import read_json_object
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, training_words
from lmlab.tokenizers.panics import library_panics
from lmlab.tokenizers.sentencepiece_dir import sentencepiece_dir_tokenizer
from lmlab.tokenizers.sentencepiece_file import model_file
from lmlab.tokenizers.text import read_tokenizer_config
from tokenizers import Tokenizer, decoders

VOCAB_FILE = "vocab.txt"
SENTENCEPIECE_ENCODER_FILE = "spm.model"
SENTENCEPIECE_ENCODERS = ("deberta-v2",)  # model_types whose SentencePiece model is their whole tokenizer
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MIN_VOCAB_SIZE = 32


def load_wordpiece(directory: str | Path, max_length: int) -> Tokenizer:
    """The tokenizer in `directory` (tokenizer.json, else vocab.txt), padding each batch to its longest
    text and truncating to `max_length` tokens (the model's positions), whatever the file says."""
    directory = Path(directory)
    if (directory / TOKENIZER_FILE).is_file():
        tokenizer = load_tokenizer(directory)
    elif (directory / VOCAB_FILE).is_file():
        tokenizer = wordpiece_from_vocab(directory / VOCAB_FILE, lowercase=_lowercase(directory))
    elif (sentencepiece := model_file(directory)) is not None:
        tokenizer = _sentencepiece_encoder(directory, sentencepiece)
    else:
        raise LmlabError(f"'{directory}' has neither {TOKENIZER_FILE} nor {VOCAB_FILE} (nor DeBERTa-v3's "
                         f"{SENTENCEPIECE_ENCODER_FILE}); put the model's tokenizer next to its weights")
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length)
    return tokenizer


def _sentencepiece_encoder(directory: Path, path: Path) -> Tokenizer:
    """DeBERTa-v3's tokenizer: its SentencePiece model with "[CLS] A [SEP]" around a text, as transformers
    reads it. Other encoders' SentencePiece models (ALBERT's spiece.model) are refused: their tokenizers
    lower-case and strip accents outside the model, which the model file does not say."""
    config = directory / "config.json"
    model_type = read_json_object(config, "re-save the model").get("model_type") if config.is_file() else None
    if model_type not in SENTENCEPIECE_ENCODERS:
        raise LmlabError(f"'{directory}' has only the SentencePiece model {path.name} as its tokenizer, which lmlab "
                         f"reads for {', '.join(SENTENCEPIECE_ENCODERS)} encoders only, not {model_type}; save the "
                         f"tokenizer as {TOKENIZER_FILE} with transformers (tokenizer.save_pretrained)")
    return _with_template(sentencepiece_dir_tokenizer(directory, path)[0])


def wordpiece_from_vocab(vocab_file: str | Path, lowercase: bool = True) -> Tokenizer:
    """BERT's tokenizer from a vocab.txt (one token a line, id = line number)."""
    try:
        vocab = WordPiece.read_file(str(vocab_file))
    except Exception as e:  # the Rust library raises a bare Exception, e.g. for bytes that are not UTF-8
        raise LmlabError(f"'{vocab_file}' is not a readable vocab.txt ({str(e).strip()}); re-export the tokenizer"
                         ) from None
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise LmlabError(f"'{vocab_file}' lacks BERT's special token(s) {missing}; it is not a BERT vocabulary")
    tokenizer = _bert_pipeline(Tokenizer(WordPiece(vocab, unk_token="[UNK]")), lowercase, strip_accents=None)
    tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])  # "[MASK]" in text stays one token
    return _with_template(tokenizer)


def train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool = True,
                    strip_accents: bool | None = None) -> Tokenizer:
    """Train a BERT WordPiece tokenizer on `texts`: [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0-4, words
    are split on whitespace and punctuation, continuation pieces start with "##". `strip_accents`
    None follows `lowercase`, as BERT's uncased models do."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise LmlabError(f"vocab size {vocab_size} is too small for WordPiece; use at least {MIN_VOCAB_SIZE} "
                         "(the special tokens, the characters of the text and some pieces)")
    tokenizer = _bert_pipeline(Tokenizer(WordPiece(unk_token="[UNK]")), lowercase, strip_accents)
    trainer = WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer.train_from_iterator(training_words(texts), trainer)  # long runs cut, as for BPE (a ceiling, too)
    return _with_template(tokenizer)


def _bert_pipeline(tokenizer: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    """BERT's normaliser (lower-casing, accent stripping, Chinese characters split), pre-tokeniser and decoder."""
    tokenizer.normalizer = BertNormalizer(lowercase=lowercase, strip_accents=strip_accents)
    tokenizer.pre_tokenizer = BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer


def _with_template(tokenizer: Tokenizer) -> Tokenizer:
    """"[CLS] A [SEP]" around one text and "[CLS] A [SEP] B [SEP]" around a pair, B's tokens of type 1."""
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


def encode_batch(tokenizer: Tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and token_type_ids, each (B, T), for an encoder (padding on the right)."""
    with library_panics("encoding texts"):
        encodings = tokenizer.encode_batch(texts)
    return encodings_to_tensors(encodings)


def encodings_to_tensors(encodings: list, length: int | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and token_type_ids (B, T) of right-padded `encodings`, cut to their
    first `length` positions (all of them by default): a batch drawn from encodings padded to a
    longer batch's length needs only its own longest."""
    cut = slice(length)
    return (torch.tensor([e.ids[cut] for e in encodings]), torch.tensor([e.attention_mask[cut] for e in encodings]),
            torch.tensor([e.type_ids[cut] for e in encodings]))


def _lowercase(directory: Path) -> bool:
    """`do_lower_case` from tokenizer_config.json; BERT's default (True) when it is not there."""
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return True
    lowercase = read_tokenizer_config(config).get("do_lower_case", True)
    if not isinstance(lowercase, bool):
        raise LmlabError(f"{config}: do_lower_case must be true or false, not {json.dumps(lowercase)[:40]}; "
                         "re-export the tokenizer")
    return lowercase
