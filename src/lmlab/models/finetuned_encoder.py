"""A fine-tuned encoder: an encoder with its task's head, its tokenizer and what the task needs to
turn the head's logits into answers (label names, lengths), and the predictions it makes.

`lmlab finetune` (recipes.finetune_encoder) trains one; `models.encoder_task_files` writes and reads
it; `lmlab eval checklist` and `lmlab inspect saliency` read its predictions and gradients.
"""

from dataclasses import dataclass

import torch
from torch import nn

from lmlab.data.encoder_batches import Features, collate, encode_examples
from lmlab.data.encoder_tasks import Example
from lmlab.heads.multiple_choice import MultipleChoice
from lmlab.heads.regression import SequenceRegressor
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.span_extraction import SpanExtractor, best_spans
from lmlab.heads.task_model import EncoderWithHead
from lmlab.heads.token_classification import TokenClassifier
from tokenizers import Tokenizer

TASK_HEADS = {"classify": SequenceClassifier, "pair": SequenceClassifier, "regress": SequenceRegressor,
              "tag": TokenClassifier, "qa": SpanExtractor, "choice": MultipleChoice}  # task -> its head's class


def task_head(task: str, d_model: int, n_labels: int, dropout: float = 0.1) -> nn.Module:
    """A new head for `task` on an encoder of width `d_model`, with `n_labels` outputs where the task
    has labels (classify, pair) or tags (tag)."""
    head = TASK_HEADS[task]
    if head is SpanExtractor:  # no dropout, as in HF's BertForQuestionAnswering
        return head(d_model)
    if head in (SequenceRegressor, MultipleChoice):  # one output
        return head(d_model, dropout)
    return head(d_model, n_labels, dropout)


@dataclass
class FinetunedEncoder:
    """A fine-tuned encoder and its head, ready to predict (`predict`)."""

    model: EncoderWithHead  # model.encoder, model.head
    tokenizer: Tokenizer
    task: str
    labels: list[str]  # label names (classify, pair) or tags (tag); [] otherwise
    max_length: int
    max_answer_length: int

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def predict(self, examples: list[Example], batch_size: int = 64, truncate: bool = True) -> list:
        """One prediction per example: a label name (classify, pair), a score (regress), one tag per word
        (tag), the answer text (qa) or the index of the chosen answer (choice). Targets are not read."""
        features = encode_examples(self.task, self.tokenizer, examples, self.max_length, self.labels, truncate)
        return predict_features(self, examples, features, batch_size)


@torch.no_grad()
def predict_features(tuned: FinetunedEncoder, examples: list[Example], features: Features,
                     batch_size: int = 64) -> list:
    """The predictions for encoded `examples` (see `FinetunedEncoder.predict`), batched by length."""
    model = tuned.model
    training = model.training
    model.eval()
    predictions = [None] * len(examples)
    for indices, _, outputs in batched_outputs(tuned, features, batch_size):
        for row, i in enumerate(indices):
            predictions[i] = _prediction(tuned, examples[i], features, i, outputs, row)
    model.train(training)
    return predictions


def batched_outputs(tuned: FinetunedEncoder, features: Features, batch_size: int = 64):
    """The model's outputs on every encoded example, in batches of similar lengths (little padding):
    yields (example indices, the batch on the model's device, the model's outputs)."""
    order = sorted(range(len(features.ids)), key=lambda i: len(features.ids[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = {k: v.to(tuned.device) for k, v in collate(features, indices).items()}
        yield indices, batch, tuned.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


def _prediction(tuned: FinetunedEncoder, example: Example, features: Features, i: int, outputs, row: int):
    task = tuned.task
    if task in ("classify", "pair"):
        return tuned.labels[int(outputs[row].argmax())]
    if task == "regress":
        return float(outputs[row])
    if task == "choice":
        return int(outputs[row].argmax())
    if task == "tag":
        tags = [tuned.labels[int(outputs[row, t].argmax())] for t in features.word_starts[i]]
        return tags + ["O"] * (len(example.text) - len(tags))  # words cut by truncation: outside any entity
    start, end = outputs
    context = torch.tensor(features.in_context[i] + [False] * (start.size(1) - len(features.in_context[i])),
                           device=start.device)
    first, last = best_spans(start[row:row + 1], end[row:row + 1], context[None], tuned.max_answer_length)[0].tolist()
    offsets = features.offsets[i]
    return example.pair[offsets[first][0]:offsets[last][1]]
