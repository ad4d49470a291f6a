"""The tokenizer of a model directory that ships a SentencePiece model (`sentencepiece_file.MODEL_FILES`)
instead of a tokenizer.json, with the tokens transformers adds to it.

transformers builds these tokenizers (T5, DeBERTa-v3, Llama-2-style directories) from the `.model` file and
the directory's tokenizer_config.json / special_tokens_map.json, and adds tokens after the model's pieces:

- T5's tokenizer its sentinels <extra_id_0>..<extra_id_{n-1}> (`extra_ids`, 100 by default), the last
  first, so that <extra_id_0> is the highest id (32099 after T5's 32000 pieces);
- then each special token the files name that the model lacks (DeBERTa-v3's [MASK]), in transformers'
  order: bos, eos, unk, sep, pad, cls, mask, then `additional_special_tokens`.

The ids here are transformers' ids for the same directory. The role ids (bos, eos, pad) are the files'
tokens, else the ones the model's trainer set.
"""

import json
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.json_file import read_json_object
from lmlab.tokenizers.file_checks import MAX_ADDED_TOKEN_CHARS, MAX_ADDED_TOKENS
from lmlab.tokenizers.sentencepiece_file import read_model_file
from lmlab.tokenizers.sentencepiece_pipeline import sentencepiece_tokenizer
from tokenizers import AddedToken, Tokenizer

CONFIG_FILE, SPECIAL_TOKENS_FILE = "tokenizer_config.json", "special_tokens_map.json"
SENTINEL_TOKENIZERS = ("T5Tokenizer", "T5TokenizerFast")  # tokenizer_config.json's tokenizer_class
SENTINEL_MODEL_TYPES = ("t5",)  # config.json's model_type, where tokenizer_config.json names no class
DEFAULT_EXTRA_IDS = 100
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
ROLES = {"bos_token": "bos", "eos_token": "eos", "pad_token": "pad"}  # the roles TextTokenizer keeps


def sentencepiece_dir_tokenizer(directory: Path, model_path: Path) -> tuple[Tokenizer, dict]:
    """(the tokenizer, its settings) of `directory`, whose SentencePiece model is `model_path`: the settings
    are tokenizer_config.json's (`tokenizer_settings`), with the trainer's bos, eos and pad tokens for
    those it does not name."""
    read = read_model_file(model_path)
    backend = sentencepiece_tokenizer(read.model, str(model_path))
    settings = tokenizer_settings(directory)
    extra_ids = _extra_ids(directory, settings)
    backend.add_special_tokens([_special(f"<extra_id_{i}>") for i in reversed(range(extra_ids))])
    named = [_token(settings[key], key, directory) for key in NAMED_TOKENS if settings.get(key) is not None]
    additional = settings.get("additional_special_tokens") or []
    if not isinstance(additional, list) or len(additional) > MAX_ADDED_TOKENS:
        raise _bad(directory, "additional_special_tokens", f"a list of at most {MAX_ADDED_TOKENS:,} tokens")
    added = [t for t in [*named, *(_token(t, "additional_special_tokens", directory) for t in additional)]
             if backend.token_to_id(t) is None]
    backend.add_special_tokens([_special(t) for t in dict.fromkeys(added)])
    pieces = read.model.pieces
    trained = {key: pieces[read.special_ids[role]] if read.special_ids[role] is not None else None
               for key, role in ROLES.items()}
    return backend, settings | {key: trained[key] for key in ROLES if key not in settings}


def tokenizer_settings(directory: Path) -> dict:
    """tokenizer_config.json over special_tokens_map.json (either may be missing), as transformers reads them."""
    settings = {}
    for name in (SPECIAL_TOKENS_FILE, CONFIG_FILE):
        if (directory / name).is_file():
            settings |= read_json_object(directory / name, "re-export the tokenizer")
    return settings


def _extra_ids(directory: Path, settings: dict) -> int:
    """How many T5 sentinels transformers adds: `extra_ids` for T5's tokenizer class, else none."""
    kind = settings.get("tokenizer_class")
    if kind is None and (directory / "config.json").is_file():
        model_type = read_json_object(directory / "config.json", "re-save the model").get("model_type")
        sentinels = model_type in SENTINEL_MODEL_TYPES
    else:
        sentinels = kind in SENTINEL_TOKENIZERS
    count = settings.get("extra_ids", DEFAULT_EXTRA_IDS) if sentinels else 0
    if not (isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_ADDED_TOKENS):
        raise _bad(directory, "extra_ids", f"a count from 0 to {MAX_ADDED_TOKENS:,}")
    return count


def _token(value, key: str, directory: Path) -> str:
    """A token as the files write it: a string, or {"content": string, …}."""
    value = value.get("content") if isinstance(value, dict) else value
    if not (isinstance(value, str) and 0 < len(value) <= MAX_ADDED_TOKEN_CHARS):
        raise _bad(directory, key, f"a token (a string of 1 to {MAX_ADDED_TOKEN_CHARS} characters, or "
                                   "{\"content\": …})")
    return value


def _special(token: str) -> AddedToken:
    return AddedToken(token, special=True, normalized=False)


def _bad(directory: Path, key: str, what: str) -> LmlabError:
    return LmlabError(f"{directory}: the tokenizer's {key} must be {what}; re-export the tokenizer "
                      f"({json.dumps(key)} in {CONFIG_FILE} or {SPECIAL_TOKENS_FILE})")
