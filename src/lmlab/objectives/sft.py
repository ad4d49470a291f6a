"""Supervised fine-tuning on chats: causal LM, with the loss only on the assistant's replies.

A chat is rendered with the tokenizer's chat template and tokenized as one sequence; the model
reads all of it but is trained to produce only the assistant's tokens (its content and the
end-of-turn token that follows, so it learns to stop). Everything else (system prompt, user turns,
role headers, and an assistant turn marked `"train": false`: one inside a prompt that a completion
follows, which TRL's completion-only loss does not train either) gets the label IGNORE_INDEX.

Which tokens are the assistant's is found by rendering the chat progressively: the conversation up
to an assistant turn with the generation prompt ("...<|im_start|>assistant\\n") and the conversation
through that turn; their token sequences, compared with the whole chat's, bound the reply. This
works for any template that renders a longer chat as an extension of a shorter one, which is what
makes a template usable for multi-turn generation in the first place. Where a token spans the
boundary (a generation prompt ending in a space that the reply's first word absorbs, " <answer>"),
that token counts as the reply's.
"""

import torch

from lmlab.errors import LmlabError
from lmlab.objectives.objective import Key
from lmlab.targets import IGNORE_INDEX
from lmlab.tokenizers.chat import chat_prompt
from lmlab.tokenizers.text import TextTokenizer

ROLES = ("system", "user", "assistant")


def chat_tokens(tokenizer: TextTokenizer, messages: list[dict], index: int = 0) -> tuple[list[int], list[int]]:
    """Token ids of a chat and its labels (the id on assistant tokens, IGNORE_INDEX elsewhere).

    Both lists have the same length and are not shifted: labels[i] says whether ids[i] is trained
    on. `index` names this chat in error messages (its position in a dataset).
    """
    check_chat(messages, index)
    ids = tokenizer.encode(_render(tokenizer, messages, False, index))
    labels = [IGNORE_INDEX] * len(ids)
    for turn, message in enumerate(messages):
        if not trained(message):
            continue
        before = tokenizer.encode(_render(tokenizer, messages[:turn], True, index))
        through = tokenizer.encode(_render(tokenizer, messages[: turn + 1], False, index))
        start, end = _common_prefix(before, ids), _common_prefix(through, ids)
        if end <= start:
            raise LmlabError(f"example {index}: the chat template does not render message {turn} as a "
                             "continuation of the chat before it, so its tokens cannot be found; "
                             "use a template that extends the chat turn by turn")
        labels[start:end] = ids[start:end]
    return ids, labels


def sft_batch(tokenizer: TextTokenizer, examples: list[list[dict]], block_size: int,
              pack: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Chats -> inputs (B, block_size), targets (B, block_size) for `losses.cross_entropy`.

    Each chat keeps at most block_size + 1 tokens (the rest is cut) and rows are shifted by one as
    in `causal_lm`: targets are the labels of the next token, IGNORE_INDEX off the assistant's
    replies and on padding. Rows are right-padded with the pad token (eos if there is none).
    `pack` fills each row with as many whole chats as fit, in order, instead of one chat per row.
    Targets never cross chats (a chat's first token is never a target), but attention does: a
    packed chat can see the chats before it in its row. That costs a little quality and saves
    the compute that padding short chats would waste.
    """
    if block_size < 1:
        raise LmlabError(f"block size {block_size} must be at least 1")
    if not examples:
        raise LmlabError("no chats to batch; pass at least one example")
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else tokenizer.eos_id
    if pad_id is None:
        raise LmlabError("the tokenizer has neither a pad nor an eos token to pad rows with; set pad_id")
    rows: list[tuple[list[int], list[int]]] = []
    for index, messages in enumerate(examples):
        ids, labels = chat_tokens(tokenizer, messages, index)
        ids, labels = ids[: block_size + 1], [IGNORE_INDEX, *labels[1 : block_size + 1]]
        if pack and rows and len(rows[-1][0]) + len(ids) <= block_size + 1:
            rows[-1][0].extend(ids)
            rows[-1][1].extend(labels)
        else:
            rows.append((ids, labels))
    padding = [block_size + 1 - len(ids) for ids, _ in rows]
    tokens = torch.tensor([ids + [pad_id] * n for (ids, _), n in zip(rows, padding)])  # (B, block_size + 1)
    labels = torch.tensor([lab + [IGNORE_INDEX] * n for (_, lab), n in zip(rows, padding)])  # (B, block_size + 1)
    return tokens[:, :-1], labels[:, 1:]


def sft_objective(tokenizer: TextTokenizer, block_size: int):
    """SFT on one chat, bound to a chat tokenizer and a block size: objective(messages, key) ->
    (inputs, targets), the row `sft_batch` gives that chat, unpadded (at most block_size tokens;
    targets IGNORE_INDEX off the assistant's replies). The example is a chat, not tokens; nothing
    is drawn, so the key is not read."""
    if block_size < 1:
        raise LmlabError(f"block size {block_size} must be at least 1")

    def objective(messages: list[dict], key: Key) -> tuple[list[int], list[int]]:
        ids, labels = chat_tokens(tokenizer, messages)
        ids, labels = ids[: block_size + 1], labels[: block_size + 1]
        return ids[:-1], labels[1:]
    return objective


def response_batch(queries: list[list[int]], responses: list[list[int]],
                   tokenizer: TextTokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt + reply rows, right-padded, as (inputs, targets, mask), each (B, T): targets are the
    next tokens, IGNORE_INDEX off the reply; mask is 1 where the target is a reply token."""
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else tokenizer.eos_id or 0
    rows = [q + r for q, r in zip(queries, responses)]
    T = max(len(row) for row in rows)
    ids = torch.tensor([row + [pad] * (T - len(row)) for row in rows])  # (B, T)
    labels = torch.full_like(ids, IGNORE_INDEX)
    for b, (q, r) in enumerate(zip(queries, responses)):
        labels[b, len(q):len(q) + len(r)] = torch.tensor(r, dtype=torch.long)
    targets = labels[:, 1:]
    return ids[:, :-1], targets, (targets != IGNORE_INDEX).long()


def check_chat(messages: list[dict], index: int = 0) -> None:
    """Raise LmlabError, naming example `index`, unless `messages` is a chat SFT can learn from:
    a list of {"role", "content"} strings with known roles and at least one assistant reply.
    """
    if not isinstance(messages, list) or not messages:
        raise LmlabError(f"example {index}: messages must be a non-empty list of {{'role', 'content'}} dicts")
    for turn, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise LmlabError(f"example {index}: message {turn} needs 'role' and 'content' strings")
        if not isinstance(message.get("train", True), bool):
            raise LmlabError(f"example {index}: message {turn} has 'train' {message['train']!r}; use true or false")
        if message["role"] not in ROLES:
            raise LmlabError(f"example {index}: message {turn} has role {message['role']!r}; "
                             f"use one of {', '.join(ROLES)}")
    if not any(trained(message) for message in messages):
        raise LmlabError(f"example {index} has no assistant message to train on; SFT learns the assistant's "
                         "replies, add one")


def trained(message: dict) -> bool:
    """Whether SFT trains on `message`: an assistant turn not marked `"train": false`."""
    return message["role"] == "assistant" and message.get("train", True) is not False


def _render(tokenizer: TextTokenizer, messages: list[dict], add_generation_prompt: bool, index: int) -> str:
    try:
        return chat_prompt(tokenizer, messages, add_generation_prompt)
    except LmlabError as e:
        raise LmlabError(f"example {index}: {e}") from None


def _common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
