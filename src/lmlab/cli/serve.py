"""`lmlab serve`: a model behind an OpenAI-compatible HTTP API (and a web chat at /), until Ctrl-C."""

import argparse
from pathlib import Path

from lmlab.cli.model_dtype import add_dtype_arg
from lmlab.errors import LmlabError
from lmlab.models.load import load, load_encoder
from lmlab.modules.transformer import TransformerDecoder


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API, with a web chat",
        description="Serve a decoder at /v1/completions and /v1/chat/completions (streamed or not), an "
                    "encoder at /v1/embeddings, /v1/models, /health and Prometheus /metrics, and a chat page "
                    "at /. Requests are decoded together by a continuous-batching engine.",
        epilog="examples:\n"
               "  lmlab serve --model smollm2-135m-instruct\n"
               "  lmlab serve --model smollm2-135m-instruct --embedding-model all-minilm-l6-v2 --port 8080\n"
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
    add_dtype_arg(p)
    p.add_argument("--slots", type=int, default=16, metavar="N",
                   help="requests decoded together; more wait their turn (default 16)")
    p.add_argument("--chat-template", metavar="NAME",
                   help="render chats with the model's template of this name (default: the one named 'default')")
    p.set_defaults(run=run)


def run(args) -> None:
    import uvicorn

    from lmlab.inference.engine import Engine
    from lmlab.inference.server import Embedder, create_app

    if not 0 <= args.port <= 65535:
        raise LmlabError(f"--port {args.port} must be in 0..65535")
    if args.slots < 1:
        raise LmlabError(f"--slots {args.slots} must be at least 1")
    model, tokenizer = load(args.model, args.dtype)
    if not isinstance(model, TransformerDecoder):
        raise LmlabError(f"'{args.model}' is not a transformer decoder; lmlab serve serves transformer decoders "
                         "(GPT-2, Llama, … families)")
    tokenizer = tokenizer.with_chat_template(args.chat_template)
    embedder = None
    if args.embedding_model:
        encoder, encoder_tokenizer = load_encoder(args.embedding_model)
        embedder = Embedder(served_name(args.embedding_model), encoder.eval(), encoder_tokenizer)
    engine = Engine(model, tokenizer, slots=args.slots)
    name = args.name or served_name(args.model)
    app = create_app(engine, tokenizer, name, model.config.context_length, embedder)
    engine.start()
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info", lifespan="off")
    finally:
        engine.close()


def served_name(model: str) -> str:
    """The model id of `--model`: a zoo name as it is, a path's last part (a .gguf file without its suffix)."""
    path = Path(model)
    return path.stem if path.suffix == ".gguf" else path.name or model
