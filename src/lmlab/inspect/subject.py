"""What the analysis tools inspect: any transformer lmlab loads, with its tokenizer and its kind.

A decoder (GPT-2, Llama, SmolLM2 from GGUF, anything trained here), an encoder (BERT, RoBERTa,
ALBERT, ELECTRA, all-MiniLM-L6-v2) or an encoder-decoder (BART, T5, Marian) each load with their
own reader and tokenize differently (an encoder's tokenizer adds [CLS] and [SEP]). `Subject` hides
that: `load_subject` picks the reader from the model's config, `tokens` gives the ids and the token
strings to label a figure with.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lmlab.errors import LmlabError
from lmlab.io.json_file import read_json_object
from lmlab.models import registry
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.models.load import load, load_encoder, zoo_or_path

KINDS = ("decoder", "encoder", "encoder-decoder")


@dataclass(frozen=True)
class Subject:
    model: nn.Module
    tokenizer: object  # TextTokenizer (decoder) or tokenizers.Tokenizer (encoder, encoder-decoder)
    kind: str  # one of KINDS

    def tokens(self, text: str) -> tuple[torch.Tensor, list[str]]:
        """`text` as model input ids (1, T), with the encoder's special tokens, and each token's text."""
        if self.kind == "decoder":
            ids = self.tokenizer.encode(text)
            labels = [self.tokenizer.token_text(i) for i in ids]
        else:
            encoding = self.tokenizer.encode(text)
            ids, labels = encoding.ids, list(encoding.tokens)
        device = next(self.model.parameters()).device
        return torch.tensor([ids], device=device), labels


def load_subject(name_or_path: str | Path) -> Subject:
    """The model at `name_or_path` (zoo name, .gguf file, model or run directory) in eval mode."""
    path = zoo_or_path(name_or_path)
    model_dir = path / "model" if (path / "model" / "config.json").is_file() else path
    model_type = None
    if (model_dir / "config.json").is_file():
        model_type = read_json_object(model_dir / "config.json", "").get("model_type")
    if model_type in registry.model_types("encoder"):
        model, tokenizer = load_encoder(path)
        return Subject(model.eval(), tokenizer, "encoder")
    if model_type in registry.model_types("encoder-decoder"):
        model, tokenizer = load_encoder_decoder(path)
        return Subject(model.eval(), tokenizer, "encoder-decoder")
    model, tokenizer = load(path, "fp32")  # float weights: saliency takes gradients, the hooks read nn.Linear
    return Subject(model.eval(), tokenizer, "decoder")


def prompt_ids(model: nn.Module, tokenizer, text: str, flag: str) -> list[int]:
    """A decoder's token ids of `text` (given as `flag`), refused when empty or longer than the model's window."""
    ids = tokenizer.encode(text)
    if not ids:
        raise LmlabError(f"{flag} is empty: give the text to inspect")
    if len(ids) > model.config.context_length:
        raise LmlabError(f"{flag} is {len(ids)} tokens, more than the model's context of "
                         f"{model.config.context_length}; shorten {flag}")
    return ids
