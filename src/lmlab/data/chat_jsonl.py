"""Read chats and preferences from JSON-lines files, one example per line.

Chats, for SFT:        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", ...}]}
Preferences, for reward models and DPO, either a pair or a ranking of K answers (best first):
                       {"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "8"}
                       {"prompt": [{"role": "user", "content": "..."}], "ranked": ["best", "next", "worst"]}
A prompt is a string (one user message) or a list of messages. Blank lines are skipped; a bad line
(not JSON, not UTF-8, longer than the line limit of `io.lines`) is reported with its number.
"""

from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.lines import check_fits_in_memory, file_size, json_objects


def read_chat_jsonl(path: str | Path) -> list[list[dict]]:
    """The `messages` list of every line of `path`."""
    chats = []
    for line, row in _rows(path):
        if "messages" not in row:
            raise LmlabError(f"{path}:{line} has no 'messages' field; each line needs "
                             "{\"messages\": [{\"role\": …, \"content\": …}, …]}")
        chats.append(_messages(row["messages"], path, line))
    return chats


def read_preference_jsonl(path: str | Path) -> list[tuple[list[dict], list[str]]]:
    """(prompt messages, answers best first) for every line of `path`; a chosen/rejected pair is a
    ranking of two, so pairs and rankings feed the same code (`losses.bradley_terry.ranked_pairs`).
    """
    rows = []
    for line, row in _rows(path):
        if "prompt" not in row or not ({"chosen", "rejected"} <= row.keys() or "ranked" in row):
            raise LmlabError(f"{path}:{line} needs 'prompt' with 'chosen' and 'rejected', or 'prompt' "
                             "with 'ranked' (answers best first)")
        prompt = row["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else _messages(prompt, path, line)
        answers = row["ranked"] if "ranked" in row else [row["chosen"], row["rejected"]]
        if not isinstance(answers, list) or len(answers) < 2 or not all(isinstance(a, str) for a in answers):
            raise LmlabError(f"{path}:{line}: the answers must be at least two strings")
        if len(set(answers)) < len(answers):
            raise LmlabError(f"{path}:{line}: answer {_first_repeat(answers)!r} appears twice; chosen and "
                             "rejected (or the ranked answers) must differ")
        rows.append((prompt, answers))
    return rows


def _rows(path: str | Path):
    """(line number, JSON object) for every non-blank line of `path`."""
    path = Path(path)
    if not path.is_file():
        raise LmlabError(f"'{path}' does not exist; pass a .jsonl file")
    check_fits_in_memory(path, file_size(path))
    yield from json_objects(path, "write one JSON object per line")


def _messages(messages, path: str | Path, line: int) -> list[dict]:
    """`messages` checked to be a non-empty list of {"role": str, "content": str}."""
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages)):
        raise LmlabError(f"{path}:{line}: messages must be a non-empty list of "
                         "{\"role\": string, \"content\": string} objects")
    return messages


def _first_repeat(answers: list[str]) -> str:
    return next(a for i, a in enumerate(answers) if a in answers[:i])
