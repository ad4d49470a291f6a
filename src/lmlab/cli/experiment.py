"""`lmlab experiment`: experiments from the course, run end to end. `vanishing-gradients`: how the
gradient of the loss with respect to inputs k steps back decays in an Elman RNN, an LSTM and a GRU.
`encoder-decoder-pretraining`: T5 and BART pre-trained with their own objective, then fine-tuned, against
the same models fine-tuned from scratch. `scaling`: a grid of decoder sizes and token budgets within a time
budget, and Kaplan's and Chinchilla's scaling laws fitted to it. `attention`: the efficient attention methods,
each training the same decoder with the same budget on long blocks. `classic-vs-neural`: Kneser-Ney n-grams
against window, recurrent and transformer LMs on the same real text, held-out perplexity against training tokens."""

import dataclasses
from types import SimpleNamespace

from lmlab.cli.common.vocabulary import alias
from lmlab.data.corpora import EMBEDDED
from lmlab.data.pair_tasks import TASKS
from lmlab.experiments.settings import (
    CAUSAL_METHODS,
    LABELS,
    AttentionComparisonSettings,
    ClassicVsNeuralSettings,
    PretrainingExperimentSettings,
    ScalingSettings,
    VanishingGradientSettings,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("experiment", help="run an experiment from the course")
    sub = p.add_subparsers(dest="experiment", required=True)
    d = _defaults(VanishingGradientSettings)
    vg = sub.add_parser("vanishing-gradients",
                        help="gradient norm vs distance for RNN, LSTM and GRU (table, JSON, PNG)",
                        description="Measure || dL_t / dx_(t-k) || for k = 0..K in an Elman RNN, an LSTM and a GRU "
                                    "of the same size, at initialisation and after a short training; write "
                                    "vanishing_gradients.json, .md and .png to --out.")
    vg.add_argument("--out", required=True, help="a new directory for the results (and the training runs)")
    vg.add_argument("--data", default="markov", help=f"text file, directory, or one of {list(EMBEDDED)} (default markov)")
    vg.add_argument("--steps-back", type=int, default=d.steps_back, metavar="K", help=f"largest k (default {d.steps_back})")
    vg.add_argument("--train-steps", type=int, default=d.train_steps, metavar="N",
                    help=f"training steps before the second measurement; 0 = initialisation only (default {d.train_steps})")
    vg.add_argument("--hidden", type=int, default=d.hidden, help=f"embedding and state size (default {d.hidden})")
    vg.add_argument("--vocab-size", type=int, default=d.vocab_size, help=f"BPE vocabulary (default {d.vocab_size})")
    vg.add_argument("--seed", type=int, default=d.seed, help=f"initial weights and measured sequences (default {d.seed})")
    vg.set_defaults(run=run_vanishing_gradients)
    _add_encoder_decoder_pretraining(sub)
    _add_scaling(sub)
    _add_attention(sub)
    _add_classic_vs_neural(sub)


def _defaults(cls) -> SimpleNamespace:
    """The default of each field of the settings dataclass `cls`, without making one: making one checks a preset
    it names against the model registry, which imports torch (seconds)."""
    return SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(cls)})


def _settings_flags(parser, defaults, kind: type, metavar: str, names_and_help) -> None:
    """One flag per (setting, help) of a settings dataclass, typed `kind`, its default in the help."""
    for name, help_text in names_and_help:
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(defaults, name), metavar=metavar,
                            help=f"{help_text} (default {getattr(defaults, name)})")


def _settings(args, cls):
    """The settings dataclass `cls` from the parsed flags that share its fields' names."""
    return cls(**{f: getattr(args, f) for f in cls.__dataclass_fields__ if hasattr(args, f)})


def _add_encoder_decoder_pretraining(sub) -> None:
    d = _defaults(PretrainingExperimentSettings)
    sp = sub.add_parser("encoder-decoder-pretraining",
                        help="T5 and BART: pre-trained with their own objective vs from scratch (table, JSON, PNG)",
                        description="Pre-train each preset on --data with its own objective (T5: span corruption, "
                                    "BART: denoising), fine-tune it on a generated task, and fine-tune the same "
                                    "network from scratch with the same steps, pairs and tokenizer; report test "
                                    "sequence accuracy and write encoder_decoder_pretraining.json, .md and .png to "
                                    "--out.")
    sp.add_argument("--out", required=True, help="a new directory for the results (and the training runs)")
    sp.add_argument("--presets", nargs="+", default=list(d.presets), metavar="PRESET",
                    help=f"encoder-decoder presets (default: {' '.join(d.presets)})")
    alias(sp, "--data", "--corpus", dest="corpus", default=d.corpus,
                    help="pre-training text: 'numbers' (default: generated sentences about counts, written out or in "
                         "digits, --paired of them both ways, never a validation or test number), a file, a "
                         f"directory, or one of {list(EMBEDDED)}")
    sp.add_argument("--task", default=d.task, choices=list(TASKS), help=f"the fine-tuning task (default {d.task})")
    _settings_flags(sp, d, int, "N", (
        ("pretrain_steps", "pre-training steps"), ("finetune_steps", "fine-tuning steps"),
        ("train_pairs", "fine-tuning pairs"), ("val_pairs", "validation pairs"), ("test_pairs", "test pairs"),
        ("eval_every", "fine-tuning steps between validation accuracies"),
        ("vocab_size", "BPE vocabulary"), ("block_size", "tokens per pre-training chunk"),
        ("seed", "weights, data and splits")))
    _settings_flags(sp, d, float, "X", (
        ("pretrain_lr", "pre-training learning rate"), ("finetune_lr", "fine-tuning learning rate"),
        ("paired", "share of the generated corpus's sentences that write a number both ways"),
        ("noise_density", "T5 span corruption: share of the tokens dropped"),
        ("mean_span_length", "T5 span corruption: mean length of a dropped span")))
    sp.set_defaults(run=run_encoder_decoder_pretraining)


def _add_scaling(sub) -> None:
    d = _defaults(ScalingSettings)
    sc = sub.add_parser("scaling", help="scaling laws: a grid of decoder sizes and token budgets (tables, JSON, PNGs)",
                        description="Train a grid of decoders (non-embedding sizes doubling from --min-parameters to "
                                    "--max-parameters, 888 to 6.3M on the ladder) on token budgets doubling from "
                                    "--min-steps batches, as many isoFLOP profiles as --budget-minutes allows on this "
                                    "machine; score each run on held-out text; fit Kaplan's L(N) and L(D), "
                                    "Chinchilla's L(N, D) = E + A/N^alpha + B/D^beta and the compute-optimal size "
                                    "of each isoFLOP profile; write scaling.json, .md, scaling_compute.png and "
                                    "scaling_isoflop.png to --out. Each run is a normal run directory in --out/runs; "
                                    "the same command again continues an interrupted grid. On markov the true "
                                    "entropy is printed beside the fitted E.")
    sc.add_argument("--out", required=True, help="a new directory, or a grid this command started, to continue it")
    sc.add_argument("--data", default=d.data,
                    help="markov (default: its true entropy is known), stdlib (the whole standard library), or a "
                         "text file, directory or JSONL")
    sc.add_argument("--budget-minutes", type=float, default=d.budget_minutes, metavar="M",
                    help=f"the grid's estimated time on this machine, from a timed step of each size "
                         f"(default {d.budget_minutes:g})")
    sc.add_argument("--model", default=d.model,
                    help=f"decoder preset whose family (norm, MLP, positions) every size uses (default {d.model})")
    sc.add_argument("--tokens-per-parameter", type=float, nargs=2, default=d.tokens_per_parameter,
                    metavar=("LOW", "HIGH"), help="the band of D/N a run must lie in (default "
                                                 f"{d.tokens_per_parameter[0]:g} {d.tokens_per_parameter[1]:g})")
    _settings_flags(sc, d, int, "N", (
        ("vocab_size", "BPE vocabulary, shared by every run"),
        ("batch_size", "sequences per step"), ("block_size", "tokens per sequence"),
        ("min_steps", "steps of the shortest run; token budgets double from there"),
        ("bootstrap", "resamples for the exponents' intervals (0: none)"),
        ("seed", "weights, data order and held-out split")))
    sc.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate of every run (default {d.lr:g})")
    sc.add_argument("--min-parameters", type=float, default=d.min_parameters, metavar="N",
                    help=f"smallest non-embedding size of the ladder (default {d.min_parameters:g})")
    sc.add_argument("--max-parameters", type=float, default=d.max_parameters, metavar="N",
                    help=f"largest non-embedding size of the ladder (default {d.max_parameters:.0e})")
    sc.set_defaults(run=run_scaling)


def _add_attention(sub) -> None:
    d = _defaults(AttentionComparisonSettings)
    at = sub.add_parser("attention", help="efficient attention methods trained alike on long blocks (table, JSON, PNG)",
                        description="Train the same decoder once per --methods (same data, tokenizer, seed, batches "
                                    "and steps; only --attention differs) on blocks of --block-size tokens; report "
                                    "each method's held-out loss, its gap to full attention and its training "
                                    "tokens/s, then train each on the copy task (a random string copied half a "
                                    "block later) and report its held-out accuracy; write attention_comparison.json, "
                                    ".md, .png and _copy.png to --out.")
    at.add_argument("--out", required=True, help="a new directory for the results (and the training runs)")
    at.add_argument("--methods", nargs="+", default=list(d.methods), choices=CAUSAL_METHODS, metavar="METHOD",
                    help=f"attention methods to compare, from {', '.join(CAUSAL_METHODS)} (default: all)")
    at.add_argument("--data", default=d.data, help=f"text file, directory, JSONL or one of {list(EMBEDDED)} "
                                                   f"(default {d.data})")
    at.add_argument("--model", default=d.model, help=f"decoder preset whose family every run uses (default {d.model})")
    _settings_flags(at, d, int, "N", (
        ("n_layers", "layers"), ("d_model", "width (heads of 32)"),
        ("block_size", "tokens per training block"), ("max_steps", "training steps of each run"),
        ("batch_size", "blocks per step"), ("vocab_size", "BPE vocabulary"),
        ("attention_window", "window / BigBird block / LSH chunk"),
        ("attention_rank", "Performer's random features"), ("attention_hashes", "LSH rounds"),
        ("copy_steps", "copy-task training steps of each method (0: language modelling only)"),
        ("copy_symbols", "the copy task's alphabet (chance is 1 / N)"), ("seed", "weights and batches")))
    at.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    at.set_defaults(run=run_attention)


def _add_classic_vs_neural(sub) -> None:
    d = _defaults(ClassicVsNeuralSettings)
    cn = sub.add_parser("classic-vs-neural",
                        help="Kneser-Ney n-grams against window, RNN and transformer LMs on real text (table, JSON, PNG)",
                        description="Train every --methods on --data with one BPE tokenizer: Kneser-Ney 3/4/5-gram and "
                                    "modified KN counted on growing shares of the training text, the window LM, "
                                    "LSTM, GRU and a small transformer trained for --max-steps with a checkpoint at "
                                    "each of --points steps; score each on --held-out (whole documents no model "
                                    "trained on), each in its own context; write classic_vs_neural.json, .md and "
                                    ".png (held-out perplexity against training tokens) to --out. The same command "
                                    "again continues a stopped comparison.")
    cn.add_argument("--out", required=True, help="a new directory for the results (and the neural training runs), or "
                                                 "a comparison this command started, to continue it")
    cn.add_argument("--methods", nargs="+", default=list(d.methods), choices=list(LABELS), metavar="METHOD",
                    help=f"language models to compare, from {', '.join(LABELS)} (default: all)")
    cn.add_argument("--data", default=d.data, help=f"text file, directory, JSONL or one of {list(EMBEDDED)} "
                                                   f"(default {d.data})")
    cn.add_argument("--held-out",
                    help=f"the scored text: a corpus as --data takes, or 'none' for --data's own validation "
                         f"blocks (default: {d.held_out} for --data {d.data}, else none)")
    _settings_flags(cn, d, int, "N", (
        ("max_steps", "training steps of each neural model"),
        ("points", "points on each curve (checkpoints of each neural run)"), ("vocab_size", "BPE vocabulary"),
        ("block_size", "tokens per training block"), ("batch_size", "blocks per step"),
        ("seed", "weights, batches and the validation split")))
    _settings_flags(cn, d, float, "X", (("lr", "peak learning rate of the neural models"),
                                        ("dropout", "dropout of every neural model")))
    cn.set_defaults(run=run_classic_vs_neural)


def run_vanishing_gradients(args) -> None:
    from lmlab.experiments.vanishing_gradients import results_table, vanishing_gradients

    settings = VanishingGradientSettings(steps_back=args.steps_back, train_steps=args.train_steps, d_model=args.hidden,
                                         hidden=args.hidden, vocab_size=args.vocab_size, seed=args.seed)
    results = vanishing_gradients(args.out, args.data, settings)
    print(results_table(results), end="")
    print(f"written: {args.out}/vanishing_gradients.json, .md, .png")


def run_encoder_decoder_pretraining(args) -> None:
    from lmlab.experiments import encoder_decoder_pretraining

    settings = _settings(args, PretrainingExperimentSettings)
    report = encoder_decoder_pretraining.encoder_decoder_pretraining(args.out, settings)
    print(encoder_decoder_pretraining.results_table(report), end="")
    print(f"written: {args.out}/encoder_decoder_pretraining.json, .md, .png")


def run_scaling(args) -> None:
    from lmlab.experiments import scaling

    report = scaling.scaling(args.out, _settings(args, ScalingSettings))
    if report is None:  # stopped by Ctrl-C: the CLI exits 130
        return
    print(scaling.results_table(report), end="")
    print(f"written: {args.out}/scaling.json, .md, scaling_compute.png, scaling_isoflop.png")


def run_attention(args) -> None:
    from lmlab.experiments import attention_comparison

    report = attention_comparison.compare_attention(args.out, _settings(args, AttentionComparisonSettings))
    print(attention_comparison.results_table(report), end="")
    print(f"written: {args.out}/attention_comparison.json, .md, .png" + (", _copy.png" if args.copy_steps else ""))


def run_classic_vs_neural(args) -> None:
    from lmlab.experiments import classic_vs_neural

    if args.held_out is None:  # kjv's held-out books go with kjv; other text is scored on its own held-out blocks
        args.held_out = ClassicVsNeuralSettings.held_out if args.data == ClassicVsNeuralSettings.data else "none"
    args.held_out = None if args.held_out == "none" else args.held_out
    report = classic_vs_neural.compare_classic_neural(args.out, _settings(args, ClassicVsNeuralSettings))
    if report is None:  # stopped by Ctrl-C: the CLI exits 130
        return
    print(classic_vs_neural.results_table(report), end="")
    print(f"written: {args.out}/classic_vs_neural.json, .md, .png")
