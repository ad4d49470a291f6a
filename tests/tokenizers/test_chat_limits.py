"""A chat template from a model file renders within a size, step and time budget, from any thread,
and real templates render exactly as transformers renders them."""

import threading
import time

import pytest

from chat_templates import CHATML
from lmlab.errors import LmlabError
from lmlab.tokenizers import sandbox
from lmlab.tokenizers.chat import render_chat

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <there> & “you”"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What's 2+2?"}]
DOUBLING = "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = EXPR %}{% endfor %}{{ ns.s|length }}"

# Each asks for far more than MAX_CHARS: at once, by doubling, or by multiplying sizes; none may allocate it.
TOO_BIG = {
    "repeat": "{{ 'x' * 4000000000 }}",
    "repeat a computed count": "{{ 'x' * 10 ** 7 }}",
    "repeat in a loop": "{% for i in range(50) %}{{ 'x' * 10 ** 6 }}{% endfor %}",
    "output of many pieces": "{% for i in range(100) %}{{ messages[0]['content'] * 10000 }}{% endfor %}",
    "list repeat": "{{ ([1] * 10 ** 7)|length }}",
    "doubling by +": DOUBLING.replace("EXPR", "ns.s + ns.s"),
    "doubling by ~": DOUBLING.replace("EXPR", "ns.s ~ ns.s"),
    "doubling by join filter": DOUBLING.replace("EXPR", "[ns.s, ns.s]|join"),
    "doubling by str.join": DOUBLING.replace("EXPR", "ns.s.join([ns.s, ns.s])"),
    "doubling by replace": DOUBLING.replace("EXPR", "ns.s.replace('x', ns.s)"),
    "doubling by format": DOUBLING.replace("EXPR", "'%s%s' % (ns.s, ns.s)"),
    "nested lists": DOUBLING.replace("EXPR", "[ns.s, ns.s]"),
    "width": "{{ 'x'.ljust(10 ** 10) }}",
    "width filter": "{{ 'x'|center(10 ** 10) }}",
    "width in a format string": "{{ '%999999999999s' % 'x' }}",
    "width as a format argument": "{{ '{:>{w}}'.format('x', w=10 ** 10) }}",
    "fill value": "{% for b in [1]|batch(10 ** 9, 'x') %}{{ b|length }}{% endfor %}",
    "json indent": "{{ messages|tojson(indent=10 ** 9) }}",
    "huge number": "{{ 2 ** 10000000000 }}",
}


@pytest.mark.parametrize("template", TOO_BIG.values(), ids=TOO_BIG.keys())
def test_templates_that_ask_for_too_much_are_refused_before_allocating(template):
    start = time.perf_counter()
    with pytest.raises(LmlabError, match="limit for chat templates"):
        render_chat(template, MESSAGES)
    assert time.perf_counter() - start < 5


NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}BODY{% endfor %}{% endfor %}"
ENDLESS = {
    "empty nested loops": NESTED.replace("BODY", ""),
    "nested loops with output": NESTED.replace("BODY", "x"),
    "nested loops into a variable": "{% set x %}" + NESTED.replace("BODY", "xxxxxxxx") + "{% endset %}",
}


def _render_in_thread(template: str, timeout: float) -> BaseException | str | None:
    """What rendering `template` in another thread gave (its text or its error); None if it was still running."""
    outcome = []

    def render():
        try:
            outcome.append(render_chat(template, MESSAGES))
        except Exception as e:
            outcome.append(e)
    worker = threading.Thread(target=render, daemon=True)  # a runaway render cannot keep the test run alive
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else None


@pytest.mark.parametrize("template", ENDLESS.values(), ids=ENDLESS.keys())
def test_endless_loops_stop_at_the_step_limit_even_outside_the_main_thread(template):
    outcome = _render_in_thread(template, timeout=30)
    assert isinstance(outcome, LmlabError) and "loop steps" in str(outcome), outcome


def test_exponential_recursion_stops_at_the_time_limit(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_SECONDS", 0.3)
    template = ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                "{{ f(60) }}")
    start = time.perf_counter()
    outcome = _render_in_thread(template, timeout=30)
    assert isinstance(outcome, LmlabError) and "longer than 0.3 s" in str(outcome), outcome
    assert time.perf_counter() - start < 5


def test_the_budget_is_per_render():
    """Many renders of a loop-heavy template in a row: each one starts with a full budget."""
    template = "{% for i in range(3) %}{% for j in range(100000) %}{% endfor %}{% endfor %}ok"
    assert all(render_chat(template, MESSAGES) == "ok" for _ in range(4))  # 1.2 M steps in all


FAILING = {
    "nesting too deep to compile": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "blocks too deep to compile": "{% if 1 %}" * 3000 + "{% endif %}" * 3000,
    "sums too long to compile": "{{ " + "1 + " * 5000 + "1 }}",
    "division by zero": "{{ 1 / 0 }}",
    "wrong types": "{{ 'a' - 1 }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
}


@pytest.mark.parametrize("template", FAILING.values(), ids=FAILING.keys())
def test_a_template_that_fails_is_one_clear_error(template):
    with pytest.raises(LmlabError, match="the chat template (failed on these messages|nests)") as error:
        render_chat(template, MESSAGES)
    assert "\n" not in str(error.value)


# A template in the style of recent tool-using chat models, written for this test: namespaces,
# loop controls and variables, tojson with indent, string methods, slicing, filters, tests, `~`, `%`.
RICH = """{{ bos_token }}{% set ns = namespace(system='', tools_shown=false) %}
{% if messages[0]['role'] == 'system' %}{% set ns.system = messages[0]['content'] | trim %}{% set rest = messages[1:] %}
{% else %}{% set rest = messages %}{% endif %}
<|system|>{{ ns.system if ns.system else 'You are helpful.' }}
{% if tools is defined and tools %}Tools:
{% for tool in tools %}{{ tool | tojson(indent=2) }}
{% endfor %}{% set ns.tools_shown = true %}{% endif %}
{% for message in rest %}
{% if loop.index0 > 20 %}{% break %}{% endif %}
{% if message.role not in ['user', 'assistant'] %}{{ raise_exception('unknown role ' ~ message.role) }}{% endif %}
<|{{ message['role'] }}|>{{ message['content'].strip().replace('&', 'and') }}{{ '%s/%d' % ('#', loop.index) }}
{% if loop.last and message.role == 'user' %}{{ (message.content.split(' ')|map('upper')|join('_'))[:40] }}{% endif %}
{% endfor %}
{% for key, value in {'b': 2, 'a': 1} | dictsort %}{{ key }}={{ value }};{% endfor %}
{% if add_generation_prompt %}<|assistant|>{{ '{} tools'.format(tools | length if tools else 0) }}{% endif %}"""
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]


@pytest.mark.parametrize("template_name", ["rich", "chatml"])
def test_real_templates_render_exactly_as_transformers_does(template_name):
    chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    template = {"rich": RICH, "chatml": CHATML}[template_name]
    for generation_prompt in (True, False):
        ours = render_chat(template, MESSAGES, generation_prompt, bos_token="<s>", tools=TOOLS)
        theirs, _ = chat_template_utils.render_jinja_template(
            [MESSAGES], tools=TOOLS, chat_template=template, add_generation_prompt=generation_prompt, bos_token="<s>")
        assert ours == theirs[0]
