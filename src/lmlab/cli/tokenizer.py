"""`lmlab tokenizer train`: a byte-level BPE (decoders) or a WordPiece (BERT encoders) tokenizer from your text."""

import argparse
from pathlib import Path

from lmlab.data.corpora import EMBEDDED
from lmlab.io.outputs import check_file_output
from lmlab.tokenizers.bpe import TOKENIZER_FILE, save_tokenizer, train_bpe, warn_if_smaller


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("tokenizer", help="train tokenizers")
    sub = p.add_subparsers(dest="tokenizer_command", required=True)
    t = sub.add_parser("train", help="train a byte-level BPE (default) or a BERT WordPiece on text")
    t.add_argument("--data", required=True, help=f"text file, directory, .jsonl, or one of {list(EMBEDDED)}")
    t.add_argument("--vocab-size", type=int, required=True, help="tokens in the trained vocabulary")
    t.add_argument("--out", required=True, help="directory to write tokenizer.json into")
    t.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe",
                   help="bpe: byte-level BPE, lossless (decoders); wordpiece: BERT's, with [CLS] [SEP] [MASK] (encoders)")
    t.add_argument("--cased", action="store_true", help="wordpiece: keep upper case (and accents)")
    t.add_argument("--strip-accents", action=argparse.BooleanOptionalAction, default=None,
                   help="wordpiece: strip accents (default: when lower-casing)")
    t.set_defaults(run=run)


def run(args) -> None:
    from lmlab.data.corpora import load_corpus
    from lmlab.tokenizers.wordpiece import train_wordpiece

    check_file_output(Path(args.out) / TOKENIZER_FILE, "--out")
    texts = load_corpus(args.data)
    if args.kind == "wordpiece":
        tokenizer = train_wordpiece(texts, args.vocab_size, lowercase=not args.cased, strip_accents=args.strip_accents)
    else:
        tokenizer = train_bpe(texts, args.vocab_size)
    warn_if_smaller(tokenizer.get_vocab_size(), args.vocab_size)
    path = save_tokenizer(tokenizer, args.out)
    kind = "WordPiece" if args.kind == "wordpiece" else "byte-level BPE"
    print(f"trained a {tokenizer.get_vocab_size()}-token {kind}; saved {path}")
