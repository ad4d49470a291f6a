"""`TextTokenizer`: an HF `tokenizers.Tokenizer` plus what generation needs to know about it.

A raw tokenizer does not say which token begins or ends a text, which ones stop generation
(chat models end a turn with their own token), or how to lay out a chat. This small wrapper
carries those, and reads/writes them as HF's `tokenizer_config.json` beside `tokenizer.json`.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, special_token_ids

CONFIG_FILE = "tokenizer_config.json"


@dataclass
class TextTokenizer:
    backend: Tokenizer
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    stop_ids: tuple[int, ...] = ()  # tokens that end generation (eos and, for chat models, end-of-turn)
    chat_template: str | None = None  # a jinja2 template over `messages`, as in HF
    extra: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text` as plain text; `add_bos` puts the bos token first."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_bos:
            if self.bos_id is None:
                raise LmlabError("this tokenizer has no bos token; drop --add-bos")
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """How one token reads on its own (for tables of top tokens)."""
        return self.backend.decode([token_id], skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        """Write tokenizer.json and tokenizer_config.json into `directory` (atomically, each)."""
        directory = Path(directory)
        atomic_write_text(directory / TOKENIZER_FILE, self.backend.to_str())
        name = self.backend.id_to_token
        config = {
            "bos_token": name(self.bos_id) if self.bos_id is not None else None,
            "eos_token": name(self.eos_id) if self.eos_id is not None else None,
            "pad_token": name(self.pad_id) if self.pad_id is not None else None,
            "stop_tokens": [name(i) for i in self.stop_ids],
        } | ({"chat_template": self.chat_template} if self.chat_template else {}) | self.extra
        atomic_write_text(directory / CONFIG_FILE, json.dumps(config, indent=2))

    @classmethod
    def from_dir(cls, directory: str | Path) -> "TextTokenizer":
        """tokenizer.json (+ tokenizer_config.json when present) from `directory`."""
        directory = Path(directory)
        backend = load_tokenizer(directory)
        config_path = directory / CONFIG_FILE
        if not config_path.is_file():  # an lmlab-trained tokenizer: its own special tokens
            ids = special_token_ids(backend)
            return cls(backend, ids["bos"], ids["eos"], ids["pad"], tuple(i for i in [ids["eos"]] if i is not None))
        config = json.loads(config_path.read_text())

        def token_id(key: str) -> int | None:
            token = config.get(key)
            token = token.get("content") if isinstance(token, dict) else token
            return backend.token_to_id(token) if token else None

        eos = token_id("eos_token")
        stops = [backend.token_to_id(t) for t in config.get("stop_tokens", [])]
        stops = tuple(i for i in dict.fromkeys([eos, *stops]) if i is not None)
        return cls(backend, token_id("bos_token"), eos, token_id("pad_token"), stops, config.get("chat_template"))
