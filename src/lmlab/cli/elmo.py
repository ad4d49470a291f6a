"""`lmlab elmo train|embed|probe`: a character-aware bidirectional LSTM LM, its contextual word
vectors, and a downstream tagger on them through the learned scalar mix."""

import dataclasses
import json

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.data.corpora import EMBEDDED
from lmlab.data.words import split_words
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_run_dir
from lmlab.models.elmo.config import ElmoConfig
from lmlab.training.recipe_configs import ElmoTrainConfig

SHAPE_FLAGS = ("d_model", "lstm_cells", "n_layers", "char_dim", "n_highway", "max_chars")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("elmo", help="ELMo: train a biLM, embed text in context, probe a task")
    sub = p.add_subparsers(dest="elmo_command", required=True)

    t = sub.add_parser("train", help="train the bidirectional LM (resumable)")
    t.add_argument("--data", required=True, help=f"text file, directory, .jsonl, or one of {list(EMBEDDED)}")
    t.add_argument("--out", required=True, help="run directory (checkpoints, metrics, loss.png, model/)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    t.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps this session")
    shape = t.add_argument_group("model settings")
    for name in SHAPE_FLAGS:
        shape.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int,
                           help=f"default {getattr(ElmoConfig, name)}")
    add_config_flags(t.add_argument_group("training settings (unset ones keep their defaults)"), ElmoTrainConfig,
                     skip={"fsdp"})  # FSDP shards decoders only
    t.set_defaults(run=run_train)

    e = sub.add_parser("embed", help="per-token contextual vectors of a text")
    e.add_argument("--model", required=True, help="model directory (the run's model/)")
    e.add_argument("--text", required=True, help="the sentence to embed")
    e.add_argument("--layer", type=int, help="one layer (0 = token layer) instead of the equal-weight mix of all")
    e.add_argument("--json", action="store_true", help="print {'tokens': [...], 'vectors': [[...]]}")
    e.set_defaults(run=run_embed)

    p = sub.add_parser("probe", help="topic tagging on frozen features: scalar mix vs token layer")
    p.add_argument("--model", required=True, help="model directory (the run's model/)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(run=run_probe)


def run_train(args) -> None:
    from lmlab.data.corpora import load_corpus
    from lmlab.recipes.elmo import train_elmo

    if args.stop_after is not None and args.stop_after < 1:
        raise LmlabError(f"--stop-after must be at least 1, got {args.stop_after}")
    shape = {name: getattr(args, name) for name in SHAPE_FLAGS if getattr(args, name) is not None}
    cfg = ElmoTrainConfig(**config_overrides(args, ElmoTrainConfig))
    ElmoConfig(vocab_size=1, **shape)  # check the shape before reading the data
    check_run_dir(args.out)
    result = train_elmo(load_corpus(args.data), shape, cfg, args.out, resume=args.resume,
                        stop_after=args.stop_after)
    ppl = (f"validation perplexity: forward {result.forward_ppl:.2f}, backward {result.backward_ppl:.2f}"
           if result.forward_ppl is not None else "no validation yet")
    where = f"saved {result.model_dir}" if result.model_dir else "stopped early; continue with --resume"
    print(f"step {result.step}; {ppl}; {where}")


def run_embed(args) -> None:
    import torch

    from lmlab.models.elmo.chars import BOS, EOS, char_ids
    from lmlab.models.elmo.files import load_elmo

    model, _ = load_elmo(args.model)
    sentences = split_words(args.text)
    if not sentences:
        raise LmlabError("--text holds no words; give some text to embed")
    n_layers = model.cfg.n_layers + 1
    if args.layer is not None and not 0 <= args.layer < n_layers:
        raise LmlabError(f"--layer {args.layer} does not exist; this model has layers 0..{n_layers - 1}")
    tokens, vectors = [], []
    with torch.no_grad():
        for words in sentences:
            layers = model.layers(char_ids([BOS, *words, EOS], model.cfg.max_chars)[None])
            mixed = layers[args.layer] if args.layer is not None else sum(layers) / n_layers  # (1, T, 2d)
            tokens += words
            vectors += mixed[0, 1:-1].tolist()
    if args.json:
        print(json.dumps({"tokens": tokens, "vectors": vectors}))
        return
    for word, vector in zip(tokens, vectors):
        print(word, " ".join(f"{x:.4f}" for x in vector))


def run_probe(args) -> None:
    from lmlab.models.elmo.files import load_elmo
    from lmlab.recipes.elmo_probe import probe_topics

    model, _ = load_elmo(args.model)
    result = probe_topics(model)
    if args.json:
        print(json.dumps(dataclasses.asdict(result)))
        return
    print(f"topic tagging, {result.train_tokens} training / {result.test_tokens} test words, linear tagger on "
          "frozen features:")
    print(f"  ELMo scalar mix of all layers  {result.mix_accuracy:.1%}  (s = "
          f"{', '.join(f'{s:.2f}' for s in result.mix_weights)}; gamma = {result.gamma:.2f})")
    print(f"  token layer only               {result.token_accuracy:.1%}")
