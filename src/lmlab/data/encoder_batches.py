"""Examples of an encoder task -> token ids once, then padded batches of tensors.

`encode_examples` tokenizes every example ("[CLS] A [SEP]" or "[CLS] A [SEP] B [SEP]" with token
types) and turns its target into what the head's loss reads: a label id, a score, one label per
token (only a word's first sub-token is labelled), the answer's first and last token, or the
index of the right choice. `collate` pads a batch on the right.

Inputs longer than `max_length` tokens are cut (the second text first, and for QA only the
context) and counted; with `truncate=False` the first one is an error naming its line.
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch

from lmlab.data.encoder_tasks import Example
from lmlab.errors import LmlabError
from lmlab.targets import IGNORE_INDEX
from tokenizers import Encoding, Tokenizer


@dataclass
class Features:
    """Token ids of every example (for choice: of each of its choices) and what its loss reads."""

    ids: list  # per example: token ids (T,), or per choice for multiple choice (K, T)
    types: list  # token types, the same shape
    targets: list  # per example: label id, score, token labels (T,), (first, last) token or choice index;
    # None without one (a prediction, or a QA answer that truncation cut off)
    truncated: list[int] = field(default_factory=list)  # lines of the examples that were cut
    word_starts: list[list[int]] = field(default_factory=list)  # tag: the first token of each kept word
    offsets: list[list[tuple[int, int]]] = field(default_factory=list)  # qa: each token's characters in the context
    in_context: list[list[bool]] = field(default_factory=list)  # qa: which tokens belong to the context


def encode_examples(task: str, tokenizer: Tokenizer, examples: list[Example], max_length: int, labels: list[str],
                    truncate: bool = True, path: str | Path = "data") -> Features:
    """Tokenize `examples` of `task` into `Features`; `labels` name the label ids (classify, pair, tag)."""
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length, strategy="only_second" if task == "qa" else "longest_first")
    label_id = {name: i for i, name in enumerate(labels)}
    features = Features([], [], [])
    for example in examples:
        encodings = _encode(task, tokenizer, example)
        if any(e.overflowing for e in encodings):
            if not truncate:
                raise LmlabError(f"{path}:{example.line} is longer than --max-length {max_length} tokens; raise "
                                 "--max-length, or drop --no-truncate to cut long inputs")
            features.truncated.append(example.line)
        features.ids.append([e.ids for e in encodings] if task == "choice" else encodings[0].ids)
        features.types.append([e.type_ids for e in encodings] if task == "choice" else encodings[0].type_ids)
        features.targets.append(_target(task, example, encodings[0], label_id, features))
    return features


def _encode(task: str, tokenizer: Tokenizer, example: Example) -> list[Encoding]:
    if task == "tag":
        return [tokenizer.encode(example.text, is_pretokenized=True)]
    if task == "choice":
        return tokenizer.encode_batch([(example.text, choice) for choice in example.pair])
    if example.pair is None:
        return [tokenizer.encode(example.text)]
    return [tokenizer.encode(example.text, example.pair)]


def _target(task: str, example: Example, encoding: Encoding, label_id: dict[str, int], features: Features):
    """What the loss reads for `example` (None when it has no target: a prediction, a QA answer cut off);
    for tag and qa, also what prediction reads (word starts, character offsets)."""
    if task == "tag":
        word_ids = encoding.word_ids
        starts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or w != word_ids[i - 1])]
        features.word_starts.append(starts)
    if task == "qa":
        features.offsets.append(encoding.offsets)
        features.in_context.append([s == 1 for s in encoding.sequence_ids])
    if example.target is None:
        return None
    if task in ("classify", "pair"):
        return label_id[example.target]
    if task in ("regress", "choice"):
        return example.target
    if task == "tag":
        return first_subtoken_labels(encoding.word_ids, [label_id[tag] for tag in example.target])
    start = example.answer_start
    return _answer_tokens(encoding.offsets, features.in_context[-1], start, start + len(example.target))


def _answer_tokens(offsets: list[tuple[int, int]], in_context: list[bool], start: int, end: int
                   ) -> tuple[int, int] | None:
    """The first and last context token covering characters [start, end), None if it was cut off."""
    tokens = [i for i, (a, b) in enumerate(offsets) if in_context[i] and a < end and b > start]
    if not tokens or offsets[tokens[-1]][1] < end:
        return None
    return tokens[0], tokens[-1]


def collate(features: Features, indices: list[int], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """The examples at `indices` as right-padded tensors: input_ids, attention_mask, token_type_ids
    (B, T) — (B, K, T) for multiple choice — and targets (B,), (B, T) or (B, 2)."""
    rows = [features.ids[i] for i in indices]
    types = [features.types[i] for i in indices]
    nested = isinstance(rows[0][0], list)  # multiple choice: a list of choices per example
    T = max(len(r) for row in rows for r in (row if nested else [row]))

    def pad(seq: list[int], value: int) -> list[int]:
        return seq + [value] * (T - len(seq))

    def padded(batch: list, value: int) -> torch.Tensor:
        return torch.tensor([[pad(r, value) for r in row] if nested else pad(row, value) for row in batch])

    batch = {"input_ids": padded(rows, pad_id),
             "attention_mask": padded([[[1] * len(r) for r in row] if nested else [1] * len(row) for row in rows], 0),
             "token_type_ids": padded(types, 0)}
    targets = [features.targets[i] for i in indices]
    if any(t is None for t in targets):  # predicting, or a QA answer cut off: nothing for a loss
        return batch
    if isinstance(targets[0], list):  # token labels
        batch["targets"] = torch.tensor([pad(t, IGNORE_INDEX) for t in targets])
    else:  # label ids, choice indices, scores (float) or (first, last) answer tokens
        batch["targets"] = torch.tensor(targets, dtype=torch.float32 if isinstance(targets[0], float) else torch.long)
    return batch


def first_subtoken_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """Per token, the label of its word if it is the word's first sub-token, else IGNORE_INDEX.

    word_ids: the word each token comes from (None for [CLS], [SEP], padding), as the tokenizer's
    `Encoding.word_ids` gives it; word_labels: one label per word.
    """
    labels, previous = [], None
    for word in word_ids:
        labels.append(IGNORE_INDEX if word is None or word == previous else word_labels[word])
        previous = word
    return labels
