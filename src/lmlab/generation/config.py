"""`GenerationConfig`: every decoding choice in one frozen dataclass, under the names HF users know.

Greedy, sampling and beam search read the same settings; the checks here run once, at the
boundary, so a bad value (a negative temperature, top_p of 1.5, beams with sampling) fails with
one line that names it instead of somewhere inside the decoding loop.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from lmlab.errors import LmlabError


@dataclass(frozen=True)
class GenerationConfig:
    """How to pick new tokens and when to stop.

    temperature 0 is greedy (argmax); above 0 samples from softmax(logits / temperature), after
    top_k / top_p filtering. repetition_penalty > 1 makes tokens already in the prompt or output
    less likely (CTRL / HF: positive logits are divided by it, negative ones multiplied).
no_repeat_ngram_size n > 0 forbids any token that would repeat an n-gram of the prompt or output.
    num_beams > 1 runs beam search, scored as sum(logprob) / length**length_penalty.
    A sequence ends at any token of `eos_id` (one id or several: pass a tokenizer's stop_ids),
    at a stop string (text level: needs the tokenizer), or after max_new_tokens.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0  # > 0: never produce an n-gram of this size twice in a row's text
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False  # beam search: True, False (HF heuristic) or "never"
    eos_id: int | Sequence[int] | None = None
    stop_strings: Sequence[str] = ()
    seed: int | None = None

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise LmlabError(f"max_new_tokens {self.max_new_tokens} must be at least 1")
        if self.temperature < 0:
            raise LmlabError(f"temperature {self.temperature} must be >= 0 (0 = greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise LmlabError(f"top_k {self.top_k} must be at least 1 (or unset, to keep every token)")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise LmlabError(f"top_p {self.top_p} must be in (0, 1] (1 keeps every token)")
        if self.repetition_penalty <= 0:
            raise LmlabError(f"repetition_penalty {self.repetition_penalty} must be > 0 (1 = no penalty)")
        if self.no_repeat_ngram_size < 0:
            raise LmlabError(f"no_repeat_ngram_size {self.no_repeat_ngram_size} must be >= 0 (0 = allow repeats)")
        if self.num_beams < 1:
            raise LmlabError(f"num_beams {self.num_beams} must be at least 1 (1 = no beam search)")
        if self.early_stopping not in (True, False, "never"):
            raise LmlabError(f"early_stopping {self.early_stopping!r} must be True, False or 'never'")
        filters = [name for name in ("top_k", "top_p") if getattr(self, name) is not None]
        if self.num_beams > 1 and (self.temperature > 0 or filters):
            raise LmlabError("beam search is deterministic and takes no temperature, top_k or top_p; "
                             "drop them or use num_beams=1 to sample")
        if self.temperature == 0 and filters:
            raise LmlabError(f"{' and '.join(filters)} only apply when sampling; set a temperature > 0 "
                             "or drop them for greedy decoding")
        if isinstance(self.stop_strings, str):  # one string, not its characters
            object.__setattr__(self, "stop_strings", (self.stop_strings,))
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if any(not s for s in self.stop_strings):
            raise LmlabError("a stop string is empty; pass non-empty text to stop at")
        if self.num_beams > 1 and self.stop_strings:
            raise LmlabError("stop strings work with step-by-step decoding only; drop them or use num_beams=1")

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The token ids that end a sequence (`eos_id` as a tuple)."""
        if self.eos_id is None:
            return ()
        return (self.eos_id,) if isinstance(self.eos_id, int) else tuple(self.eos_id)
