"""Chat templates: a list of messages -> the one prompt string a chat model was trained on.

A model ships its own jinja2 template (HF's `chat_template`, GGUF's `tokenizer.chat_template`).
Templates come from model files, so they run in jinja2's immutable sandbox (no attribute tricks
reach Python internals, nothing a template does can change our objects) with a time and size
budget (`lmlab.tokenizers.sandbox`). The environment matches HF's (trim_blocks, lstrip_blocks,
loop controls, `raise_exception`, `tojson`, `strftime_now`), so a template renders here exactly
as it does in transformers.
"""

import functools
import json
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols

from lmlab.errors import LmlabError
from lmlab.tokenizers.sandbox import BoundedSandbox, render_bounded
from lmlab.tokenizers.text import TextTokenizer

# For models that come without a template (base models): plain "Role: text" turns.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
FALLBACK_STOP = "\nUser:"  # where a model on the fallback template starts the user's next turn


def render_chat(template: str | None, messages: list[dict], add_generation_prompt: bool = True, **specials) -> str:
    """The prompt for `messages` ([{"role": …, "content": …}, …]) under `template` (None = fallback).

    `add_generation_prompt` ends the prompt with the opening of an assistant turn; `specials`
    (bos_token="<s>", …) are passed to the template as variables, as HF does.
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                 for m in messages):
        raise LmlabError("messages must be a list of {'role': …, 'content': …} dicts")
    compiled = _compile(template or FALLBACK_TEMPLATE)
    try:
        return render_bounded(compiled, messages=messages, add_generation_prompt=add_generation_prompt, **specials)
    except LmlabError:
        raise
    except jinja2.TemplateError as e:  # includes raise_exception and sandbox violations
        raise LmlabError(f"the chat template failed on these messages: {_first_line(e)}") from None
    except Exception as e:  # the template's own mistake (1 / 0, 'a' - 1, deep recursion …), not lmlab's
        raise LmlabError(f"the chat template failed on these messages: {type(e).__name__}: {_first_line(e)}") from None


def chat_prompt(tokenizer: TextTokenizer, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """`render_chat` with the tokenizer's own template and its bos/eos/pad tokens as variables."""
    specials = {f"{role}_token": tokenizer.backend.id_to_token(i)
                for role, i in (("bos", tokenizer.bos_id), ("eos", tokenizer.eos_id), ("pad", tokenizer.pad_id))
                if i is not None}
    if tokenizer.chat_template is None and tokenizer.chat_templates:
        raise LmlabError(f"the model's chat templates ({', '.join(tokenizer.chat_templates)}) include none named "
                         "'default'; choose one with --chat-template NAME")
    return render_chat(tokenizer.chat_template, messages, add_generation_prompt, **specials)


def chat_stop_strings(tokenizer: TextTokenizer) -> tuple[str, ...]:
    """The stop strings a reply needs besides the tokenizer's stop ids: a model on the fallback template
    has no end-of-turn token, so its reply ends where it starts writing the user's next turn."""
    return () if tokenizer.chat_template else (FALLBACK_STOP,)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = BoundedSandbox(filters={"tojson": _tojson}, globals={"raise_exception": _raise_exception,
                                                               "strftime_now": _strftime_now},
                         trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise LmlabError(f"the chat template is not valid jinja2 (line {e.lineno}: {e.message}); fix the "
                         "model's chat_template") from None
    except RecursionError:  # jinja2 parses and compiles recursively
        raise LmlabError("the chat template nests its blocks or expressions too deeply to compile; fix the "
                         "model's chat_template") from None


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _strftime_now(fmt: str) -> str:
    """The current local time as `fmt` says (Llama 3's templates print today's date)."""
    return datetime.now().strftime(fmt)


def _raise_exception(message: str):
    """Lets a template reject input, e.g. `{{ raise_exception('roles must alternate') }}`."""
    raise jinja2.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """JSON without HTML escaping (jinja2's own `tojson` escapes <, >, &, which chat prompts must keep)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
