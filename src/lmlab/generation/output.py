"""`Generation`: what one prompt's decoding produced, and why it ended."""

from dataclasses import dataclass


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
