"""`lmlab experiment`: experiments from the course, run end to end. `vanishing-gradients`: how the
gradient of the loss with respect to inputs k steps back decays in an Elman RNN, an LSTM and a GRU."""

from lmlab.data.corpora import EMBEDDED
from lmlab.recipes.vanishing_gradients import VanishingGradientSettings, results_table, vanishing_gradients


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("experiment", help="run an experiment from the course")
    sub = p.add_subparsers(dest="experiment", required=True)
    d = VanishingGradientSettings()
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


def run_vanishing_gradients(args) -> None:
    settings = VanishingGradientSettings(steps_back=args.steps_back, train_steps=args.train_steps, d_model=args.hidden,
                                         hidden=args.hidden, vocab_size=args.vocab_size, seed=args.seed)
    results = vanishing_gradients(args.out, args.data, settings)
    print(results_table(results), end="")
    print(f"written: {args.out}/vanishing_gradients.json, .md, .png")
