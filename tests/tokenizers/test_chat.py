"""Chat templates render like transformers renders them, inside jinja2's sandbox."""

import pytest

from chat_templates import CHATML
from lmlab.errors import LmlabError
from lmlab.tokenizers.chat import FALLBACK_TEMPLATE, render_chat

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <there> & “you”"}]


def test_chatml_template_renders_turns_and_generation_prompt():
    assert render_chat(CHATML, MESSAGES) == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                                             "<|im_start|>user\nHi <there> & “you”<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat(CHATML, MESSAGES, add_generation_prompt=False).endswith("<|im_end|>\n")


def test_blocks_are_trimmed_like_hf():
    template = "{% for m in messages %}\n  {% if m['role'] == 'user' %}\n[{{ m['content'] }}]\n  {% endif %}\n{% endfor %}"
    assert render_chat(template, MESSAGES) == "[Hi <there> & “you”]\n"


def test_special_tokens_and_helpers_are_available():
    template = ("{{ bos_token }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
                "{{ m | tojson }}{% endfor %}")
    assert render_chat(template, MESSAGES, bos_token="<s>") == '<s>{"role": "system", "content": "Be brief."}'


def test_raise_exception_becomes_one_clear_error():
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('the first turn must be the user') }}{% endif %}"
    with pytest.raises(LmlabError, match="the first turn must be the user"):
        render_chat(template, MESSAGES)


def test_templates_cannot_reach_python_internals():
    with pytest.raises(LmlabError, match="chat template"):
        render_chat("{{ messages.__class__.__mro__[1].__subclasses__() }}", MESSAGES)
    with pytest.raises(LmlabError, match="chat template"):
        render_chat("{{ messages.append(1) }}", MESSAGES)


def test_broken_template_and_bad_messages_are_clear_errors():
    with pytest.raises(LmlabError, match="not valid jinja2"):
        render_chat("{% for m in messages %}", MESSAGES)
    with pytest.raises(LmlabError, match="role"):
        render_chat(CHATML, [{"text": "hi"}])


def test_models_without_a_template_get_the_fallback():
    assert render_chat(None, MESSAGES) == render_chat(FALLBACK_TEMPLATE, MESSAGES)
    assert render_chat(None, MESSAGES) == "System: Be brief.\n\nUser: Hi <there> & “you”\n\nAssistant:"
