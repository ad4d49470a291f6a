"""`lmlab embed`: sentence embeddings from a BERT encoder (mean over real tokens, L2-normalised)."""

import argparse
import json

from lmlab.cli.similarity import add_model_and_texts, encoder_and_texts


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "embed", help="print sentence embeddings (mean-pooled, L2-normalised)",
        description="Embed sentences with a BERT encoder: the mean of the last hidden states over real tokens, "
                    "scaled to length 1, so a dot product of two embeddings is their cosine similarity. Prints "
                    "one line per sentence (the numbers), or JSON lines with --json.",
        epilog="examples:\n  lmlab embed --model all-minilm-l6-v2 --text \"A cat sat.\" \"A dog ran.\"\n"
               "  lmlab embed --model all-minilm-l6-v2 --data sentences.txt --json > embeddings.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_and_texts(p)
    p.add_argument("--json", action="store_true", help="print {\"text\": …, \"embedding\": […]} per line")
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.inference.embeddings import sentence_embeddings

    encoder, tokenizer, texts = encoder_and_texts(args)
    embeddings = sentence_embeddings(encoder, tokenizer, texts, args.batch_size, show_progress=True)  # (N, C)
    for text, vector in zip(texts, embeddings.tolist()):
        if args.json:
            print(json.dumps({"text": text, "embedding": [round(x, 7) for x in vector]}))
        else:
            print(" ".join(f"{x:.7f}" for x in vector))
