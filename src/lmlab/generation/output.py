"""`Generation`: what one prompt's decoding produced, and why it ended; `OutputRow`, the output as it grows."""

from dataclasses import dataclass

from lmlab.generation.detokenize import IncrementalDetokenizer


@dataclass(frozen=True)
class Generation:
    """The new tokens after one prompt.

    token_ids never include the stop token; after a stop string they do include the tokens that
    spell it, while `text` (set when a tokenizer was given) is cut just before it.
    finish_reason is "stop" (a stop token or stop string) or "length" (max_new_tokens reached);
    `stop` names what stopped it (the token id or the string). Beam search also sets `score`,
    sum(logprob) / length**length_penalty, the length counting the stop token as HF does.
    """

    token_ids: list[int]
    finish_reason: str
    stop: int | str | None = None
    text: str | None = None
    score: float | None = None

    @property
    def sampled_ids(self) -> list[int]:
        """The tokens the model produced, the stop token included: what RL scores and trains on."""
        return self.token_ids + ([self.stop] if isinstance(self.stop, int) else [])


class OutputRow:
    """One prompt's output as it grows: its tokens, its text (with a tokenizer), and whether (and why)
    it stopped. Every step-by-step decoder feeds its tokens through one: `generate_batch`, `stream_text`
    and the serving engine (`lmlab.inference.engine`)."""

    def __init__(self, stop_ids: tuple[int, ...], tokenizer, stop_strings: tuple[str, ...]):
        self.stop_ids = stop_ids
        self.detokenizer = IncrementalDetokenizer(tokenizer, stop_strings) if tokenizer is not None else None
        self.token_ids: list[int] = []
        self.finish_reason: str | None = None
        self.stop: int | str | None = None

    def add(self, token: int) -> str:
        """Append `token` unless the row has stopped; return the text now safe to show."""
        if self.finish_reason:
            return ""
        if token in self.stop_ids:
            self.finish_reason, self.stop = "stop", token
            return ""
        self.token_ids.append(token)
        if self.detokenizer is None:
            return ""
        piece = self.detokenizer.add(token)
        if self.detokenizer.stopped:
            self.finish_reason, self.stop = "stop", self.detokenizer.stopped_by
        return piece

    def finish(self) -> str:
        """The text held back until the end (none without a tokenizer)."""
        return self.detokenizer.finish() if self.detokenizer is not None else ""

    def result(self) -> Generation:
        text = None
        if self.detokenizer is not None:
            self.finish()
            text = self.detokenizer.text
        return Generation(self.token_ids, self.finish_reason or "length", self.stop, text)
