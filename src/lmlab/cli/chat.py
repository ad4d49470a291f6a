"""`lmlab chat`: talk to a chat model, one turn at a time, with the whole history in its template.

Each turn renders every message so far with the model's own chat template, generates until the
tokenizer's end-of-turn token, and streams the reply. A model without a template gets plain
"User: … / Assistant: …" turns, and its reply also ends where it starts writing the next "User:";
chat says so on stderr, since such a model (a base model) continues text rather than answering.
With stdin piped, each message is echoed as "> message" and each reply is followed by a blank line,
so the transcript shows the turns.
"""

import argparse
import sys
from dataclasses import replace

from lmlab.cli.common.adapter_arg import add_adapter_arg, load_decoder
from lmlab.cli.common.model_dtype import add_dtype_arg, say_gguf_kernels
from lmlab.cli.generate import add_compile_arg, add_sampling_args, load_draft, sampling_config
from lmlab.errors import LmlabError

EXIT = "/exit"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "chat", help="chat with a model (interactive, or one --prompt)",
        description="Chat using the model's chat template. Without --prompt, reads one message per line from "
                    f"stdin until end of input or '{EXIT}'; the reply streams as it is generated.",
        epilog="examples:\n"
               "  lmlab chat --model smollm2-135m-instruct --system 'You are terse.' --prompt 'Name a colour.'\n"
               "  printf 'Hi!\\nWhat did I just say?\\n' | lmlab chat --model M --greedy",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory, lmlab run directory, .gguf file or zoo name")
    add_dtype_arg(p)
    add_adapter_arg(p)
    add_compile_arg(p)
    p.add_argument("--system", help="a system message to start the conversation with")
    p.add_argument("--prompt", help="answer this one message and exit")
    p.add_argument("--chat-template", metavar="NAME",
                   help="use the model's chat template of this name (models may ship several, e.g. tool_use); "
                        "default: the one named 'default'")
    add_sampling_args(p, max_new_tokens=256)
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.generation.compiled import compiled_decoder
    from lmlab.tokenizers.chat import chat_stop_strings

    config = sampling_config(args)
    model, tokenizer = load_decoder(args)
    say_gguf_kernels(args.model, args.dtype, model)
    if args.compile:
        model = compiled_decoder(model)
    tokenizer = tokenizer.with_chat_template(args.chat_template)
    config = replace(config, eos_id=tokenizer.stop_ids,
                     stop_strings=config.stop_strings + chat_stop_strings(tokenizer))
    note = None if tokenizer.chat_template else (
        f"lmlab: note: {args.model} has no chat template; using plain 'User: … / Assistant: …' turns, which a base "
        "model continues rather than answers")
    draft = load_draft(args, model, tokenizer)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    piped = args.prompt is None and not sys.stdin.isatty()
    for line in [args.prompt] if args.prompt is not None else _user_lines():
        if piped:
            print(f"> {line}", flush=True)
        messages.append({"role": "user", "content": line})
        reply = _reply(model, tokenizer, messages, config, note, draft)
        note = None  # said once, before the first reply
        messages.append({"role": "assistant", "content": reply})
        if piped:
            print(flush=True)


def _user_lines():
    """Lines typed (or piped) on stdin, until end of input or /exit; blank lines are skipped."""
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == EXIT:
            return
        if line.strip():
            yield line.rstrip("\n")


def _reply(model, tokenizer, messages: list[dict], config, note: str | None = None, draft=None) -> str:
    """Generate, print (as it streams) and return the assistant's answer to `messages`; `note` goes to
    stderr once the prompt is known to fit the model, before the reply. `draft`: `--speculate MODEL`'s."""
    from lmlab.generation.batch import check_token_ids
    from lmlab.generation.generate import stream_text
    from lmlab.tokenizers.chat import chat_prompt

    prompt_ids = tokenizer.encode(chat_prompt(tokenizer, messages))
    room = model.config.context_length - len(prompt_ids)
    if room < 1:
        raise LmlabError(f"the conversation ({len(prompt_ids)} tokens) fills the model's context of "
                         f"{model.config.context_length} tokens; start a new chat or use a shorter --system")
    config = replace(config, max_new_tokens=min(room, config.max_new_tokens))
    check_token_ids(model, [prompt_ids])
    if note:
        print(note, file=sys.stderr)
    pieces = []
    for piece in stream_text(model, tokenizer, prompt_ids, config, draft_model=draft):
        if not pieces:
            piece = piece.lstrip()  # templates often end in a space or newline before the answer
            if not piece:
                continue
        pieces.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(pieces)
