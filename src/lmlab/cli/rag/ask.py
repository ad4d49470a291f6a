"""`lmlab rag ask`: retrieve the passages closest to a question and answer it with them in the prompt."""

import argparse
import json
import sys
from dataclasses import replace

from lmlab.cli.common.model_dtype import add_dtype_arg
from lmlab.cli.generate import add_sampling_args, sampling_config
from lmlab.errors import LmlabError
from lmlab.rag.choices import SEARCHES

DEFAULT_TOP = 3


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "ask", help="answer a question with passages retrieved from an index",
        description="Embed the question, take the --top passages of the index most similar to it (cosine), put them "
                    "in the prompt (the last user message becomes: the instruction, the numbered passages with "
                    "their sources, then the question) and let --model answer through its chat template. "
                    "Without --model, print the retrieved passages only.",
        epilog="examples:\n  lmlab rag ask --index notes.index --question \"Who built the mill?\"\n"
               "  lmlab rag ask --index notes.index --model smollm2-135m-instruct --top 3 --greedy "
               "--question \"Who built the mill?\"",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_retrieval_args(p)
    p.add_argument("--question", required=True, help="the question")
    p.add_argument("--model", help="the chat model that answers (zoo name, directory, .gguf); default: none, "
                                   "print the passages")
    add_dtype_arg(p)
    add_sampling_args(p, max_new_tokens=128)
    p.add_argument("--json", action="store_true", help="print one JSON object: question, answer, sources")
    p.set_defaults(run=run)


def add_retrieval_args(p: argparse.ArgumentParser) -> None:
    """--index, --top, --search, --encoder."""
    p.add_argument("--index", required=True, help="an index directory written by lmlab rag index")
    p.add_argument("--top", type=int, default=DEFAULT_TOP, help=f"passages to retrieve (default {DEFAULT_TOP})")
    p.add_argument("--search", choices=SEARCHES, default="auto",
                   help="exact cosine top-k, hnsw (faiss; approximate), or auto: exact below 1,000,000 passages")
    p.add_argument("--encoder", help="embed the question with this encoder (default: the index's own)")


def run(args) -> None:
    from lmlab.generation.batch import check_token_ids
    from lmlab.generation.generate import generate_batch
    from lmlab.models.load import load
    from lmlab.rag.prompt import with_passages
    from lmlab.rag.retrieve import load_retriever
    from lmlab.tokenizers.chat import chat_prompt, chat_stop_strings

    if args.top < 1:
        raise LmlabError(f"--top {args.top} must be at least 1")
    config = sampling_config(args) if args.model else None
    retriever = load_retriever(args.index, args.encoder, args.search)
    hits = retriever.retrieve([args.question], args.top)[0]
    answer = None
    if args.model:
        model, tokenizer = load(args.model, args.dtype, activations=args.activations)
        messages = with_passages([{"role": "user", "content": args.question}], hits)
        prompt_ids = tokenizer.encode(chat_prompt(tokenizer, messages))
        room = model.config.context_length - len(prompt_ids)
        if room < 1:
            raise LmlabError(f"the question and its {len(hits)} passages ({len(prompt_ids)} tokens) fill the model's "
                             f"context of {model.config.context_length}; use a smaller --top")
        check_token_ids(model, [prompt_ids])
        config = replace(config, max_new_tokens=min(room, config.max_new_tokens), eos_id=tokenizer.stop_ids,
                         stop_strings=config.stop_strings + chat_stop_strings(tokenizer))
        print(f"answering with {len(hits)} passages ({len(prompt_ids)} prompt tokens)", file=sys.stderr)
        answer = generate_batch(model.eval(), [prompt_ids], config, tokenizer)[0].text.strip()
    if args.json:
        print(json.dumps({"question": args.question, "answer": answer, "sources": [h.as_dict() for h in hits]}))
        return
    if answer is not None:
        print(answer + "\n")
    for i, hit in enumerate(hits, start=1):
        print(f"[{i}] {hit.score:.4f}  {hit.passage.source}#{hit.passage.position}  {hit.passage.text}")
