"""The shared preference pieces: one batch of chosen and rejected answers whose log-probs are each
answer's own, and the frozen reference, which lives in training/preference.py alone (no recipe
switches adapters off or copies a model for it again)."""

import ast
from pathlib import Path

import pytest
import torch

from chat_models import TINY_RUN, tiny_chat_model
from lmlab.losses.dpo import sequence_logprobs
from lmlab.objectives.sft import sft_batch
from lmlab.training.post_training import load_tunable, with_reply
from lmlab.training.preference import frozen_reference, pair_chats, pair_logprobs, reference_is_adapters_off

pytestmark = pytest.mark.usefixtures("one_thread")

SRC = Path(__file__).resolve().parents[2] / "src" / "lmlab"
PROMPT = [{"role": "user", "content": "What is 1 + 1?"}]
# the reference's pieces, and the only files that may use them
REFERENCE_NAMES = {"adapters_disabled", "sequence_logprobs", "deepcopy"}
REFERENCE_HOMES = {"training/preference.py", "losses/dpo.py"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("base") / "tiny")


def test_a_pair_batch_holds_the_chosen_answers_then_the_rejected_ones():
    pairs = [(PROMPT, "2", "3"), (PROMPT, "4", "5")]
    assert [chat[-1]["content"] for chat in pair_chats(pairs)] == ["2", "4", "3", "5"]


def test_pair_log_probs_are_each_answers_own_whatever_else_is_in_the_batch(base):
    tuned = load_tunable(base, TINY_RUN.replace(peft="none"), device="cpu")
    pairs = [(PROMPT, "2", "three"), ([{"role": "user", "content": "What is 12 + 30?"}], "<answer>42</answer>", "4")]
    with torch.no_grad():
        batch = pair_logprobs(tuned.model, tuned.tokenizer, pairs, TINY_RUN.block_size, tuned.device)  # (2, 2)
        alone = [sequence_logprobs(tuned.model(inputs), targets).item() for inputs, targets in
                 (sft_batch(tuned.tokenizer, [with_reply(prompt, answer)], TINY_RUN.block_size)
                  for prompt, chosen, rejected in pairs for answer in (chosen, rejected))]
    assert batch.shape == (2, 2) and (batch < 0).all()
    torch.testing.assert_close(batch.flatten(), torch.tensor(alone), rtol=1e-5, atol=1e-5)


def test_the_reference_is_the_adapters_off_network_or_a_frozen_copy(base):
    fresh = load_tunable(base, TINY_RUN, device="cpu")
    full = load_tunable(base, TINY_RUN.replace(peft="none"), device="cpu")
    assert reference_is_adapters_off(fresh, None) and not reference_is_adapters_off(fresh, "runs/sft/adapter")
    assert not reference_is_adapters_off(full, None)
    ids = torch.tensor([[5, 6, 7, 8]])
    for tuned in (fresh, full):
        reference = frozen_reference(tuned, None)
        with torch.no_grad():
            before = reference(ids)
            for parameter in tuned.model.parameters():  # training moves what trains
                if parameter.requires_grad:
                    parameter.add_(0.5)
            assert not torch.allclose(tuned.model(ids), before)
            torch.testing.assert_close(reference(ids), before)


def test_only_training_preference_makes_a_reference_or_sums_answer_log_probs():
    """A recipe that switches adapters off, copies its model or sums an answer's log-probs itself
    re-implements the shared reference: it takes `training.preference`'s instead."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where in REFERENCE_HOMES or not where.startswith(("recipes/", "training/")):
            continue  # the training methods; a server's shell sharing the model's tensors is not a reference
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
                node.name if isinstance(node, ast.alias) else None
            if name in REFERENCE_NAMES:
                found.append(f"{where}:{node.lineno} {name}")
    assert not found, "use lmlab.training.preference (pair_logprobs, pair_reference, frozen_reference):\n" + \
        "\n".join(found)
