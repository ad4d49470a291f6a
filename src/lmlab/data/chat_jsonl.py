"""Read chats and preferences from JSON-lines files, one example per line, in TRL's dataset formats.

Chats, for SFT (PPO reads the same lines as prompts):
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    {"prompt": "Hi", "completion": "Hello"}                           (standard: one user turn, one reply)
    {"prompt": [{"role": "system", …}, {"role": "user", …}], "completion": [{"role": "assistant", …}]}
    {"prompt": "Hi"} or {"prompt": [messages]}                         (prompt-only: PPO's prompts)
Preferences, for reward models and DPO, a pair or a ranking of K answers (best first):
    {"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "8"}
    {"prompt": [messages], "chosen": [{"role": "assistant", …}], "rejected": [{"role": "assistant", …}]}
    {"chosen": [messages, reply], "rejected": [messages, other reply]}    (implicit prompt: the shared start)
    {"prompt": [messages], "ranked": ["best", "next", "worst"]}          (lmlab's own)
Unpaired preferences, for KTO: one answer, labelled desirable (true) or not (false):
    {"prompt": "What is 3 + 4?", "completion": "7", "label": true}
    {"prompt": [messages], "completion": [{"role": "assistant", …}], "label": false}
A prompt is a string (one user message) or a list of messages; an answer a string or one assistant message.
What is trained is the completion, or the answers: a prompt's assistant turns are marked "train": false.
An implicit prompt is found as TRL's `maybe_extract_prompt` finds it. Blank lines are skipped; a bad line
(not JSON, not UTF-8, longer than the line limit of `io.lines`, not one of these forms) is reported with
its number.
"""

from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import check_fits_in_memory, file_size, json_objects

CHAT_FORMS = ('{"messages": [{"role": …, "content": …}, …]} or {"prompt": …, "completion": …} '
              "(TRL's language-modeling and prompt-completion formats)")
PREFERENCE_FORMS = ("'prompt' with 'chosen' and 'rejected', 'chosen' and 'rejected' whole conversations "
                    "(the prompt implicit), or 'prompt' with 'ranked' (answers best first)")
UNPAIRED_FORM = ('{"prompt": …, "completion": …, "label": true or false} '
                 "(TRL's unpaired preference format)")


def read_chat_jsonl(path: str | Path) -> list[list[dict]]:
    """The chat of every line of `path`: its `messages`, or its prompt followed by its completion."""
    return [chat_of(row, path, line) for line, row in _rows(path)]


def chat_of(row: dict, path: str | Path, line: int) -> list[dict]:
    """One line's chat; a prompt-only line is its prompt (the policy of PPO writes the reply)."""
    if "messages" in row:
        return _messages(row["messages"], path, line)
    if "prompt" not in row:
        raise LmlabError(f"{path}:{line} has no 'messages' or 'prompt' field; each line needs {CHAT_FORMS}")
    prompt = _prompt(row["prompt"], path, line)
    if "completion" not in row:
        return prompt
    completion = row["completion"]
    if isinstance(completion, str) != isinstance(row["prompt"], str):
        raise LmlabError(f"{path}:{line}: 'prompt' and 'completion' must both be strings (standard) or both "
                         "lists of messages (conversational)")
    if isinstance(completion, str):
        return [*prompt, {"role": "assistant", "content": completion}]
    completion = _messages(completion, path, line, "completion")
    if any(m["role"] != "assistant" for m in completion):
        raise LmlabError(f"{path}:{line}: 'completion' must hold assistant messages only: lmlab trains on the "
                         "assistant's replies")
    return [*context(prompt), *completion]


def read_preference_jsonl(path: str | Path) -> list[tuple[list[dict], list[str]]]:
    """(prompt messages, answers best first) for every line of `path`; a chosen/rejected pair is a
    ranking of two, so pairs and rankings feed the same code (`losses.bradley_terry.ranked_pairs`).
    """
    rows = []
    for line, row in _rows(path):
        prompt, answers = preference_of(row, path, line)
        if len(set(answers)) < len(answers):
            raise LmlabError(f"{path}:{line}: answer {_first_repeat(answers)!r} appears twice; chosen and "
                             "rejected (or the ranked answers) must differ")
        rows.append((prompt, answers))
    return rows


def preference_of(row: dict, path: str | Path, line: int) -> tuple[list[dict], list[str]]:
    """One line's (prompt messages, answers best first). Without a prompt, or with a string prompt beside
    answers that are whole conversations, the prompt is what chosen and rejected share (TRL's rule; a list of
    messages beside string answers is lmlab's own form, an explicit prompt)."""
    if "ranked" in row and "prompt" in row:
        answers = row["ranked"]
        if not isinstance(answers, list) or len(answers) < 2:
            raise LmlabError(f"{path}:{line}: the answers must be at least two strings in 'ranked'")
        return context(_prompt(row["prompt"], path, line)), [_answer(a, "ranked", path, line) for a in answers]
    if not {"chosen", "rejected"} <= row.keys():
        raise LmlabError(f"{path}:{line} needs {PREFERENCE_FORMS}")
    prompt, chosen, rejected = row.get("prompt"), row["chosen"], row["rejected"]
    if prompt is None or (isinstance(prompt, str) and conversational(chosen)):
        prompt, chosen, rejected = implicit_prompt(chosen, rejected, path, line)
    return context(_prompt(prompt, path, line)), [_answer(chosen, "chosen", path, line),
                                                  _answer(rejected, "rejected", path, line)]


def read_unpaired_jsonl(path: str | Path) -> list[tuple[list[dict], str, bool]]:
    """(prompt messages, answer, desirable) for every line of `path`: an answer labelled good (true) or
    bad (false) on its own, with no other answer to compare it with."""
    rows = []
    for line, row in _rows(path):
        missing = [field for field in ("prompt", "completion", "label") if field not in row]
        if missing:
            raise LmlabError(f"{path}:{line} has no {' or '.join(repr(f) for f in missing)}; each line needs "
                             f"{UNPAIRED_FORM}")
        if not isinstance(row["label"], bool):
            raise LmlabError(f"{path}:{line}: 'label' is {row['label']!r}; it must be true (a desirable answer) "
                             "or false (an undesirable one)")
        prompt = context(_prompt(row["prompt"], path, line))
        rows.append((prompt, _answer(row["completion"], "completion", path, line), row["label"]))
    return rows


def implicit_prompt(chosen, rejected, path: str | Path, line: int) -> tuple:
    """(prompt, chosen, rejected) from two whole conversations (or texts): the prompt is their longest
    shared start, as TRL's `extract_prompt` cuts it (a text's space before the split stays with the answers)."""
    if conversational(chosen) != conversational(rejected) or not all(
            isinstance(v, (str, list)) for v in (chosen, rejected)):
        raise LmlabError(f"{path}:{line}: 'chosen' and 'rejected' must both be strings or both lists of messages")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == min(len(chosen), len(rejected)):
        raise LmlabError(f"{path}:{line}: 'chosen' and 'rejected' are the same up to the end of one of them; "
                         "their replies must differ")
    if isinstance(chosen, str) and shared and chosen[shared - 1] == " ":
        shared -= 1
    if not shared:
        raise LmlabError(f"{path}:{line}: 'chosen' and 'rejected' share no prompt; give it as 'prompt'")
    return chosen[:shared], chosen[shared:], rejected[shared:]


def context(prompt: list[dict]) -> list[dict]:
    """A prompt that replies follow, its assistant turns marked `"train": false`: read, not trained (what TRL
    trains of a prompt-completion or preference row is the completion, or the answers, alone)."""
    return [m | {"train": False} if m["role"] == "assistant" else m for m in prompt]


def conversational(value) -> bool:
    """Whether `value` is a list of messages (TRL's `is_conversational` on one field)."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]


def _prompt(prompt, path: str | Path, line: int) -> list[dict]:
    """A prompt as messages: a string is one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return _messages(prompt, path, line, "prompt")


def _answer(answer, field: str, path: str | Path, line: int) -> str:
    """An answer's text: a string, or a list of one assistant message."""
    if isinstance(answer, str):
        return answer
    if conversational(answer):
        messages = _messages(answer, path, line, field)
        if len(messages) == 1 and messages[0]["role"] == "assistant":
            return messages[0]["content"]
    raise LmlabError(f"{path}:{line}: each answer in '{field}' must be a string or one assistant message after "
                     "the prompt; lmlab's preferences compare one reply")


def _rows(path: str | Path):
    """(line number, JSON object) for every non-blank line of `path`."""
    path = Path(path)
    if not path.is_file():
        raise LmlabError(f"'{path}' does not exist; pass a .jsonl file")
    check_fits_in_memory(path, file_size(path))
    yield from json_objects(path, "write one JSON object per line")


def _messages(messages, path: str | Path, line: int, field: str = "messages") -> list[dict]:
    """`messages` checked to be a non-empty list of {"role": str, "content": str}."""
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages)):
        raise LmlabError(f"{path}:{line}: {field} must be a non-empty list of "
                         "{\"role\": string, \"content\": string} objects")
    return messages


def _first_repeat(answers: list[str]) -> str:
    return next(a for i, a in enumerate(answers) if a in answers[:i])
