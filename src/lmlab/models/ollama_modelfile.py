"""An Ollama `Modelfile` for a GGUF file lmlab wrote: `ollama create NAME -f Modelfile` then serves it.

It says FROM the file beside it, the chat TEMPLATE in Ollama's Go template syntax, and a PARAMETER stop for
each token that ends a turn. Ollama cannot run a Jinja chat template, so the template is translated where it
is simple: a fixed text before the chat, each message wrapped in its role's own fixed texts, and the opening of
the assistant's turn at the end (ChatML, Llama 3, Gemma, Phi-3, Zephyr and lmlab's own are). Those texts are
found by rendering the template on marked messages, and the translation must render a test conversation exactly
as the template does; a template that is not of that shape gets no TEMPLATE line (llama.cpp still reads the
original from the GGUF file's tokenizer.chat_template), and the caller says so.
"""

from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_write_text
from lmlab.tokenizers.chat import render_chat
from lmlab.tokenizers.text import TextTokenizer

ROLES = ("system", "user", "assistant")
MARK = "\x07{}\x07"  # a message's content while the template is taken apart: text no template adds itself
SLOT = "\x00"  # where a message's content goes in its role's wrap


def modelfile(tokenizer: TextTokenizer, gguf_name: str) -> tuple[str, bool]:
    """(the Modelfile's text for the GGUF file named `gguf_name` beside it, whether it holds a TEMPLATE)."""
    translated = go_template(tokenizer)
    token = tokenizer.backend.id_to_token
    lines = [f"FROM ./{gguf_name}"]
    if translated is not None:
        template, system = translated
        lines.append(f'TEMPLATE """{template}"""')
        lines += [f'SYSTEM """{system}"""'] if system else []
    lines += [f"PARAMETER stop {_quoted(token(i))}" for i in tokenizer.stop_ids]
    return "\n".join(lines) + "\n", translated is not None


def write_modelfile(tokenizer: TextTokenizer, gguf_path: Path) -> tuple[Path, bool]:
    """Write `Modelfile` beside `gguf_path` (atomically); (its path, whether it holds a TEMPLATE)."""
    text, has_template = modelfile(tokenizer, gguf_path.name)
    path = gguf_path.parent / "Modelfile"
    atomic_write_text(path, text)
    return path, has_template


def go_template(tokenizer: TextTokenizer) -> tuple[str, str] | None:
    """(the chat template as an Ollama Go template, the system message it puts first when a chat has none, or
    ""); None where the template is not a fixed wrap per message."""
    if tokenizer.chat_template is None:
        return None
    specials = {f"{role}_token": tokenizer.backend.id_to_token(i) for role, i in
                (("bos", tokenizer.bos_id), ("eos", tokenizer.eos_id)) if i is not None}

    def render(messages: list[dict], opening: bool = False) -> str:
        return render_chat(tokenizer.chat_template, messages, opening, **specials)

    try:
        head, wraps, system, opening = _parts(render)
        for chat in ([{"role": role, "content": f"{role} says {i}"} for i, role in enumerate((*ROLES, "user"))],
                     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]):
            shown = chat if chat[0]["role"] == "system" or not system else [{"role": "system", "content": system}, *chat]
            if render(chat, True) != head + "".join(wraps[m["role"]].replace(SLOT, m["content"]) for m in shown) + opening:
                return None
    except (LmlabError, ValueError):
        return None
    pieces = [head, opening, system, *(p for wrap in wraps.values() for p in wrap.split(SLOT))]
    if any("{{" in p or "}}" in p or '"""' in p for p in pieces):
        return None
    branches = "".join(f'{{{{ {"if" if i == 0 else "else if"} eq .Role "{role}" }}}}'
                       + wraps[role].replace(SLOT, "{{ .Content }}") for i, role in enumerate(ROLES))
    return f"{head}{{{{ range .Messages }}}}{branches}{{{{ end }}}}{{{{ end }}}}{opening}", system


def _parts(render) -> tuple[str, dict[str, str], str, str]:
    """(the text before the chat, each role's texts around a message with SLOT for its content, the system message
    put first when a chat has none, the assistant's opening), found by rendering marked messages."""
    head = render([])
    system = {"role": "system", "content": MARK.format("system")}
    wraps = {"system": _after(render([system]), head, "system")}
    before = head + wraps["system"].replace(SLOT, system["content"])
    for role in ROLES[1:]:
        wraps[role] = _after(render([system, {"role": role, "content": MARK.format(role)}]), before, role)
    user = {"role": "user", "content": MARK.format("user")}
    alone = _after(render([user]), head, "user")
    default = alone.removesuffix(wraps["user"])  # what the template puts before a chat without a system message
    pre, post = wraps["system"].split(SLOT)
    if len(alone) == len(default) or (default and not (default.startswith(pre) and default.endswith(post))):
        raise ValueError("user")
    prompt, closed = render([user], True), head + alone.replace(SLOT, user["content"])
    if not prompt.startswith(closed):
        raise ValueError("opening")
    return head, wraps, default[len(pre):len(default) - len(post)] if default else "", prompt[len(closed):]


def _after(rendered: str, before: str, role: str) -> str:
    """What `rendered` adds after `before`, with SLOT where the role's marked content is."""
    mark = MARK.format(role)
    if not rendered.startswith(before) or rendered.count(mark) != before.count(mark) + 1:
        raise ValueError(role)
    return rendered[len(before):].replace(mark, SLOT)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
