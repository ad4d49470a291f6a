"""`lmlab train --arch ngram` (its flags and runner) and `lmlab ngram export|import` (ARPA files)."""

import argparse
import time
from pathlib import Path

from lmlab.cli.common.config_flags import flag_fields
from lmlab.config import ModelConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_dir_output, check_file_output, check_run_dir
from lmlab.models.ngram.smoothings import SMOOTHINGS
from lmlab.tokenizers.bpe import load_tokenizer
from lmlab.tokenizers.text import TextTokenizer

DEFAULT_ORDER = 3
# `lmlab train` flags that mean the same for an n-gram model; every other one is for transformers.
TRAIN_FLAGS = ("order", "smoothing", "add_k", "discount")  # the flags add_train_flags adds
SHARED_TRAIN_FLAGS = {"vocab_size", "block_size", "val_fraction", "seed"}
UNSET = {"resume": False, "device": "auto"}  # flags whose "not given" value is not None


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """The `--arch ngram` group of `lmlab train`."""
    g = parser.add_argument_group("n-gram settings (--arch ngram; also uses --vocab-size --block-size "
                                  "--val-fraction --seed)")
    g.add_argument("--order", type=int, metavar="N", help=f"n, the n-gram order (default {DEFAULT_ORDER})")
    g.add_argument("--smoothing", choices=[s for s in SMOOTHINGS if s != "arpa"],
                   help="kn (default), mkn, addk, mle or stupid")
    g.add_argument("--add-k", type=float, metavar="K", help="pseudo-count for --smoothing addk (default 1: Laplace)")
    g.add_argument("--discount", type=float, metavar="D",
                   help="fixed discount in (0, 1] for --smoothing kn (default: n1 / (n1 + 2 n2) per order)")


def run_preset(args) -> None:
    """`lmlab train --model trigram-kn|bigram-laplace|5gram-mkn`: the preset's order, smoothing and
    vocabulary size, unless a flag gives them."""
    from lmlab.models.presets import preset

    cfg = preset(args.model)
    for name in ("order", "smoothing", "vocab_size"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(cfg, name))
    if args.smoothing == cfg.smoothing and args.add_k is None:
        args.add_k = cfg.add_k
    args.model = None
    run_train(args)


def run_train(args) -> None:
    """`lmlab train --arch ngram`: count, smooth, validate, save; refuse transformer-only flags."""
    from lmlab.models.ngram.model import DEFAULT_CONTEXT_LENGTH, min_context_length
    from lmlab.recipes.ngram import DEFAULT_VOCAB_SIZE, train_ngram

    foreign = [name for name in ("model", "resume", "stop_after", "device", *sorted(flag_fields(ModelConfig)),
                                 *sorted(flag_fields(TrainConfig)))
               if name not in SHARED_TRAIN_FLAGS and getattr(args, name, None) != UNSET.get(name)]
    if foreign:
        flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
        verb = "does" if len(foreign) == 1 else "do"
        raise LmlabError(f"{flags} {verb} not apply to --arch ngram; its settings are --order --smoothing --add-k "
                         "--discount --vocab-size --block-size --val-fraction --seed")
    order = DEFAULT_ORDER if args.order is None else args.order
    smoothing = args.smoothing or "kn"
    if args.add_k is not None and smoothing != "addk":
        raise LmlabError(f"--add-k is for --smoothing addk, not {smoothing}; drop it or pass --smoothing addk")
    block_size = _or(args.block_size, DEFAULT_CONTEXT_LENGTH)
    if order < 1:
        raise LmlabError(f"--order {order} must be at least 1 (1 = unigrams, 3 = trigrams, ...)")
    if block_size < min_context_length(order):
        raise LmlabError(f"--block-size {block_size} is too short for order {order}: perplexity windows need at "
                         f"least {min_context_length(order)} tokens (2(n-1), and 2)")
    TrainConfig(val_fraction=_or(args.val_fraction, 0.05),  # checked before tokenizing
                loop=TrainConfig.loop.replace(seed=_or(args.seed, 0)))
    check_run_dir(args.out)
    start = time.perf_counter()
    result = train_ngram(args.data, args.out, order, smoothing, args.tokenizer, _or(args.vocab_size, DEFAULT_VOCAB_SIZE),
                         args.discount, 1.0 if args.add_k is None else args.add_k,
                         block_size, _or(args.val_fraction, 0.05), _or(args.seed, 0))
    sizes = ", ".join(f"{n} {k}-grams" for k, n in enumerate(result.sizes, 1))
    print(f"counted {result.train_tokens} training tokens into {sizes} in {result.count_seconds:.1f}s "
          f"({time.perf_counter() - start:.1f}s with tokenizing)")
    if result.val_perplexity is None:
        print("validation perplexity: none (stupid backoff scores are not probabilities)"
              if smoothing == "stupid" else "validation perplexity: none (no validation blocks)")
    else:
        print(f"validation perplexity {result.val_perplexity:.4f} over {result.val_tokens} tokens")
    print(f"model saved to {result.model_dir}")



def _or(value, default):
    return default if value is None else value


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "ngram", help="n-gram models and ARPA files",
        description="Write an n-gram model as an ARPA file (for kenlm, SRILM, ...) or read one into a model "
                    "directory that lmlab eval/generate use. Train n-gram models with `lmlab train --arch ngram`.",
        epilog="examples:\n"
               "  lmlab ngram export --model runs/kn5 --arpa kn5.arpa\n"
               "  lmlab ngram import --arpa kn5.arpa --tokenizer runs/kn5/model --out runs/kn5-arpa\n"
               "  lmlab ngram import --arpa words.arpa --out runs/words   # word-level: builds a tokenizer",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="ngram_command", required=True)
    export = sub.add_parser("export", help="write an n-gram model as an ARPA file")
    export.add_argument("--model", required=True, help="n-gram model directory or run directory")
    export.add_argument("--arpa", required=True, help="the ARPA file to write")
    export.set_defaults(run=run_export, writes=("arpa",))  # its --arpa is written
    read = sub.add_parser("import", help="read an ARPA file into an n-gram model directory")
    read.add_argument("--arpa", required=True, help="the ARPA file to read")
    read.add_argument("--tokenizer", help="tokenizer.json (or its directory) whose tokens the ARPA file spells; "
                                          "default: a word-level tokenizer of the file's 1-grams")
    read.add_argument("--out", required=True, help="model directory to write")
    read.set_defaults(run=run_import)


def run_export(args) -> None:
    from lmlab.models.load import load
    from lmlab.models.ngram.arpa import write_arpa
    from lmlab.models.ngram.model import NGramLM

    check_file_output(args.arpa, "--arpa")
    model, tokenizer = load(args.model)
    if not isinstance(model, NGramLM):
        raise LmlabError(f"'{args.model}' holds a {type(model).__name__}; only n-gram models export to ARPA")
    words = [tokenizer.backend.id_to_token(i) for i in range(model.config.vocab_size)]
    counts = write_arpa(model.tables, words, args.arpa)
    print(f"wrote {args.arpa}: {_counts(counts)}")


def run_import(args) -> None:
    from lmlab.models.ngram.arpa import arpa_counts, read_arpa
    from lmlab.models.ngram.files import save_ngram_dir
    from lmlab.models.ngram.model import DEFAULT_CONTEXT_LENGTH, NGramConfig, NGramLM

    check_dir_output(args.out, "--out")
    backend = load_tokenizer(args.tokenizer) if args.tokenizer else None
    tables, words = read_arpa(args.arpa, backend.get_vocab() if backend else None)
    tokenizer = backend if backend else word_tokenizer(words)
    config = NGramConfig(tables.order, "arpa", tables.vocab_size, context_length=max(DEFAULT_CONTEXT_LENGTH,
                                                                                    2 * tables.order))
    save_ngram_dir(NGramLM(config, tables), tokenizer, args.out)
    print(f"read {args.arpa} ({_counts(arpa_counts(args.arpa))}) into {Path(args.out)}")


def _counts(counts: tuple[int, ...]) -> str:
    """'888 1-grams, 2328 2-grams': an ARPA file's counts, as its header states them."""
    return ", ".join(f"{n} {k}-grams" for k, n in enumerate(counts, 1))


def word_tokenizer(words: list[str]) -> TextTokenizer:
    """A whitespace word-level tokenizer over `words` (id = position), unknown words -> `<unk>`, that
    starts texts with `<s>` (--add-bos) and stops generating at `</s>`."""
    from lmlab.models.ngram.vocabulary import BOS, EOS, UNK
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate(words)}
    if UNK not in vocab:
        raise LmlabError(f"the ARPA file has no {UNK} 1-gram; pass --tokenizer to say how to read unknown words")
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([w for w in (BOS, EOS, UNK) if w in vocab])
    eos = vocab.get(EOS)
    return TextTokenizer(backend, vocab.get(BOS), eos, None, () if eos is None else (eos,))
