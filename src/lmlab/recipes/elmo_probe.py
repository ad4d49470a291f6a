"""ELMo features for a downstream task: a token tagger on a frozen biLM, through the scalar mix.

The task is generated (`lmlab.data.analogies.tagged_sentences`): tag every word of a sentence with
the sentence's topic (country, gender, number or tense). Content words give their topic away, but
function words ("the", "is", "a", "that", "in") occur in every topic, so a tagger that sees only the
word itself must guess for them, while one that sees its context need not. The same linear
tagger is trained twice on frozen features: once on ELMo's scalar mix of all layers (weights s_j
and gamma learned with the tagger), once on the token layer alone; `probe_topics` reports both.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lmlab.config import LoopConfig, OptimConfig
from lmlab.data.analogies import TOPICS, tagged_sentences
from lmlab.errors import LmlabError
from lmlab.models.elmo.chars import BOS, EOS, word_chars
from lmlab.models.elmo.model import ElmoLM
from lmlab.models.elmo.scalar_mix import ScalarMix
from lmlab.training.loop import run_steps, start_session

TRAIN_SEED, TEST_SEED = 1001, 2002  # sentences unlike the training corpus's (seed 0)
# Adam at a constant learning rate: no warmup, no decay (a linear schedule to 100%), no weight
# decay, gradients never clipped.
PROBE_OPTIM = OptimConfig(lr=0.02, warmup_steps=0, schedule="linear", min_lr_ratio=1.0, weight_decay=0.0,
                          beta1=0.9, beta2=0.999, grad_clip=1e9)


@dataclass(frozen=True)
class ProbeResult:
    mix_accuracy: float  # tagger on the scalar mix of all layers
    token_accuracy: float  # the same tagger on the token layer only
    mix_weights: list[float]  # the learned softmax-normalised s_j, token layer first
    gamma: float
    train_tokens: int
    test_tokens: int


@torch.no_grad()
def sentence_features(model: ElmoLM, sentences: list[list[str]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The frozen layers of a padded batch of sentences, each (N, T, 2 * d_model) with <s> and </s>
    dropped, and the mask (N, T) of real words."""
    max_chars = model.cfg.max_chars
    lengths = torch.tensor([len(words) + 2 for words in sentences])
    T = int(lengths.max())
    chars = torch.tensor([[word_chars(w, max_chars) for w in [BOS, *words, EOS] + [""] * (T - len(words) - 2)]
                          for words in sentences])  # (N, T, C)
    layers = [h[:, 1:-1] for h in model.eval().layers(chars, lengths)]
    mask = torch.arange(T - 2)[None, :] < (lengths - 2)[:, None]  # (N, T-2)
    return layers, mask


def topic_data(model: ElmoLM, n: int, seed: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """`n` generated sentences as (the model's frozen layers, the word mask (N, T), each word's topic
    tag (N, T))."""
    pairs = tagged_sentences(n, seed)
    layers, mask = sentence_features(model, [text.split() for text, _ in pairs])
    tags = torch.tensor([TOPICS.index(topic) for _, topic in pairs])[:, None].expand_as(mask)  # (N, T)
    return layers, mask, tags


def train_tagger(features, train, test, steps: int, lr: float, seed: int) -> float:
    """Fit `features` (a module mapping a list of layers to (N, T, D)) and a linear layer to the
    train tags, full batch, in memory through the training loop (Adam: AdamW without weight decay, at
    a constant learning rate, unclipped); return the accuracy on the test words."""
    torch.manual_seed(seed)
    (train_layers, train_mask, train_tags), (test_layers, test_mask, test_tags) = train, test
    tagger = Tagger(features, train_layers[0].shape[-1])
    session = start_session(None, tagger, PROBE_OPTIM.replace(lr=lr),
                            LoopConfig(max_steps=steps, batch_size=len(train_tags)), {"recipe": "probe"})
    if session.parts > 1:
        raise LmlabError("the probe fits its tagger on the whole batch in one process; run it without torchrun")

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        logits = tagger(train_layers)[train_mask]  # (n_words, n_tags)
        return F.cross_entropy(logits, train_tags[train_mask]), {}

    if not run_steps(session, step_loss, show_progress=False):
        raise KeyboardInterrupt  # Ctrl-C: a half-fitted tagger's accuracy would mean nothing
    with torch.no_grad():
        predicted = tagger(test_layers).argmax(-1)  # (N, T)
    return (predicted[test_mask] == test_tags[test_mask]).float().mean().item()


class Tagger(nn.Module):
    """Features of the frozen layers, then a linear layer to the topic tags."""

    def __init__(self, features: nn.Module, width: int):
        super().__init__()
        self.features = features
        self.classify = nn.Linear(width, len(TOPICS))

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        return self.classify(self.features(layers))  # (N, T, n_tags)


class TokenLayer(nn.Module):
    """The token layer alone: the baseline that sees no context."""

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        return layers[0]


def probe_topics(model: ElmoLM, n_train: int = 400, n_test: int = 400, steps: int = 300, lr: float = 0.02,
                 seed: int = 0) -> ProbeResult:
    """Train the topic tagger on the scalar mix and on the token layer; report both test accuracies."""
    train = topic_data(model, n_train, TRAIN_SEED + seed)
    test = topic_data(model, n_test, TEST_SEED + seed)
    mix = ScalarMix(len(train[0]))
    mix_accuracy = train_tagger(mix, train, test, steps, lr, seed)
    token_accuracy = train_tagger(TokenLayer(), train, test, steps, lr, seed)
    return ProbeResult(mix_accuracy=mix_accuracy, token_accuracy=token_accuracy,
                       mix_weights=torch.softmax(mix.weights, 0).tolist(), gamma=mix.gamma.item(),
                       train_tokens=int(train[1].sum()), test_tokens=int(test[1].sum()))
