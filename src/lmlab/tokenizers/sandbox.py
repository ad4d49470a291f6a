"""A jinja2 sandbox with a budget: a chat template from a model file can neither hang nor fill memory.

jinja2's ImmutableSandboxedEnvironment keeps a template away from Python internals and from our
objects, but not from asking for too much: `{{ 'x' * 4000000000 }}` wants 4 GB at once, a string
doubled forty times by `~` a terabyte, and two nested loops over `range(100000)` run for hours.
`BoundedSandbox` adds a budget to every render (`render_bounded`):

- size: every value a template makes (a literal, an operator's, a call's or a filter's result, each
  `{{ … }}`) is weighed, and the rendered text is counted as it streams; more than MAX_CHARS
  characters is an error. What can multiply a size (`*`, `**`, `%`, `~`, join, replace, format,
  widths, fill values) is estimated *before* it runs, so nothing big is ever allocated.
- time: every loop step, call, filter and operator is one step, and so is every item a lazy filter
  (select, map, …) yields; more than MAX_STEPS steps, or more than MAX_SECONDS seconds, is an
  error. A loop with an empty body runs no call at all, so every `{% for %}` is rewritten to step
  through `_paced`. The clock is read only between steps, so no one step may take long: what costs
  more than linear time is estimated before it runs (wrapping a long word, stripping a long set of
  characters: MAX_WORK), what makes a Python object per item of a string or a generator takes at
  most MAX_ITEMS items, and `lipsum` (seconds of filler text no chat template prints) is not offered.
  A regex (lm-eval's `regex_replace` filter, offered to task templates) runs in C past the clock, so
  its pattern must be in `regex_checks`' safe class, which cannot backtrack without bound.

The budget lives in a thread-local, so renders in other threads (a server's) are bounded too, and
no signal is needed. Real templates stay far inside it and render exactly as before.
"""

import contextlib
import functools
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sized

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from lmlab.errors import LmlabError
from lmlab.tokenizers.regex_checks import UnsafeRegex, check_regex

MAX_CHARS = 5_000_000  # the rendered prompt and every value on the way (over a million tokens)
MAX_STEPS = 1_000_000  # loop steps, calls, filters and operators in one render
MAX_SECONDS = 5.0  # wall-clock time of one render
MAX_INT_BITS = 65_536  # the largest number a template may compute (about 20,000 digits)
MAX_WORK = 10_000_000_000  # character copies or comparisons of one filter or method (well under a second)
MAX_ITEMS = MAX_CHARS // 4  # items one filter makes into a list (a string's characters, a generator's items)
_FIX = "lmlab's limit for chat templates; fix the model's chat template or choose another with --chat-template"


class _Budget(threading.local):
    deadline: float | None = None  # None: not inside render_bounded (e.g. constant folding at compile time)
    steps: int = 0
    what: str = "the chat template"  # named in the errors, with `fix`: see `described`
    fix: str = _FIX


_budget = _Budget()


@contextlib.contextmanager
def described(what: str, fix: str):
    """Within the block, budget errors name the template as `what` ("a task template") and end with
    `fix` instead of the chat template's."""
    saved = _budget.what, _budget.fix
    _budget.what, _budget.fix = what, fix
    try:
        yield
    finally:
        _budget.what, _budget.fix = saved


def render_bounded(template, /, **variables) -> str:
    """`template.render(**variables)` within the budget: an LmlabError names the limit that was hit."""
    saved = _budget.deadline, _budget.steps
    _budget.deadline, _budget.steps = time.monotonic() + MAX_SECONDS, 0
    try:
        pieces, size = [], 0
        for piece in template.generate(**variables):
            size += len(piece)
            _check_size(size)
            pieces.append(piece)
        return "".join(pieces)
    finally:
        _budget.deadline, _budget.steps = saved


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment whose templates render within `render_bounded`'s budget.

    `filters` and `globals` are added to jinja2's own; every filter is wrapped to count and weigh.
    """

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self, filters: dict[str, Callable] | None = None, globals: dict | None = None, **options):
        super().__init__(finalize=_made, **options)
        self.filters.update(filters or {})
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals.pop("lipsum")  # seconds and hundreds of MB of filler text for lipsum(n=100000)
        self.globals.update(globals or {})

    def from_string(self, source, globals=None, template_class=None):
        """Compile `source` with every loop paced and every literal and `~` weighed."""
        if isinstance(source, str):
            source = _Budgeted(self).visit(self.parse(source))
        return super().from_string(source, globals, template_class)

    def call_binop(self, context, operator, left, right):
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, kept fast
            _check_size(len(left) + len(right))
            return left + right
        _step()
        _check_size(_binop_bound(operator, left, right))
        return _made(self.binop_table[operator](left, right))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's own naming, see its call)
        if id(__obj) in _OWN:  # our own checks, called by the rewritten template (inside a loop, with its variables)
            return __obj(*args)
        _step()
        args = _check_call(__obj, args, kwargs)
        return _made(super().call(__context, __obj, *args, **kwargs))


def _step() -> None:
    """Count one step of the current render; raise past MAX_STEPS or MAX_SECONDS."""
    if _budget.deadline is None:
        return
    _budget.steps += 1
    if _budget.steps > MAX_STEPS:
        raise _limit(f"ran more than {MAX_STEPS:,} loop steps and calls")
    if time.monotonic() > _budget.deadline:
        raise _limit(f"ran longer than {MAX_SECONDS:g} s")


def _limit(problem: str) -> LmlabError:
    return LmlabError(f"{_budget.what} {problem} ({_budget.fix})")


def _check_size(size: int) -> None:
    if size > MAX_CHARS:
        raise _limit(f"makes a text or value of more than {MAX_CHARS:,} characters")


def _check_work(work: int) -> None:
    if work > MAX_WORK:
        raise _limit(f"asks one filter or method for more than {MAX_WORK:,} character operations")


def weight(value, limit: int = MAX_CHARS) -> int:
    """About how many characters `value` takes as text: strings by length, an int by its digits,
    containers by their elements, each counted as often as it appears (a list holding one string
    twice weighs twice). Counting stops soon after `limit`, so this never takes long."""
    if isinstance(value, (str, bytes)):
        return len(value)
    total, stack = 0, [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v)
        elif isinstance(v, int):
            total += 1 + v.bit_length() // 3
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + 3 * len(v)  # as text: brackets, and a comma, a space and at least one character each
            stack.extend(v)
        elif isinstance(v, dict):
            total += 2 + 4 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            total += 1
    return total


def _depth(value, limit: int = MAX_CHARS) -> int:
    """How deeply lists and dicts nest in `value` (looks at no more than `limit` elements)."""
    deepest, seen, stack = 0, 0, [(value, 0)]
    while stack and seen <= limit:
        v, d = stack.pop()
        seen += 1
        deepest = max(deepest, d)
        if isinstance(v, (list, tuple, set, frozenset)):
            stack.extend((item, d + 1) for item in v)
        elif isinstance(v, dict):
            stack.extend((item, d + 1) for item in v.values())
    return deepest


def _made(value):
    """`value`, after checking its weight: every literal, result and `{{ … }}` passes here."""
    _check_size(len(value) if type(value) is str else weight(value))
    return value


def _paced(iterable):
    """The items of a `{% for %}` loop, one step each."""
    for item in iterable:
        _step()
        yield item


def _concat(parts: list) -> str:
    """`a ~ b ~ c`, weighed before it is joined."""
    _check_size(sum(weight(part) for part in parts))
    return "".join(map(str, parts))


_OWN = {id(f) for f in (_made, _paced, _concat)}


class _Budgeted(NodeTransformer):
    """Rewrites a parsed template: loops step through `_paced`, literals pass `_made`, `~` is `_concat`."""

    def __init__(self, environment):
        self.environment = environment

    def _call(self, function: Callable, arg: nodes.Expr) -> nodes.Call:
        call = nodes.Call(nodes.ImportedName(f"{__name__}.{function.__name__}"), [arg], [], None, None)
        return call.set_lineno(arg.lineno).set_environment(self.environment)

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = self._call(_paced, node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        self.generic_visit(node)
        return self._call(_concat, nodes.List(node.nodes).set_lineno(node.lineno))

    def _literal(self, node):
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":  # a target, as in `{% for key, value in … %}`
            return node
        try:  # a literal of constants only is no bigger than the template's source: nothing to check
            node.as_const(nodes.EvalContext(self.environment))
            return node
        except nodes.Impossible:
            return self._call(_made, node)

    visit_List = visit_Tuple = visit_Dict = _literal


# Estimates, before the work is done, of what can grow: each returns a bound on the result's weight.

def _format_bound(fmt: str, values, marker: str) -> int:
    """`fmt % values` or `fmt.format(*values)`: each field may repeat a value or pad it to a width."""
    fields = fmt.count(marker)
    if not fields:
        return len(fmt)
    widths = [int(d) if len(d) < 10 else 10 ** 10 for d in re.findall(r"\d+", fmt)]
    per_field = sum(weight(v) + (abs(v) if isinstance(v, int) else 0) for v in values) + max(widths, default=0)
    return len(fmt) + fields * per_field


def _format_values(args) -> list:
    if isinstance(args, dict):
        return [*args.keys(), *args.values()]
    return list(args) if isinstance(args, tuple) else [args]


def _replace_bound(text: str, old, new, count=-1) -> int:
    if not (isinstance(old, str) and isinstance(new, str)):
        return len(text)
    n = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(text) + n * len(new)


def _join_bound(items: list, separator) -> int:
    return sum(weight(item) for item in items) + len(items) * weight(separator)


def _int_bound(bits: int) -> int:
    """Numbers in a chat template are counts and indices: one of more than MAX_INT_BITS bits is refused
    before it is computed (products of bigger ones take seconds)."""
    if bits > MAX_INT_BITS:
        raise _limit(f"computes a number of more than {MAX_INT_BITS:,} bits")
    return 0


def _binop_bound(operator: str, left, right) -> int:
    sequences = (str, list, tuple)
    if operator == "+" and isinstance(left, sequences) and isinstance(right, sequences):
        return weight(left) + weight(right)
    if operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            return _int_bound(left.bit_length() + right.bit_length())
        if isinstance(right, int) and isinstance(left, sequences):
            return weight(left) * max(right, 0)
        if isinstance(left, int) and isinstance(right, sequences):
            return weight(right) * max(left, 0)
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        return _int_bound(right * left.bit_length())
    if operator == "%" and isinstance(left, str):
        return _format_bound(left, _format_values(right), "%")
    return 0


def _check_call(fn, args: tuple, kwargs: dict) -> tuple:
    """Check what calling a string method from a template would make; the args to call it with."""
    target = getattr(fn, "__wrapped__", fn)  # the sandbox wraps str.format in a function of its own
    text = getattr(target, "__self__", None)
    if not isinstance(text, str):
        return args
    bound = _METHOD_BOUNDS.get(getattr(target, "__name__", ""))
    if bound is not None:
        if target.__name__ == "join" and args:
            args = (_items(args[0]), *args[1:])  # a generator is read once: here, then by join itself
        _check_size(bound(text, args, kwargs))
    return args


def _items(value):
    """`value` for a filter or method that makes a Python object per item: a generator read into a
    list, at most MAX_ITEMS items; a string (an object per character) of at most MAX_ITEMS characters."""
    if isinstance(value, str) and len(value) > MAX_ITEMS:
        raise _limit(f"makes a list of more than {MAX_ITEMS:,} items (one per character)")
    if isinstance(value, Sized) or not isinstance(value, Iterable):
        return value
    items = list(itertools.islice(value, MAX_ITEMS + 1))
    if len(items) > MAX_ITEMS:
        raise _limit(f"makes a list of more than {MAX_ITEMS:,} items")
    return items


def _width_bound(text: str, args: tuple, kwargs: dict) -> int:
    return max(args[0] if args else 0, len(text))


def _strip_bound(text: str, args: tuple, kwargs: dict) -> int:
    """str.strip(chars) looks each stripped character up in `chars`: len(text) * len(chars) in the worst case."""
    chars = args[0] if args else kwargs.get("chars")
    _check_work(len(text) * len(chars) if isinstance(chars, str) else 0)
    return len(text)


def _split_bound(text: str, args: tuple, kwargs: dict) -> int:
    """A list of pieces of `text`: at most one per separator found (per two characters for whitespace)."""
    sep = args[0] if args else kwargs.get("sep")
    pieces = text.count(sep) + 1 if isinstance(sep, str) and sep else len(text) // 2 + 1
    maxsplit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
    if isinstance(maxsplit, int) and maxsplit >= 0:
        pieces = min(pieces, maxsplit + 1)
    if pieces > MAX_ITEMS:
        raise _limit(f"makes a list of more than {MAX_ITEMS:,} items")
    return len(text) + 3 * pieces


# str methods that can make something much larger than the string: (text, args, kwargs) -> a bound.
_METHOD_BOUNDS: dict[str, Callable[[str, tuple, dict], int]] = {
    "format": lambda text, args, kwargs: _format_bound(text, [*args, *kwargs.values()], "{"),
    "format_map": lambda text, args, kwargs: _format_bound(text, _format_values(args[0]) if args else [], "{"),
    "replace": lambda text, args, kwargs: _replace_bound(text, *args[:3]),
    "join": lambda text, args, kwargs: _join_bound(list(args[0]), text) if args else 0,
    "translate": lambda text, args, kwargs: len(text) * (1 + weight(args[0])) if args else 0,
    "expandtabs": lambda text, args, kwargs: (
        len(text) + text.count("\t") * max(args[0] if args else kwargs.get("tabsize", 8), 0)),
    "center": _width_bound, "ljust": _width_bound, "rjust": _width_bound, "zfill": _width_bound,
    "strip": _strip_bound, "lstrip": _strip_bound, "rstrip": _strip_bound,
    "split": _split_bound, "rsplit": _split_bound,
    "splitlines": lambda text, args, kwargs: 4 * len(_items(text)),
}


def _text(value) -> str:
    return value if isinstance(value, str) else str(value)


def _indent_bound(s, width=4, *_, **__) -> int:
    s = _text(s)
    return len(s) + (s.count("\n") + 1) * (width if isinstance(width, int) else len(_text(width)))


def _batch_bound(value, linecount=0, fill_with=None, *_, **__) -> int:
    """Each item in a new list, the last one filled up to `linecount` items."""
    fill = linecount * (3 + weight(fill_with)) if isinstance(linecount, int) and fill_with is not None else 0
    return weight(value) + 8 * len(value) + fill


def _slice_bound(value, slices=0, fill_with=None, *_, **__) -> int:
    """`slices` new lists (each costs as much as 8 characters, and seconds for millions), each maybe filled."""
    count = slices if isinstance(slices, int) else 0
    return weight(value) + count * (8 + (3 + weight(fill_with) if fill_with is not None else 0))


def _wordwrap_bound(s, width=79, break_long_words=True, wrapstring=None, *_, **__) -> int:
    """textwrap splits the text into a list of words and spaces, and cuts a word longer than `width`
    one piece at a time, copying the rest of the word each time: len² / width characters."""
    text = _items(_text(s))
    _check_work(len(text) * (len(text) // max(width if isinstance(width, int) else 1, 1) + 1))
    return len(text) * (1 + len(_text(wrapstring or "\n")))


def _trim_bound(value, chars=None) -> int:
    """str.strip(chars) looks each stripped character up in `chars`: len(value) * len(chars) at worst."""
    return _strip_bound(_text(value), (chars,), {})


def _regex_replace_bound(s, pattern, repl, count=0) -> int:
    """lm-eval's `re.sub(pattern, repl, s, count)`: refused unless `pattern` is in the safe class; each
    match is replaced by `repl`, whose group references (`\\1`, `\\g<0>`) each copy at most all of `s`."""
    text = _text(s)
    if not isinstance(pattern, str) or not isinstance(repl, str):
        raise _limit("gives regex_replace a pattern or replacement that is not a string")
    try:
        check_regex(pattern, syntax="python")
    except UnsafeRegex as error:
        raise _limit(f"gives regex_replace the pattern {pattern[:80]!r}, which could backtrack without bound: "
                     f"{error}") from None
    matches = sum(1 for _ in itertools.islice(re.finditer(pattern, text), count if count > 0 else None))
    return len(text) + matches * len(repl) + len(re.findall(r"\\(?:g<|\d)", repl)) * len(text)


def _sum_bound(items, attribute=None, start=0) -> int:
    if isinstance(start, (int, float)):
        return 0
    return len(items) * (weight(items) + weight(start))  # adding lists copies the sum so far every time


def _urlize_bound(value, trim_url_limit=None, nofollow=False, target=None, rel=None, *_, **__) -> int:
    text = _text(value)  # a link (it has a dot, an @ or a colon) is written twice, in <a href> with target and rel
    links = text.count(".") + text.count("@") + text.count(":")
    return 3 * len(text) + links * (64 + weight(target) + weight(rel))


def _tojson_bound(value, indent=None, *_, **__) -> int:
    per_level = indent if isinstance(indent, int) else len(_text(indent)) if indent else 0
    return weight(value) * (1 + per_level * _depth(value))


# jinja2's filters that can make something much larger than their input, and our tojson.
_FILTER_BOUNDS: dict[str, Callable[..., int]] = {
    "join": lambda items, d="", attribute=None: _join_bound(items, d),
    "replace": lambda s, old, new, count=None: _replace_bound(_text(s), old, new, -1 if count is None else count),
    "format": lambda value, *args, **kwargs: _format_bound(_text(value), [*args, *kwargs.values()], "%"),
    "indent": _indent_bound,
    "center": lambda value, width=80: max(len(_text(value)), width if isinstance(width, int) else 0),
    "wordwrap": _wordwrap_bound,
    "trim": _trim_bound,
    "truncate": lambda s, length=255, killwords=False, end="...", *_, **__: len(_text(s)) + weight(end),
    "urlize": _urlize_bound,
    "batch": _batch_bound,
    "slice": _slice_bound,
    "sum": _sum_bound,
    "tojson": _tojson_bound,
    "regex_replace": _regex_replace_bound,
    "pprint": lambda value: weight(value) * (1 + _depth(value)),
}
# Filters that make a Python object per item of their input (a string's characters, a generator's
# items: see `_items`), or read a generator whole; their input passes `_items` first.
_ITEMWISE = {"join", "sum", "list", "sort", "unique", "batch", "slice", "groupby", "reverse", "title", "wordcount"}


def _bounded_filter(name: str, f: Callable) -> Callable:
    """`f`, counting a step and weighing its result (or pacing it, a step per item, when it is lazy);
    for the filters in _FILTER_BOUNDS, estimating first."""
    bound = _FILTER_BOUNDS.get(name)
    skip = 1 if getattr(f, "jinja_pass_arg", None) is not None else 0  # the context / eval context / env

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        _step()
        if name in _ITEMWISE and len(args) > skip and not (name == "reverse" and isinstance(args[skip], str)):
            args = (*args[:skip], _items(args[skip]), *args[skip + 1:])
        if bound is not None and len(args) > skip:
            _check_size(bound(*args[skip:], **kwargs))
        result = f(*args, **kwargs)
        return _paced(result) if isinstance(result, Iterator) else _made(result)
    return bounded
