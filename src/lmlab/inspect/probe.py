"""Probing classifiers with control tasks: what each layer's hidden states make linearly readable.

A probe is multinomial logistic regression on one layer's frozen states (standardised with the
training set's mean and spread, weight decay, full-batch L-BFGS from zero weights, so a fit is
deterministic). A high accuracy alone does not show the model *encodes* a property: a probe with
enough capacity can memorise words. Hewitt & Liang (2019) therefore train the same probe on a
control task: every word type gets a random label, drawn once from the task's label distribution
and fixed for the type. Only memorising word identities solves it, so selectivity = accuracy -
control accuracy is what the property adds beyond word identity. For a sentence-level task every
text is its own type, so the control labels are random per sentence.

A word is read at its last subword (the first token that has seen all of it in a decoder); a word
whose last token also covers another word (BPE merging "()" into one token) has no state of its own
and is skipped. A sentence is the mean of its token states (special tokens left out). Train and test
sets are split by text, so no sentence is in both.
"""

import random
from collections import Counter
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from lmlab.data.probing import SENTENCE, ProbingTask
from lmlab.errors import LmlabError
from lmlab.inspect.layers import recording
from lmlab.inspect.subject import Subject
from lmlab.progress import progress_bar

TEST_FRACTION = 0.2
WEIGHT_DECAY = 1e-2  # on the squared weights, added to the mean cross-entropy
MAX_ITERATIONS = 100  # L-BFGS steps per probe


@dataclass(frozen=True)
class Features:
    states: torch.Tensor  # (n_layers + 1, N, C): each labelled unit's state at every layer
    labels: list[str]  # (N,)
    types: list[str]  # (N,) the unit's text
    texts: list[str]  # (N,) the text it comes from: the split's unit
    skipped: int  # units with no token of their own


@dataclass(frozen=True)
class LayerScore:
    layer: int  # 0 = the first block's input
    accuracy: float  # on the test units
    control_accuracy: float  # the same probe trained and tested on the control labels
    selectivity: float  # accuracy - control_accuracy
    majority: float  # always answering the training set's most frequent label


@dataclass(frozen=True)
class ProbeReport:
    task: str
    level: str
    label_counts: dict[str, int]
    train_units: int
    test_units: int
    skipped: int
    layers: list[LayerScore]

    def as_dict(self) -> dict:
        return asdict(self)


def probe(subject: Subject, task: ProbingTask, seed: int = 0, show_progress: bool = False) -> ProbeReport:
    """Hidden states of every example of `task`, then a probe and a control probe per layer."""
    labels = {label for example in task.examples for label in example.labels}
    if len(labels) < 2:
        raise LmlabError(f"task {task.name} has a single label ({labels.pop()!r}); a probe needs at least two")
    if len({example.text for example in task.examples}) < 2:
        raise LmlabError(f"task {task.name} has a single distinct text; probing needs one to train on and one to "
                         "test on, so add examples")
    features = extract(subject, task, show_progress)
    train, test = split_by_text(features.texts, seed)
    controls = control_labels(features.types, features.labels, seed)
    majority = majority_accuracy(features.labels, train, test)  # the same at every layer
    layers = []
    for layer, states in enumerate(_progress(features.states, "probes", "layer", show_progress)):
        accuracy = probe_accuracy(states, features.labels, train, test)
        control = probe_accuracy(states, controls, train, test)
        layers.append(LayerScore(layer, accuracy, control, accuracy - control, majority))
    return ProbeReport(task.name, task.level, dict(Counter(features.labels).most_common()), len(train), len(test),
                       features.skipped, layers)


@torch.no_grad()
def extract(subject: Subject, task: ProbingTask, show_progress: bool = False) -> Features:
    """Every labelled unit's state at every layer: a word's last subword, or a text's mean token."""
    per_example, labels, types, texts, skipped = [], [], [], [], 0
    for example in _progress(task.examples, "hidden states", "text", show_progress):
        ids, offsets = _encode(subject, example.text)
        if ids.size(1) == 0:  # nothing the tokenizer keeps
            skipped += len(example.spans)
            continue
        states = torch.stack(_layer_states(subject, ids))  # (L + 1, T, C)
        positions = [_covering(offsets, start, end) for start, end in example.spans]
        rows = []
        for i, (label, kind) in enumerate(zip(example.labels, example.types())):
            row = _unit_state(states, positions, i, task.level)
            if row is None:
                skipped += 1
                continue
            rows.append(row)
            labels.append(label)
            types.append(kind)
            texts.append(example.text)
        if rows:
            per_example.append(torch.stack(rows, 1).float().cpu())  # (L + 1, n_units, C)
    if not per_example:
        raise LmlabError(f"no unit of task {task.name} maps to a token of its own in this model's tokenization")
    return Features(torch.cat(per_example, 1), labels, types, texts, skipped)


def _progress(items, desc: str, unit: str, show: bool):
    """`items` one by one, with a progress bar and ETA on stderr when `show`."""
    with progress_bar(len(items), desc=desc, unit=unit, disable=not show) as bar:
        for item in items:
            yield item
            bar.update()


def _unit_state(states: torch.Tensor, positions: list[list[int]], i: int, level: str) -> torch.Tensor | None:
    """Unit i's states (L + 1, C): the mean of its tokens (sentence level) or its last token, unless
    that token also covers another unit; None when it has no token of its own."""
    tokens = positions[i]
    if not tokens:
        return None
    if level == SENTENCE:
        return states[:, tokens].mean(1)
    if any(tokens[-1] in other for j, other in enumerate(positions) if j != i):
        return None
    return states[:, tokens[-1]]


def _encode(subject: Subject, text: str) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Model input ids (1, T) of `text` as `subject.tokens` gives them, and each token's character span."""
    if subject.kind == "decoder":
        encoding = subject.tokenizer.backend.encode(text, add_special_tokens=False)
        limit = subject.model.config.context_length  # longer texts are cut; their late words go unread
        ids, offsets = encoding.ids[:limit], encoding.offsets[:limit]
    else:
        if subject.tokenizer is None:
            raise LmlabError("this model directory has no tokenizer.json; probing needs the model's tokenizer")
        encoding = subject.tokenizer.encode(text)  # truncated to the model's positions by the loader
        ids, offsets = encoding.ids, encoding.offsets
    device = next(subject.model.parameters()).device
    return torch.tensor([ids], device=device), offsets


def _layer_states(subject: Subject, ids: torch.Tensor) -> list[torch.Tensor]:
    """The n_layers + 1 residual states (T, C) of one text; an encoder-decoder's encoder stack."""
    stack = "encoder" if subject.kind == "encoder-decoder" else None
    with recording(subject.model, stack) as states:
        if subject.kind == "decoder":
            subject.model.hidden_states(ids)
        elif subject.kind == "encoder":
            subject.model(ids)
        else:
            subject.model.encoder(ids)
    return list(states)


def _covering(offsets: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Positions of the tokens whose characters overlap [start, end) (special tokens have none)."""
    return [i for i, (a, b) in enumerate(offsets) if a < b and a < end and b > start]


def split_by_text(texts: list[str], seed: int, test_fraction: float = TEST_FRACTION
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (train, test) of the units, the distinct texts shuffled with `seed` and the last
    `test_fraction` of them (at least one) held out, so a text's units are all on one side."""
    distinct = list(dict.fromkeys(texts))
    if len(distinct) < 2:
        raise LmlabError("the words this model can read come from a single text; probing needs one text to train "
                         "on and one to test on, so add examples")
    random.Random(seed).shuffle(distinct)
    held_out = set(distinct[len(distinct) - max(1, round(test_fraction * len(distinct))):])
    test = torch.tensor([i for i, text in enumerate(texts) if text in held_out])
    train = torch.tensor([i for i, text in enumerate(texts) if text not in held_out])
    return train, test


def control_labels(types: list[str], labels: list[str], seed: int) -> list[str]:
    """Hewitt & Liang's control task: each distinct type gets one label drawn from the empirical
    distribution of `labels` (types in order of first appearance, drawn with `seed`); every unit
    takes its type's label."""
    counts = Counter(labels)
    rng = random.Random(seed)
    names, weights = list(counts), list(counts.values())
    by_type = {}
    for kind in types:
        if kind not in by_type:
            by_type[kind] = rng.choices(names, weights)[0]
    return [by_type[kind] for kind in types]


def probe_accuracy(states: torch.Tensor, labels: list[str], train: torch.Tensor, test: torch.Tensor) -> float:
    """Test accuracy of a logistic-regression probe fitted to `states` (N, C) rows `train`."""
    classes = {label: i for i, label in enumerate(sorted(set(labels)))}
    targets = torch.tensor([classes[label] for label in labels])  # (N,)
    x_train, x_test = _standardised(states[train], states[test])
    weight = fit_probe(x_train, targets[train], len(classes))
    predicted = (x_test @ weight[:-1] + weight[-1]).argmax(-1)  # (N_test,)
    return (predicted == targets[test]).float().mean().item()


def _standardised(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both sets scaled by the training set's per-feature mean and standard deviation."""
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def fit_probe(x: torch.Tensor, y: torch.Tensor, n_classes: int, weight_decay: float = WEIGHT_DECAY,
              max_iterations: int = MAX_ITERATIONS) -> torch.Tensor:
    """Multinomial logistic regression: the (C + 1, n_classes) weights, bias last, minimising mean
    cross-entropy + weight_decay * |W|^2 with L-BFGS from zeros (a convex problem: no seed needed)."""
    weight = torch.zeros(x.size(1) + 1, n_classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight], lr=1.0, max_iter=max_iterations, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        logits = x @ weight[:-1] + weight[-1]  # (N, n_classes)
        value = F.cross_entropy(logits, y) + weight_decay * weight[:-1].pow(2).sum()
        value.backward()
        return value

    with torch.enable_grad():
        optimizer.step(loss)
    return weight.detach()


def majority_accuracy(labels: list[str], train: torch.Tensor, test: torch.Tensor) -> float:
    """Test accuracy of always answering the most frequent training label."""
    most = Counter(labels[i] for i in train.tolist()).most_common(1)[0][0]
    return sum(labels[i] == most for i in test.tolist()) / len(test)
