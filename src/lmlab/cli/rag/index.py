"""`lmlab rag index`: split a corpus into passages, embed them with a sentence encoder, save the index."""

import argparse
import json
import sys
import time
from pathlib import Path

from lmlab.errors import LmlabError
from lmlab.io.outputs import check_dir_output
from lmlab.rag.passages import MAX_WORDS, OVERLAP

DEFAULT_ENCODER = "all-minilm-l6-v2"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "index", help="embed a corpus's passages into a retrieval index",
        description="Split a corpus (a text file, a directory of .txt/.md files, or a JSON Lines file of "
                    "{\"text\", \"source\"}) into passages of whole sentences, embed each with a sentence encoder "
                    "(mean-pooled, unit length) and save the index as a directory: index.json, passages.jsonl, "
                    "embeddings.safetensors.",
        epilog="example:\n  lmlab rag index --data notes/ --out notes.index\n"
               "  lmlab rag ask --index notes.index --model smollm2-135m-instruct --question \"…\"",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a text file, a directory of .txt/.md files, or a .jsonl file")
    p.add_argument("--out", required=True, help="the index directory to write")
    add_encoder_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object: documents, passages, dim, seconds")
    p.set_defaults(run=run)


def add_encoder_args(p: argparse.ArgumentParser) -> None:
    """--encoder, --passage-words, --overlap, --batch-size: how passages are cut and embedded."""
    p.add_argument("--encoder", default=DEFAULT_ENCODER,
                   help=f"sentence encoder: zoo name or BERT directory (default {DEFAULT_ENCODER})")
    p.add_argument("--passage-words", type=int, default=MAX_WORDS,
                   help=f"most words in a passage (default {MAX_WORDS})")
    p.add_argument("--overlap", type=int, default=OVERLAP,
                   help=f"words a passage repeats from the one before, whole sentences (default {OVERLAP})")
    p.add_argument("--batch-size", type=int, default=32, help="passages per forward pass (default 32)")


def check_encoder_args(args) -> None:
    """The sizes of --passage-words, --overlap, --batch-size, before any work."""
    from lmlab.rag.passages import check_sizes

    check_sizes(args.passage_words, args.overlap)
    if args.batch_size < 1:
        raise LmlabError(f"--batch-size {args.batch_size} must be at least 1")


def run(args) -> None:
    from lmlab.models.load import load_encoder
    from lmlab.rag.index import build_index, save_index
    from lmlab.rag.passages import read_corpus, split_corpus

    check_encoder_args(args)
    check_dir_output(args.out, "--out")
    started = time.perf_counter()
    documents = read_corpus(args.data)
    passages = split_corpus(documents, args.passage_words, args.overlap)
    encoder, tokenizer = load_encoder(args.encoder)
    print(f"embedding {len(passages):,} passages of {len(documents):,} documents with {args.encoder}", file=sys.stderr)
    name = str(Path(args.encoder).resolve()) if Path(args.encoder).exists() else args.encoder  # a path from anywhere
    index = build_index(encoder.eval(), tokenizer, passages, name, args.passage_words, args.overlap,
                        args.batch_size, show_progress=True)
    save_index(index, args.out)
    result = {"index": args.out, "documents": len(documents), "passages": len(passages),
              "dim": index.embeddings.shape[1], "encoder": args.encoder,
              "seconds": round(time.perf_counter() - started, 2)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.out}: {result['passages']:,} passages of {result['documents']:,} documents, "
              f"{result['dim']}-dim embeddings by {args.encoder} ({result['seconds']:.1f} s)")
