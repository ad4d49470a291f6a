"""lm-evaluation-harness adapter: any lmlab decoder answers lm-eval's three kinds of request.

lm-eval asks a model for `loglikelihood` (how likely is a continuation after a context: multiple
choice, cloze), `loglikelihood_rolling` (the whole text's log-likelihood: perplexity) and
`generate_until` (greedy text up to a stop string). `HarnessScorer` answers them in plain Python
types, cutting and truncating token ids exactly as lm-eval's own `hf` model does, so both give the
same numbers on the same weights. It is faster where that is free: the choices of a question share
one context, which runs once with its KV cache shared by all of them (`score_continuations`), where
`hf` runs context + choice once per choice.

`register()` imports lm-eval (an optional extra: `pip install 'lmlab[eval]'`) and registers the
model under the name "lmlab", so `simple_evaluate(model="lmlab", model_args="pretrained=NAME")` works.
"""

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real

import torch
from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError

from lmlab.errors import LmlabError
from lmlab.eval.loglikelihood import score_continuations, split_pair
from lmlab.eval.task_files import task_code
from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate_batch
from lmlab.models.load import load
from lmlab.progress import progress_bar
from lmlab.tokenizers.sandbox import BoundedSandbox, described, render_bounded
from lmlab.tokenizers.text import TextTokenizer

INSTALL = "pip install 'lmlab[eval]'"
MAX_SHARED = 32  # continuations scored in one batched pass: (N, L, vocab) log-probs stay bounded
TASK_TEMPLATE_FIX = ("lmlab's limit for task templates without --trust-task-code; fix the task's YAML, or pass "
                     "--trust-task-code to render it with lm-eval's own jinja2")


@dataclass(frozen=True)
class HarnessScorer:
    """An lmlab decoder and its tokenizer, answering lm-eval's requests the way lm-eval's `hf` does.

    add_bos: None encodes as the tokenizer's own post-processor does (HF's default), True puts the bos
    token first, False never. max_length: the token window (lm-eval's `max_length`), by default the
    model's context. batch_size: prompts generated together.
    """

    model: torch.nn.Module
    tokenizer: TextTokenizer
    max_length: int
    add_bos: bool | None = None
    batch_size: int = 1
    show_progress: bool = False

    @property
    def prefix_id(self) -> int:
        """The token an empty context stands for (lm-eval's prefix_token_id: bos, else eos)."""
        prefix = self.tokenizer.bos_id if self.tokenizer.bos_id is not None else self.tokenizer.eos_id
        if prefix is None:
            raise LmlabError("the tokenizer has neither a bos nor an eos token, so an empty context or a "
                             "rolling window has nothing to start from; use a model whose tokenizer names one")
        return prefix

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as lm-eval's `hf` encodes a context (see `add_bos`)."""
        if self.add_bos is None:
            return self.tokenizer.backend.encode(text, add_special_tokens=True).ids
        return self.tokenizer.encode(text, add_bos=self.add_bos)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids, continuation ids) as lm-eval cuts them: trailing whitespace of the context
        moves to the continuation; an empty context becomes the prefix token."""
        if not context:
            ids = self.tokenizer.encode(continuation)
            return ([self.prefix_id], ids) if ids[:1] != [self.prefix_id] else (ids[:1], ids[1:])
        stripped = context.rstrip()  # split_pair moves only spaces; lm-eval moves newlines too
        return split_pair(self, stripped, context[len(stripped):] + continuation)

    @torch.no_grad()
    def loglikelihood(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(log-probability, is greedy) of each (context, continuation). Pairs with the same context
        are scored together: the context runs once, its continuations in one batched pass."""
        encoded = [self.encode_pair(context, continuation) for context, continuation in pairs]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (context, _) in enumerate(encoded):
            groups.setdefault(tuple(context), []).append(i)
        results: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        with self._progress(len(pairs), "loglikelihood") as bar:
            for context, members in groups.items():
                for start in range(0, len(members), MAX_SHARED):
                    chunk = members[start:start + MAX_SHARED]
                    for i, scored in zip(chunk, self._score_group(list(context), [encoded[i][1] for i in chunk])):
                        results[i] = scored
                    bar.update(len(chunk))
        return results

    @torch.no_grad()
    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """Each text's log-probability from its first token on (after the prefix token), in windows of
        `max_length` tokens that each predict new tokens with as much context as fits (lm-eval's
        rolling windows, so long texts score the same)."""
        totals = []
        with self._progress(len(texts), "loglikelihood_rolling") as bar:
            for text in texts:
                totals.append(sum(self._score_alone(context, target)[0]
                                  for context, target in rolling_windows(self.encode(text), self.prefix_id,
                                                                         self.max_length)))
                bar.update(1)
        return totals

    def generate(self, contexts: Sequence[str], until: Sequence[str], max_gen_toks: int,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None) -> list[str]:
        """The text generated after each context, cut before the first stop string of `until`;
        contexts keep their last max_length - max_gen_toks tokens, as lm-eval's `hf` keeps them."""
        room = self.max_length - max_gen_toks
        if room < 1:
            raise LmlabError(f"max_gen_toks {max_gen_toks} leaves no room for a prompt in the model's "
                             f"{self.max_length}-token window; ask the task for fewer tokens")
        config = GenerationConfig(max_new_tokens=max_gen_toks, temperature=temperature, top_k=top_k, top_p=top_p,
                                  eos_id=self.tokenizer.stop_ids, stop_strings=tuple(u for u in until if u))
        texts = []
        with self._progress(len(contexts), "generate_until") as bar:
            for start in range(0, len(contexts), self.batch_size):
                prompts = [self.encode(c)[-room:] for c in contexts[start:start + self.batch_size]]
                for generation in generate_batch(self.model, prompts, config, self.tokenizer):
                    texts.append(cut_at_stops(self.tokenizer.decode(generation.token_ids), until))
                bar.update(len(prompts))
        return texts

    def _score_group(self, context: list[int], continuations: list[list[int]]) -> list[tuple[float, bool]]:
        """Continuations sharing `context`: one shared pass when none needs the context truncated
        (so nothing changes the numbers), else each alone, truncated as lm-eval truncates it."""
        longest = max(len(c) for c in continuations)
        if len(context) + longest <= self.max_length + 1 and longest < self.model.config.context_length:
            return [(s.logprob, s.greedy) for s in score_continuations(self.model, context, continuations)]
        return [self._score_alone(context, c) for c in continuations]

    @torch.no_grad()
    def _score_alone(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """One (context, continuation) in one forward pass over its last max_length + 1 tokens but the
        last: lm-eval's `_loglikelihood_tokens` for one request."""
        if len(continuation) > self.max_length:
            raise LmlabError(f"a continuation of {len(continuation)} tokens exceeds the {self.max_length}-token "
                             "window; raise max_length or shorten the task's choices")
        device = next(self.model.parameters()).device
        ids = torch.tensor([(context + continuation)[-(self.max_length + 1):][:-1]], device=device)  # (1, T)
        logprobs = self.model(ids)[0, -len(continuation):].float().log_softmax(-1)  # (L, V)
        target = torch.tensor(continuation, device=device)
        picked = logprobs.gather(-1, target[:, None]).squeeze(-1)  # (L,)
        return float(picked.sum()), bool((logprobs.argmax(-1) == target).all())

    def _progress(self, total: int, what: str):
        return progress_bar(total, desc=what, unit="request", disable=not self.show_progress)


def rolling_windows(tokens: list[int], prefix: int, max_length: int) -> list[tuple[list[int], list[int]]]:
    """(context, target) windows that predict every token of `tokens` exactly once, each with up to
    `max_length` tokens of input: the first starts from `prefix`, the later ones keep as much of the
    text before their targets as fits (lm-eval's get_rolling_token_windows + make_disjoint_window)."""
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [([prefix], tokens[:first])]
    done = first
    while done < len(tokens):
        end = min(len(tokens), done + max_length)
        windows.append((tokens[max(0, end - max_length - 1):done], tokens[done:end]))
        done = end
    return windows


def cut_at_stops(text: str, until: Sequence[str]) -> str:
    """`text` before the first occurrence of any non-empty stop string (lm-eval's post-processing)."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def register() -> type:
    """Import lm-eval and register lmlab's model class as "lmlab" (once); return the class. Without
    lm-eval: one error saying how to install it."""
    try:
        import lm_eval.api.model  # noqa: F401
    except ImportError:
        raise LmlabError(f"lm-evaluation-harness is not installed; run {INSTALL}") from None
    return _lm_class()


@functools.cache
def _lm_class() -> type:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    @register_model("lmlab")
    class LmlabLM(LM):
        """lm-eval's model interface over `HarnessScorer`. model_args: pretrained (any name lmlab.load
        reads), dtype (fp32, bf16, int8 or int4), activations (fp32 or int8; default as `lmlab.load`'s), adapter (a PEFT
        adapter directory), max_length, add_bos_token, batch_size, device."""

        def __init__(self, pretrained: str, batch_size: int | str = 1, max_length: int | None = None,
                     add_bos_token: bool | None = None, device: str | None = None, show_progress: bool = False,
                     dtype: str | None = None, adapter: str | None = None, activations: str | None = None):
            super().__init__()
            self.scorer = load_scorer(pretrained, batch_size, max_length, add_bos_token, device, show_progress, dtype,
                                      adapter, activations)

        def loglikelihood(self, requests) -> list[tuple[float, bool]]:
            return self.scorer.loglikelihood([r.args for r in requests])

        def loglikelihood_rolling(self, requests) -> list[float]:
            return self.scorer.loglikelihood_rolling([r.args[0] for r in requests])

        def generate_until(self, requests) -> list[str]:
            """Requests grouped by their generation settings, each group generated in batches."""
            groups: dict[str, list[int]] = {}
            for i, request in enumerate(requests):
                groups.setdefault(repr(sorted(request.args[1].items())), []).append(i)
            texts = [""] * len(requests)
            eos = self.scorer.tokenizer.eos_id
            eos_text = None if eos is None else self.scorer.tokenizer.decode([eos], skip_special_tokens=False)
            for members in groups.values():
                kwargs = normalize_gen_kwargs(requests[members[0]].args[1], 256)
                until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
                max_gen_toks = kwargs.pop("max_gen_toks")
                sampling = _sampling_settings(kwargs)
                for i, text in zip(members, self.scorer.generate([requests[i].args[0] for i in members], until,
                                                                 max_gen_toks, **sampling)):
                    texts[i] = text
            return texts

    return LmlabLM


def run_tasks(model: str, tasks: Sequence[str], include_path: str | None = None, num_fewshot: int | None = None,
              limit: int | None = None, batch_size: int = 1, show_progress: bool = False,
              trust_task_code: bool = False, dtype: str | None = None, adapter: str | None = None,
              activations: str | None = None) -> dict[str, dict]:
    """Run lm-eval `tasks` on the lmlab model `model` (loaded as `dtype` with `activations`, `lmlab.load`'s, with
    the PEFT adapter in directory `adapter` when given); per task its
    metrics (name -> value, "samples" the number of examples scored). Tasks come from the YAMLs under
    `include_path` only when it is given (no index of lm-eval's built-in tasks to build), else from lm-eval's
    own. Unless `trust_task_code`, task YAMLs that make lm-eval run code (`task_files.task_code`) are
    refused, and the tasks' templates render in lmlab's sandbox (`sandboxed_templates`)."""
    lm_class = register()
    from datasets import disable_progress_bars
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    disable_progress_bars()  # "Generating test split" bars would interleave with the requests' own

    untrusted = include_path is not None and not trust_task_code
    if untrusted:
        _refuse_task_code(include_path)
    manager = TaskManager(include_path=include_path, include_defaults=include_path is None)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        where = f"under {include_path}" if include_path else "among lm-eval's tasks"
        raise LmlabError(f"no task {', '.join(unknown)} {where}; check --tasks or point --include-path at the "
                         "folder of its YAML")
    lm = lm_class(model, batch_size=batch_size, show_progress=show_progress, dtype=dtype, adapter=adapter,
                  activations=activations)
    with sandboxed_templates() if untrusted else contextlib.nullcontext():
        results = simple_evaluate(model=lm, tasks=list(tasks), num_fewshot=num_fewshot, limit=limit,
                                  task_manager=manager, bootstrap_iters=0, log_samples=False)
    return {name: task_metrics(values) for name, values in results["results"].items()}


def _refuse_task_code(include_path: str) -> None:
    """One error naming the first task YAML under `include_path` that would make lm-eval run code, or
    saying that the installed `datasets` runs any task's dataset loading script."""
    import datasets
    import lm_eval.api.metrics  # noqa: F401 (registers lm-eval's own metrics)
    from lm_eval.api.registry import metric_registry
    from packaging.version import Version

    if Version(datasets.__version__) < Version("4"):
        raise LmlabError(f"datasets {datasets.__version__} runs the loading script a task's dataset_path may name; "
                         "upgrade it (pip install 'datasets>=4'), or pass --trust-task-code if you trust the tasks "
                         "under --include-path")

    code = task_code(include_path, frozenset(metric_registry))
    if code:
        path, reason = next(iter(code.items()))
        more = f" (and {len(code) - 1} more task files)" if len(code) > 1 else ""
        raise LmlabError(f"{path} {reason}{more}; lm-eval would run code from it: pass --trust-task-code if you "
                         "trust the tasks under --include-path")


@contextlib.contextmanager
def sandboxed_templates():
    """lm-eval renders a task's templates (doc_to_text, doc_to_choice, …) in a plain jinja2 Environment,
    where `{{ cycler.__init__.__globals__.os.system(…) }}` runs a command: within the block they render
    in lmlab's bounded sandbox instead, with lm-eval's undefined (strict) and filter (regex_replace)."""
    import lm_eval.utils

    original = lm_eval.utils.apply_template
    lm_eval.utils.apply_template = _render_task_template
    try:
        yield
    finally:
        lm_eval.utils.apply_template = original


def _render_task_template(template: str, doc: dict) -> str:
    """lm-eval's `apply_template`, in the sandbox and within its budget."""
    with described("a task template", TASK_TEMPLATE_FIX):
        try:
            return render_bounded(_task_template(template), **doc)
        except LmlabError:
            raise
        except SecurityError as e:
            raise LmlabError(f"a task template reaches into Python ({e}), which lmlab's sandbox refuses; pass "
                             "--trust-task-code to render it with lm-eval's own jinja2 if you trust the task") from None
        except Exception as e:  # the task's own mistake: a syntax error, an undefined field, 1 / 0
            problem = " ".join(str(e).split())[:200]
            raise LmlabError(f"a task template failed on a document ({type(e).__name__}: {problem}); fix the "
                             f"task's YAML: {template[:80]!r}") from None


@functools.lru_cache(maxsize=256)
def _task_template(source: str):
    return _task_environment().from_string(source)


@functools.cache
def _task_environment() -> BoundedSandbox:
    from lm_eval.utils import regex_replace

    return BoundedSandbox(filters={"regex_replace": regex_replace}, undefined=StrictUndefined,
                          keep_trailing_newline=True)


def task_metrics(values: dict) -> dict:
    """lm-eval's result entry for one task ("acc,none": 0.5, "acc_stderr,none": "N/A", …) as
    {"acc": 0.5, …, "samples": n}: metrics only, the filter named only when it is not "none"."""
    metrics = {}
    for key, value in values.items():
        metric, _, filtered = key.partition(",")
        if filtered and not metric.endswith("_stderr") and isinstance(value, Real):
            metrics[metric if filtered == "none" else key] = float(value)
    return metrics | ({"samples": values["sample_len"]} if "sample_len" in values else {})


def _sampling_settings(kwargs: dict) -> dict:
    """temperature / top_k / top_p from lm-eval's normalised generation kwargs (greedy unless do_sample);
    any other setting is one error naming it, rather than silently decoding differently."""
    sample, temperature = kwargs.pop("do_sample", False), float(kwargs.pop("temperature", 0.0))
    settings = {"temperature": temperature if sample else 0.0}
    for name in ("top_k", "top_p"):
        value = kwargs.pop(name, None)
        if value is not None and settings["temperature"] > 0:
            settings[name] = value
    if kwargs:
        raise LmlabError(f"generation settings {', '.join(sorted(kwargs))} are not supported by lmlab's harness "
                         "model; it takes until, max_gen_toks, do_sample, temperature, top_k and top_p")
    return settings


def load_scorer(name: str, batch_size: int | str = 1, max_length: int | None = None, add_bos: bool | None = None,
                device: str | None = None, show_progress: bool = False, dtype: str | None = None,
                adapter: str | None = None, activations: str | None = None) -> HarnessScorer:
    """A `HarnessScorer` over the lmlab model `name` (zoo name, model directory or file) loaded as `dtype`
    (`lmlab.load`'s: None as stored, fp32, bf16, int8, int4) with `activations` (`lmlab.load`'s), in eval mode on
    `device` (default: where it loads), with the PEFT adapter in directory `adapter` on it when given."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise LmlabError(f"--batch-size {batch_size} must be a whole number of at least 1")
    model, tokenizer = load(name, dtype, adapter=adapter, activations=activations)
    device = usable_device(device)
    if device is not None:
        model = model.to(device)
    limit = model.config.context_length
    if max_length is not None and not 1 < max_length <= limit:
        raise LmlabError(f"max_length {max_length} must be between 2 and the model's context of {limit} tokens")
    return HarnessScorer(model.eval(), tokenizer, max_length or limit, add_bos, batch_size, show_progress)


def usable_device(device: str | None) -> str | None:
    """`device` as lm-eval's `hf` model reads it: None (stay where the model loads) for a CUDA device this
    machine lacks, since lm-eval's command line asks for cuda:0 unless told otherwise."""
    if device is None:
        return None
    try:
        place = torch.device(device)
    except RuntimeError:
        raise LmlabError(f"device {device!r} is not a torch device; pass --device cpu, cuda or cuda:N") from None
    if place.type == "cuda" and (place.index or 0) >= torch.cuda.device_count():
        return None
    return device
