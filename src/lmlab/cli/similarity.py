"""`lmlab similarity`: rank sentences by cosine similarity to a query, with sentence embeddings."""

import argparse
from pathlib import Path

from lmlab.cli.common.vocabulary import alias
from lmlab.errors import LmlabError
from lmlab.io.lines import read_lines


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "similarity", help="rank sentences by cosine similarity to a query",
        description="Embed a query and candidate sentences with a BERT encoder (mean-pooled, L2-normalised) "
                    "and print the candidates from most to least similar, with their cosine similarity.",
        epilog="example:\n  lmlab similarity --model all-minilm-l6-v2 --query \"How do I bake bread?\" "
               "--data faq.txt --top 3",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_and_texts(p)
    p.add_argument("--query", required=True, help="the sentence to compare the others with")
    p.add_argument("--top", type=int, help="print only the K most similar")
    p.set_defaults(run=run)


def add_model_and_texts(p: argparse.ArgumentParser) -> None:
    """--model, and the sentences: --text T … or --data F (one sentence per line); --batch-size."""
    p.add_argument("--model", required=True,
                   help="BERT encoder: zoo name (all-minilm-l6-v2), HF BERT directory, or an lmlab run directory")
    texts = p.add_mutually_exclusive_group(required=True)
    texts.add_argument("--text", nargs="+", help="the sentences")
    alias(texts, "--data", "--file", dest="data", help="a text file, one sentence per line (blank lines skipped)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")


def encoder_and_texts(args):
    """(encoder, tokenizer, sentences) from the shared flags."""
    from lmlab.models.load import load_encoder

    if args.batch_size < 1:
        raise LmlabError(f"--batch-size {args.batch_size} must be at least 1")
    if args.text is not None:
        texts = args.text
    else:
        if not Path(args.data).is_file():
            raise LmlabError(f"'{args.data}' is not a file; pass a UTF-8 text file, one sentence per line")
        texts = [line.strip() for _, line in read_lines(args.data) if line.strip()]
        if not texts:
            raise LmlabError(f"'{args.data}' holds no sentences; write one sentence per line")
    model = Path(args.model)
    if (model / "model" / "config.json").is_file():  # a run directory (lmlab finetune, lmlab train)
        model = model / "model"
    encoder, tokenizer = load_encoder(model)
    return encoder, tokenizer, texts


def run(args) -> None:
    from lmlab.inference.embeddings import sentence_embeddings

    encoder, tokenizer, texts = encoder_and_texts(args)
    if args.top is not None and args.top < 1:
        raise LmlabError(f"--top {args.top} must be at least 1")
    embeddings = sentence_embeddings(encoder, tokenizer, [args.query, *texts], args.batch_size, show_progress=True)
    query, candidates = embeddings.split([1, len(texts)])
    cosines = (candidates @ query[0]).tolist()  # (N,): unit vectors, so dot = cosine
    ranked = sorted(range(len(texts)), key=lambda i: -cosines[i])[:args.top]
    for rank, i in enumerate(ranked, start=1):
        print(f"{rank:>3}  {cosines[i]:.4f}  {texts[i]}")
