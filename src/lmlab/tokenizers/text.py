"""`TextTokenizer`: an HF `tokenizers.Tokenizer` plus what generation needs to know about it.

A raw tokenizer does not say which token begins or ends a text, which ones stop generation
(chat models end a turn with their own token), or how to lay out a chat. This small wrapper
carries those, and reads/writes them as HF's `tokenizer_config.json` beside `tokenizer.json`. A
directory with a SentencePiece model in place of tokenizer.json (T5, DeBERTa-v3, Llama-2-style) is read
too (`sentencepiece_dir.py`).

A model may ship several named chat templates (HF's list form of `chat_template`:
[{"name": "default", "template": …}, {"name": "tool_use", …}]): the one named `default` is used
unless `with_chat_template(NAME)` picks another (the `--chat-template NAME` flag).
"""

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.io.json_file import read_json_object
from lmlab.io.lines import lone_surrogate
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, special_token_ids
from lmlab.tokenizers.bpe_tables import fits_tables, has_tables, save_tables
from lmlab.tokenizers.panics import library_panics
from lmlab.tokenizers.sentencepiece_dir import sentencepiece_dir_tokenizer
from lmlab.tokenizers.sentencepiece_file import model_file
from tokenizers import Tokenizer

CONFIG_FILE = "tokenizer_config.json"


@dataclass
class TextTokenizer:
    backend: Tokenizer
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    stop_ids: tuple[int, ...] = ()  # tokens that end generation (eos and, for chat models, end-of-turn)
    chat_template: str | None = None  # the jinja2 template over `messages` that chats render with, as in HF
    extra: dict = field(default_factory=dict)
    chat_templates: dict[str, str] = field(default_factory=dict)  # every named template, when the model names them

    def with_chat_template(self, name: str | None) -> "TextTokenizer":
        """This tokenizer rendering chats with its template called `name` (None: as it is)."""
        if name is None:
            return self
        if not self.chat_templates:
            raise LmlabError(f"--chat-template {name}: the model's chat templates have no names (it has "
                             f"{'one' if self.chat_template else 'none'}); drop --chat-template")
        if name not in self.chat_templates:
            raise LmlabError(f"--chat-template {name}: the model has no chat template of that name; it has "
                             f"{', '.join(self.chat_templates)}")
        return dataclasses.replace(self, chat_template=self.chat_templates[name])

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text` as plain text; `add_bos` puts the bos token first. Text that is not
        Unicode (a lone surrogate, from a JSON escape or undecodable bytes in an argument) is one line."""
        try:
            with library_panics("encoding a text"):
                ids = self.backend.encode(text, add_special_tokens=False).ids
        except TypeError as error:
            raise not_unicode(text) or error from None
        if add_bos:
            if self.bos_id is None:
                raise LmlabError("this tokenizer has no bos token; drop --add-bos")
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        with library_panics("decoding tokens"):
            return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """How one token reads on its own (for tables of top tokens)."""
        return self.decode([token_id], skip_special_tokens=False)

    def save(self, directory: str | Path, tables: bool = False) -> None:
        """Write tokenizer.json and tokenizer_config.json into `directory` (atomically, each). `tables`: a
        BPE as its tables in place of tokenizer.json where they can hold it (`bpe_tables.fits_tables`), which
        load 1.6x faster (`bpe_tables.py`): for lmlab's own caches, since other tools read tokenizer.json."""
        directory = Path(directory)
        if tables and fits_tables(self.backend):
            save_tables(self.backend, directory)
        else:
            atomic_write_text(directory / TOKENIZER_FILE, self.backend.to_str())
        name = self.backend.id_to_token
        config = {
            "bos_token": name(self.bos_id) if self.bos_id is not None else None,
            "eos_token": name(self.eos_id) if self.eos_id is not None else None,
            "pad_token": name(self.pad_id) if self.pad_id is not None else None,
            "stop_tokens": [name(i) for i in self.stop_ids],
        } | self._template_entry() | self.extra
        atomic_write_text(directory / CONFIG_FILE, json.dumps(config, indent=2))

    def _template_entry(self) -> dict:
        """`chat_template` as HF writes it: the list of named templates, or the one template."""
        if self.chat_templates:
            return {"chat_template": [{"name": n, "template": t} for n, t in self.chat_templates.items()]}
        return {"chat_template": self.chat_template} if self.chat_template else {}

    @classmethod
    def from_dir(cls, directory: str | Path) -> "TextTokenizer":
        """The tokenizer in `directory`: tokenizer.json (+ tokenizer_config.json when present), else a
        SentencePiece model (tokenizer.model, spiece.model, spm.model) with the tokens its
        tokenizer_config.json names, as transformers reads it (`sentencepiece_dir.py`)."""
        directory = Path(directory)
        config_path = directory / CONFIG_FILE
        sentencepiece = None if has_tokenizer_json(directory) else model_file(directory)
        if sentencepiece is not None:
            backend, config = sentencepiece_dir_tokenizer(directory, sentencepiece)
        else:
            backend = load_tokenizer(directory)
            if not config_path.is_file():  # an lmlab-trained tokenizer: its own special tokens
                ids = special_token_ids(backend)
                return cls(backend, ids["bos"], ids["eos"], ids["pad"], tuple(i for i in [ids["eos"]] if i is not None))
            config = read_tokenizer_config(config_path)

        def token_id(key: str) -> int | None:
            token = config.get(key)
            token = token.get("content") if isinstance(token, dict) else token
            if token is not None and not isinstance(token, str):
                raise LmlabError(f"{config_path}: {key} must be a token (a string or {{\"content\": …}}), not "
                                 f"{json.dumps(token)[:40]}; re-export the tokenizer")
            return known_id(token, key) if token else None

        def known_id(token: str, key: str) -> int:
            """The id of `token`, which the config names under `key`: a token the vocabulary lacks would
            silently drop a stop (generation would never end) or a bos, so it is refused."""
            found = backend.token_to_id(token)
            if found is None:
                raise LmlabError(f"{config_path}: {key} {token[:40]!r} is not a token of the tokenizer's "
                                 f"vocabulary ({sentencepiece or directory / TOKENIZER_FILE}); name one of its "
                                 "tokens there, or remove the key")
            return found

        eos = token_id("eos_token")
        stop_tokens = config.get("stop_tokens", [])
        if not (isinstance(stop_tokens, list) and all(isinstance(t, str) for t in stop_tokens)):
            raise LmlabError(f"{config_path}: stop_tokens must be a list of token strings; re-export the tokenizer")
        stops = [known_id(t, "stop_tokens") for t in stop_tokens]
        stops = tuple(i for i in dict.fromkeys([eos, *stops]) if i is not None)
        named = _named_templates(config.get("chat_template"), config_path)
        template = named.get("default") if isinstance(named, dict) else named
        return cls(backend, token_id("bos_token"), eos, token_id("pad_token"), stops, template,
                   chat_templates=named if isinstance(named, dict) else {})


def has_tokenizer_json(directory: Path) -> bool:
    """Whether `directory` holds a tokenizer.json (or the BPE tables lmlab's caches keep in its place)."""
    return (directory / TOKENIZER_FILE).is_file() or has_tables(directory)


def has_tokenizer(directory: Path) -> bool:
    """Whether `TextTokenizer.from_dir` finds a tokenizer in `directory`: a tokenizer.json or a SentencePiece model."""
    return has_tokenizer_json(directory) or model_file(directory) is not None


def not_unicode(text) -> LmlabError | None:
    """The error for a text the tokenizer refused, when it is a string with a lone surrogate (which no
    UTF-8 encodes: it comes from a JSON escape such as "\\ud800", or from bytes that were not UTF-8 in a
    command-line argument); None when that is not why."""
    char = lone_surrogate(text) if isinstance(text, str) else None
    if char is None:
        return None
    return LmlabError(f"the text to encode is not Unicode text: it holds a lone surrogate (\\u{ord(char):04x} at "
                      f"character {text.index(char) + 1}); pass UTF-8 text")


def read_tokenizer_config(path: Path) -> dict:
    """tokenizer_config.json as a dict, or one line naming the file and what is wrong with it."""
    return read_json_object(path, "re-export the tokenizer")


def _named_templates(value, path: Path) -> str | dict[str, str] | None:
    """HF's `chat_template`: one template (a string), or a list of {"name", "template"} as a dict."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: t["template"] for t in value}
    raise LmlabError(f"{path}: chat_template must be a template string or a list of {{\"name\", \"template\"}} "
                     "objects; re-export the tokenizer")
