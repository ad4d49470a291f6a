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


def modelfile(tokenizer: TextTokenizer, gguf_name: str) -> tuple[str, bool]:
    """(the Modelfile's text for the GGUF file named `gguf_name` beside it, whether it holds a TEMPLATE)."""
    template = go_template(tokenizer)
    token = tokenizer.backend.id_to_token
    lines = [f"FROM ./{gguf_name}"]
    if template is not None:
        lines.append(f'TEMPLATE """{template}"""')
    lines += [f"PARAMETER stop {_quoted(token(i))}" for i in tokenizer.stop_ids]
    return "\n".join(lines) + "\n", template is not None


def write_modelfile(tokenizer: TextTokenizer, gguf_path: Path) -> tuple[Path, bool]:
    """Write `Modelfile` beside `gguf_path` (atomically); (its path, whether it holds a TEMPLATE)."""
    text, has_template = modelfile(tokenizer, gguf_path.name)
    path = gguf_path.parent / "Modelfile"
    atomic_write_text(path, text)
    return path, has_template


def go_template(tokenizer: TextTokenizer) -> str | None:
    """The chat template as an Ollama Go template, or None where it is not a fixed wrap per message."""
    if tokenizer.chat_template is None:
        return None
    specials = {f"{role}_token": tokenizer.backend.id_to_token(i) for role, i in
                (("bos", tokenizer.bos_id), ("eos", tokenizer.eos_id)) if i is not None}

    def render(messages: list[dict], opening: bool) -> str:
        return render_chat(tokenizer.chat_template, messages, opening, **specials)

    try:
        head = render([], False)
        wraps = {role: _wrap(render([{"role": role, "content": MARK.format(role)}], False), head, role)
                 for role in ROLES}
        user = render([{"role": "user", "content": MARK.format("user")}], True)
        opening = user.removeprefix(head + wraps["user"].replace("\x00", MARK.format("user")))
        chat = [{"role": role, "content": f"{role} says {i}"} for i, role in enumerate((*ROLES, "user"))]
        expected = head + "".join(wraps[m["role"]].replace("\x00", m["content"]) for m in chat) + opening
        if render(chat, True) != expected:
            return None
    except (LmlabError, ValueError):
        return None
    pieces = [head, opening, *(p for wrap in wraps.values() for p in wrap.split("\x00"))]
    if any("{{" in p or "}}" in p or '"""' in p for p in pieces):
        return None
    branches = "".join(f'{{{{ {"if" if i == 0 else "else if"} eq .Role "{role}" }}}}'
                       + wraps[role].replace("\x00", "{{ .Content }}") for i, role in enumerate(ROLES))
    return f"{head}{{{{ range .Messages }}}}{branches}{{{{ end }}}}{{{{ end }}}}{opening}"


def _wrap(rendered: str, head: str, role: str) -> str:
    """A role's texts around a message, with "\\x00" where the content goes."""
    mark = MARK.format(role)
    if not rendered.startswith(head) or rendered.count(mark) != 1:
        raise ValueError(role)
    return rendered[len(head):].replace(mark, "\x00")


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
