"""`GenerationConfig`: every decoding choice in one frozen dataclass, under the names HF users know.

Greedy, sampling and beam search read the same settings; the checks here run once, at the
boundary, so a bad value (a negative temperature, top_p of 1.5, beams with sampling) fails with
one line that names it instead of somewhere inside the decoding loop.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from lmlab.config_checks import MAX_CONTEXT, MIN_TEMPERATURE, SettingError, at_least, at_most, check_types, flag
from lmlab.errors import LmlabError

FLAGS = {"num_beams": "--beams", "stop_strings": "--stop"}  # fields whose `lmlab generate` flag has another name
MAX_BEAMS = 1024  # each beam is a full copy of the sequence and its cache
MAX_DRAFT = 64  # draft tokens a speculative round checks: past this the pass costs like a prompt's
# repetition_penalty divides or multiplies a seen token's logit: within [1/100, 100] a float32 logit stays finite
# (published settings lie between 1.0 and 1.5; below 1 the seen tokens become more likely)
PENALTY_RANGE = (0.01, 100.0)
# beam scores are divided by length**length_penalty: within [-4, 4] that stays inside float32 up to MAX_CONTEXT
# tokens (2**80); published settings lie between 0.6 and 2
LENGTH_PENALTY_RANGE = (-4.0, 4.0)
SEED_RANGE = (-2**63, 2**64 - 1)  # what torch.Generator.manual_seed takes; a negative seed s is 2**64 + s


@dataclass(frozen=True)
class GenerationConfig:
    """How to pick new tokens and when to stop.

    temperature 0 is greedy (argmax); from MIN_TEMPERATURE (0.01) on it samples from
    softmax(logits / temperature), after top_k / top_p filtering (top_p in (0, 1]: the most likely
    token always stays). repetition_penalty > 1 makes tokens already in the prompt or output less
    likely (CTRL / HF: positive logits are divided by it, negative ones multiplied), within PENALTY_RANGE.
    seed: any integer torch.Generator takes (SEED_RANGE).
    no_repeat_ngram_size n > 0 forbids any token that would repeat an n-gram of the prompt or output.
    num_beams > 1 runs beam search, scored as sum(logprob) / length**length_penalty (LENGTH_PENALTY_RANGE).
    draft_tokens k > 0 decodes speculatively (`speculative.py`): up to k tokens a round drafted (by prompt lookup,
    or a draft model given to `generate_batch`) and checked in one forward pass; greedy, the same tokens,
    sampled, the same distribution (HF: prompt_lookup_num_tokens, num_assistant_tokens).
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
    draft_tokens: int = 0  # > 0: decode speculatively, drafting up to this many tokens a round

    def __post_init__(self):
        check_types(self, FLAGS)
        at_least(self, 1, "max_new_tokens", "top_k", "num_beams", flags=FLAGS)
        at_least(self, 0, "temperature", "no_repeat_ngram_size", "draft_tokens", flags=FLAGS)
        at_most(self, MAX_CONTEXT, "max_new_tokens", "no_repeat_ngram_size", flags=FLAGS)
        at_most(self, MAX_BEAMS, "num_beams", flags=FLAGS)
        at_most(self, MAX_DRAFT, "draft_tokens", flags=FLAGS)
        if self.num_beams > 1 and self.draft_tokens:
            raise LmlabError("speculative decoding keeps one sequence, not beams; drop --speculate or use --beams 1")
        self._check_sampling_ranges()
        if self.early_stopping not in (True, False, "never"):
            raise LmlabError(f"early_stopping {self.early_stopping!r} must be True, False or 'never'")
        filters = [name for name in ("top_k", "top_p") if getattr(self, name) is not None]
        if self.num_beams > 1 and (self.temperature > 0 or filters):
            raise LmlabError("beam search is deterministic and takes no --temperature, --top-k or --top-p; "
                             "drop them or use --beams 1 to sample")
        if self.temperature == 0 and filters:
            raise LmlabError(f"{' and '.join(flag(name) for name in filters)} only apply when sampling; set a "
                             "--temperature above 0 or drop them for greedy decoding")
        if isinstance(self.stop_strings, str):  # one string, not its characters
            object.__setattr__(self, "stop_strings", (self.stop_strings,))
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if any(not s for s in self.stop_strings):
            raise LmlabError("a stop string is empty; pass non-empty text to stop at")
        if self.num_beams > 1 and self.stop_strings:
            raise LmlabError("stop strings work with step-by-step decoding only; drop --stop or use --beams 1")

    def _check_sampling_ranges(self) -> None:
        """temperature, top_p, repetition_penalty, length_penalty and seed lie where decoding's float32
        arithmetic and torch's generator work; a SettingError names the field (the server: as `param`)."""
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise SettingError("temperature", self.temperature, f"is too small to sample with: use 0 for greedy "
                               f"decoding or at least {MIN_TEMPERATURE}", FLAGS)
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise SettingError("top_p", self.top_p, "must be in (0, 1] (1 keeps every token)", FLAGS)
        low, high = PENALTY_RANGE
        if not low <= self.repetition_penalty <= high:
            raise SettingError("repetition_penalty", self.repetition_penalty, f"must be in [{low}, {high:g}] "
                               "(1 is off, above 1 discourages repeats)", FLAGS)
        low, high = LENGTH_PENALTY_RANGE
        if not low <= self.length_penalty <= high:
            raise SettingError("length_penalty", self.length_penalty, f"must be in [{low:g}, {high:g}] (beam score = "
                               "sum of logprobs / length**P; 0 ranks by the sum alone)", FLAGS)
        low, high = SEED_RANGE
        if self.seed is not None and not low <= self.seed <= high:
            raise SettingError("seed", self.seed, "must be in [-2**63, 2**64 - 1], the range of a 64-bit seed", FLAGS)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The token ids that end a sequence (`eos_id` as a tuple)."""
        if self.eos_id is None:
            return ()
        return (self.eos_id,) if isinstance(self.eos_id, int) else tuple(self.eos_id)
