"""`lmlab serve`: a model behind an OpenAI-compatible HTTP API (and a web chat at /), until Ctrl-C."""

import argparse
import errno
import os
import socket
import sys
from pathlib import Path

from lmlab.cli.common.model_dtype import add_dtype_arg, say_gguf_kernels
from lmlab.cli.generate import add_speculation_args, draft_tokens
from lmlab.config_checks import MAX_RAG_TOP
from lmlab.errors import LmlabError

MAX_SLOTS = 1024  # rows of one decoding step; far past where a bigger batch still adds tokens per second
API_KEY_ENV = "LMLAB_API_KEY"  # where --api-key is read from when not given (so it is not in `ps`)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API, with a web chat",
        description="Serve a decoder at /v1/completions and /v1/chat/completions (streamed or not), an "
                    "encoder at /v1/embeddings, /v1/models, /health and Prometheus /metrics, and a chat page "
                    "at /. Requests are decoded together by a continuous-batching engine.",
        epilog="examples:\n"
               "  lmlab serve --model smollm2-135m-instruct\n"
               "  lmlab serve --model smollm2-135m-instruct --embedding-model all-minilm-l6-v2 --port 8080\n"
               "  lmlab serve --model smollm2-135m-instruct --adapter math=runs/math --adapter chat=runs/chat\n"
               "  lmlab serve --model smollm2-135m-instruct --rag notes.index --rag-top 3\n"
               "  lmlab serve --model smollm2-135m-instruct --speculate lookup --draft-tokens 5\n"
               "then open http://127.0.0.1:8000/ or point an OpenAI client at http://127.0.0.1:8000/v1",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory, lmlab run directory, .gguf file or zoo name")
    p.add_argument("--embedding-model", metavar="E", help="also serve this encoder (directory or zoo name) at "
                                                          "/v1/embeddings")
    p.add_argument("--name", help="the model id clients ask for (default: the zoo name, or the file or "
                                  "directory name of --model)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for "
                                                       "every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header names NAME (repeatable; default: only 127.0.0.1, "
                        "localhost, ::1 and --host; any name when --host is 0.0.0.0 and this is not given)")
    p.add_argument("--api-key", metavar="KEY", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on every route but /health and / (default: "
                        f"${API_KEY_ENV} if set, else no key)")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=DIR",
                   help="also serve this LoRA adapter of --model (an adapter or run directory) as the model id NAME "
                        "(repeatable; NAME= may be left out: the directory's name); a request's `model` picks the "
                        "base or an adapter, and requests to different adapters decode in one batch on the shared "
                        "base weights")
    add_dtype_arg(p)
    p.add_argument("--slots", type=int, default=16, metavar="N",
                   help=f"requests decoded together, 1..{MAX_SLOTS}; more wait their turn (default 16)")
    p.add_argument("--rag", metavar="INDEX",
                   help="retrieve passages from this index (lmlab rag index) into every chat request's last user "
                        "message; a request sends \"rag\": false to go without, or {\"top\": N}; the passages come "
                        "back in the response's \"sources\"")
    p.add_argument("--rag-top", type=int, default=3, metavar="N",
                   help=f"passages per chat request with --rag, 1..{MAX_RAG_TOP} (default 3)")
    p.add_argument("--chat-template", metavar="NAME",
                   help="render chats with the model's template of this name (default: the one named 'default')")
    add_speculation_args(p, "while one request runs, ")
    p.set_defaults(run=run)


def run(args) -> None:
    if not 1 <= args.slots <= MAX_SLOTS:
        raise LmlabError(f"--slots {args.slots} must be in 1..{MAX_SLOTS}")
    if not 1 <= args.rag_top <= MAX_RAG_TOP:
        raise LmlabError(f"--rag-top {args.rag_top} must be in 1..{MAX_RAG_TOP}")
    draft_tokens(args)  # a bad --draft-tokens fails before the port and the model
    if args.api_key is not None and not args.api_key.strip():
        raise LmlabError(f"--api-key (or ${API_KEY_ENV}) is empty; give a key, or leave both unset for none")
    listener = listening_socket(args.host, args.port)  # before the model loads: a port in use fails at once
    try:
        serve(args, listener)
    finally:
        listener.close()


def serve(args, listener: socket.socket) -> None:
    """Load the models and answer on `listener` until Ctrl-C."""
    import uvicorn

    from lmlab.inference.adapters import attach_adapters
    from lmlab.inference.engine import Engine
    from lmlab.inference.guard import access_for
    from lmlab.inference.protocol import HeaderDeadlineProtocol
    from lmlab.inference.server import Embedder, create_app
    from lmlab.models.load import load, load_encoder
    from lmlab.modules.transformer import TransformerDecoder

    retrieval = rag_retrieval(args.rag, args.rag_top) if args.rag else None  # a bad index fails before the model loads
    dtype = args.dtype or ("fp32" if args.adapter else None)  # LoRA adapters run on float weights, not as stored
    model, tokenizer = load(args.model, dtype, activations=args.activations)
    say_gguf_kernels(args.model, dtype, model)
    if not isinstance(model, TransformerDecoder):
        raise LmlabError(f"'{args.model}' is not a transformer decoder; lmlab serve serves transformer decoders "
                         "(GPT-2, Llama, … families)")
    tokenizer = tokenizer.with_chat_template(args.chat_template)
    embedder = None
    if args.embedding_model:
        encoder, encoder_tokenizer = load_encoder(args.embedding_model)
        embedder = Embedder(served_name(args.embedding_model), encoder.eval(), encoder_tokenizer)
    check_cache_fits(model, args.slots)
    name = args.name or served_name(args.model)
    adapters = adapter_flags(args.adapter, name)
    rows = attach_adapters(model, adapters) if adapters else None
    if adapters:
        print(f"serving {len(adapters)} LoRA adapter(s) on the shared base weights, on the float path "
              f"(the fused int8/int4 step has no LoRA): {', '.join(n for n, _ in adapters)}", file=sys.stderr)
    engine = Engine(model, tokenizer, slots=args.slots, adapters=rows, speculation=speculation(args, model, tokenizer))
    access = access_for(args.host, tuple(args.allowed_host), args.api_key and args.api_key.strip())
    app = create_app(engine, tokenizer, name, model.config.context_length, embedder, access,
                     tuple(n for n, _ in adapters), retrieval)
    config = uvicorn.Config(app, host=args.host, port=listener.getsockname()[1], http=HeaderDeadlineProtocol,
                            log_level="info", lifespan="off")
    engine.start()
    try:
        uvicorn.Server(config).run(sockets=[listener])
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: uvicorn has finished the running requests
        pass
    finally:
        engine.close()


def speculation(args, model, tokenizer):
    """The engine's `Speculation` for `model` (a TransformerDecoder) that --speculate asks for (its draft model
    loaded as --dtype), or None."""
    from lmlab.cli.generate import load_draft
    from lmlab.inference.speculation import Speculation

    k = draft_tokens(args)
    if not k:
        return None
    draft = load_draft(args, model, tokenizer)
    print(f"speculating while one request runs: it drafts up to {k} tokens a step by "
          f"{'prompt lookup' if draft is None else args.speculate}, checked in one pass", file=sys.stderr)
    return Speculation(k, draft)


def rag_retrieval(index: str, top: int):
    """The server's `Retrieval` from the index directory `index`, with the encoder that built it."""
    from lmlab.inference.server import Retrieval
    from lmlab.rag.prompt import augment_chat
    from lmlab.rag.retrieve import load_retriever

    retriever = load_retriever(index)
    print(f"retrieving {top} of {len(retriever.index.passages):,} passages per chat request ({retriever.search} "
          f"search, {retriever.index.encoder})", file=sys.stderr)

    def augment(messages: list[dict], top: int) -> tuple[list[dict], list[dict]]:
        messages, hits = augment_chat(retriever, messages, top)
        return messages, [hit.as_dict() for hit in hits]
    return Retrieval(augment, top)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (uvicorn listens on it), or one line saying why it cannot be."""
    if not 0 <= port <= 65535:
        raise LmlabError(f"--port {port} must be in 0..65535")
    try:
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise LmlabError(f"--host {host!r} is not an address of this machine ({e}); use 127.0.0.1 or 0.0.0.0") \
            from None
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as e:
        listener.close()
        fix = "choose another --port (or stop what uses this one)" if e.errno == errno.EADDRINUSE else \
            "check --host (127.0.0.1, 0.0.0.0 or an address of this machine) and --port (below 1024 needs root)"
        raise LmlabError(f"cannot listen on {host}:{port}: {e.strerror}; {fix}") from None
    return listener


def check_cache_fits(model, slots: int) -> None:
    """Refuse a --slots whose KV cache (of `model`, a TransformerDecoder), every slot at the full context, would not fit in this machine's
    memory (the cache grows with the longest running request, up to that)."""
    cfg = model.config
    weight = next(p for p in model.parameters() if p.is_floating_point())
    per_slot = 2 * cfg.n_layers * (cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim * cfg.context_length * \
        weight.element_size()  # keys and values of one row at the full context
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if slots * per_slot > memory:
        raise LmlabError(f"--slots {slots}: the KV cache at the full context ({cfg.context_length} tokens) would "
                         f"take {slots * per_slot / 2**30:.1f} GiB, more than this machine's {memory / 2**30:.1f} GiB; "
                         f"use at most --slots {max(memory // per_slot, 1)}")


def adapter_flags(flags: list[str], base_name: str) -> list[tuple[str, str]]:
    """(name, directory) of each `--adapter NAME=DIR` (or DIR: named by its directory, or its run
    directory for DIR/adapter); one line naming the flag for a name given twice or the base's own."""
    adapters = []
    for flag in flags:
        name, _, directory = flag.partition("=") if "=" in flag else ("", "", flag)
        path = Path(directory)
        name = name or (path.resolve().parent.name if path.name == "adapter" else path.resolve().name)
        if not name or not directory:
            raise LmlabError(f"--adapter {flag!r}: give NAME=DIR (an adapter or run directory)")
        if name == base_name or name in (n for n, _ in adapters):
            raise LmlabError(f"--adapter {flag!r}: the model id '{name}' is already served; give each adapter "
                             "its own NAME=DIR, other than the base's (--name)")
        adapters.append((name, directory))
    return adapters


def served_name(model: str) -> str:
    """The model id of `--model`: a zoo name as it is, a path's last part (a .gguf file without its suffix)."""
    path = Path(model)
    return path.stem if path.suffix == ".gguf" else path.name or model
