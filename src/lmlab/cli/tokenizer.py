"""`lmlab tokenizer train`: a byte-level BPE tokenizer from your text."""

from lmlab.data.corpora import EMBEDDED, load_corpus
from lmlab.tokenizers.bpe import save_tokenizer, train_bpe


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("tokenizer", help="train tokenizers")
    sub = p.add_subparsers(dest="tokenizer_command", required=True)
    t = sub.add_parser("train", help="train a byte-level BPE on text")
    t.add_argument("--data", required=True, help=f"text file, directory, .jsonl, or one of {list(EMBEDDED)}")
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--out", required=True, help="directory to write tokenizer.json into")
    t.set_defaults(run=run)


def run(args) -> None:
    tokenizer = train_bpe(load_corpus(args.data), args.vocab_size)
    path = save_tokenizer(tokenizer, args.out)
    print(f"trained a {tokenizer.get_vocab_size()}-token byte-level BPE; saved {path}")
