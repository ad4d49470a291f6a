"""Tiny task files and a tiny saved BERT encoder for the encoder fine-tuning and embedding tests."""

import json
from pathlib import Path

import torch

from lmlab.models.bert.build import build_encoder
from lmlab.models.encoder_files import save_hf_encoder_dir
from lmlab.models.presets import preset
from lmlab.tokenizers.wordpiece import train_wordpiece

WORDS = ("the cat sat on a mat . paris is in france and rome is in italy ; anna lives in oslo with bob "
         "which city is the capital what did she do good bad great awful movie food was not very").split()
TINY = dict(context_length=64, n_layers=2, n_heads=2, d_model=32, d_ff=64)


def tiny_encoder_dir(directory: Path, vocab_size: int = 200) -> Path:
    """A random 2-layer, 32-wide BERT with a WordPiece trained on WORDS, saved in HF layout."""
    tokenizer = train_wordpiece([" ".join(WORDS)] * 3, vocab_size)
    torch.manual_seed(0)
    encoder = build_encoder(preset("bert-tiny", vocab_size=tokenizer.get_vocab_size(), **TINY))
    return save_hf_encoder_dir(encoder, directory, tokenizer)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_csv(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def task_rows(task: str) -> list[dict]:
    """Twelve small examples of `task` in the default columns."""
    good = ["the movie was good", "the food was great", "the cat was not bad", "paris was very good"]
    bad = ["the movie was bad", "the food was awful", "the cat was not good", "rome was very bad"]
    if task == "classify":
        texts = good + bad + good[:2] + bad[:2]
        return [{"text": t, "label": "pos" if t in good else "neg"} for t in texts]
    if task == "pair":
        return [{"text": a, "text_pair": b, "label": str(a.split()[-1] == b.split()[-1])}
                for a in good[:2] + bad[:2] for b in good[2:] + bad[2:]][:12]
    if task == "regress":
        return [{"text": t, "label": float(i % 4)} for i, t in enumerate(good + bad + good)]
    if task == "tag":
        return [{"tokens": ["anna", "lives", "in", "oslo"], "tags": ["B-PER", "O", "O", "B-LOC"]},
                {"tokens": ["bob", "is", "in", "paris", "france"], "tags": ["B-PER", "O", "O", "B-LOC", "I-LOC"]},
                {"tokens": ["rome", "is", "in", "italy"], "tags": ["B-LOC", "O", "O", "B-LOC"]}] * 4
    if task == "qa":
        return [{"question": "which city is the capital", "context": "paris is in france and rome is in italy",
                 "answer": "paris"},
                {"question": "what did she do", "context": "anna lives in oslo with bob", "answer": "lives in oslo"},
                {"question": "where is rome", "context": "paris is in france and rome is in italy",
                 "answer": "italy", "answer_start": 34}] * 4
    return [{"question": "the cat sat on", "choices": ["a mat", "paris", "the food"], "label": 0},
            {"question": "rome is in", "choices": ["oslo", "italy", "a cat"], "label": 1}] * 6
