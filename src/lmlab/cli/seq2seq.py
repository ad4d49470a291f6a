"""`lmlab seq2seq`: train an RNN encoder-decoder with attention on a generated task, translate with
it (greedy or beam search, optionally saving the attention map as a PNG), and score it on the
task's test split."""

import json

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.errors import LmlabError
from lmlab.io.outputs import check_file_output
from lmlab.training.recipe_configs import Seq2SeqTrainConfig

VISIBLE_SPACE = "_"  # how a space is labelled on a heatmap axis


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("seq2seq", help="RNN encoder-decoder with attention (date normalisation, ...)",
                              description="Train, run and score a GRU encoder-decoder with additive, "
                                          "multiplicative, dot or no attention on a task generated in code.")
    commands = p.add_subparsers(dest="seq2seq_command", required=True)

    train = commands.add_parser("train", help="train a model on a generated task")
    train.add_argument("--out", required=True, help="run directory (checkpoints, metrics, model/)")
    train.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    train.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps this session")
    add_config_flags(train.add_argument_group("settings (unset ones keep their defaults)"), Seq2SeqTrainConfig,
                     skip={"fsdp"})  # FSDP shards decoders only
    train.set_defaults(run=run_train)

    translate = commands.add_parser("translate", help="rewrite one text with a trained model")
    translate.add_argument("--model", required=True, help="a run directory or its model/")
    translate.add_argument("--text", required=True, help='the source, e.g. "3rd of March 1998"')
    _add_decoding(translate)
    translate.add_argument("--heatmap", help="save the attention map (output x source characters) to this PNG")
    translate.set_defaults(run=run_translate)

    evaluate = commands.add_parser("eval", help="sequence and character accuracy on the task's test split")
    evaluate.add_argument("--model", required=True, help="a run directory or its model/")
    _add_decoding(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print the scores as JSON")
    evaluate.set_defaults(run=run_eval)


def _add_decoding(p) -> None:
    p.add_argument("--beams", type=int, default=1, help="beam size K (default 1: greedy)")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="beam outputs are ranked by log-prob / length**this (default 1.0)")


def _check_beams(beams: int) -> None:
    if beams < 1:
        raise LmlabError(f"--beams {beams} must be at least 1 (1 decodes greedily)")


def run_train(args) -> None:
    from lmlab.recipes.seq2seq import train_seq2seq

    cfg = Seq2SeqTrainConfig(**config_overrides(args, Seq2SeqTrainConfig))
    result = train_seq2seq(cfg, args.out, resume=args.resume, stop_after=args.stop_after)
    if not result.finished:
        print(f"stopped at step {result.step}; a checkpoint is in {args.out}/checkpoints. "
              f"Continue with: lmlab seq2seq train … --out {args.out} --resume")
        return
    print(f"done: {result.step} steps. Validation sequence accuracy {result.validation['val_seq_acc']:.4f}; "
          f"test sequence accuracy {result.test['test_seq_acc']:.4f}, character accuracy "
          f"{result.test['test_char_acc']:.4f} (greedy). Model saved to {result.model_dir}")


def run_translate(args) -> None:
    from lmlab.figures import save_heatmap
    from lmlab.generation.config import GenerationConfig
    from lmlab.generation.seq2seq import attention_map, translate_ids
    from lmlab.models.seq2seq.files import load_seq2seq_dir

    _check_beams(args.beams)
    if args.heatmap:
        check_file_output(args.heatmap, "--heatmap")
    trained = load_seq2seq_dir(args.model)
    trained.src_vocab.check(args.text, "--text")
    if args.heatmap and trained.model.config.attention == "none":
        raise LmlabError("this model was trained with --attention none, so it has no attention map; drop --heatmap")
    source = trained.src_vocab.encode(args.text)
    config = GenerationConfig(max_new_tokens=trained.max_len, num_beams=args.beams, length_penalty=args.length_penalty)
    output = translate_ids(trained.model, [source], config)[0]
    print(trained.tgt_vocab.decode(output.token_ids))
    if args.heatmap:
        produced = output.sampled_ids  # with the final </s> when it ended there
        weights = attention_map(trained.model, source, produced)  # (T, S)
        rows = [_label(trained.tgt_vocab.token(i)) for i in produced]
        cols = [_label(trained.src_vocab.token(i)) for i in source]
        kind = trained.model.config.attention
        save_heatmap(args.heatmap, weights.numpy(), rows, cols, title=f"{kind} attention", value_range=(0.0, 1.0))
        print(f"attention map saved to {args.heatmap}")


def _label(token: str) -> str:
    return VISIBLE_SPACE if token == " " else token


def run_eval(args) -> None:
    from lmlab.models.seq2seq.files import load_seq2seq_dir
    from lmlab.recipes.seq2seq import score_pairs, task_test_pairs

    _check_beams(args.beams)
    trained = load_seq2seq_dir(args.model)
    scores = score_pairs(trained, task_test_pairs(trained), args.beams, args.length_penalty)
    scores |= {"task": trained.task["name"], "attention": trained.model.config.attention, "beams": args.beams}
    if args.json:
        print(json.dumps(scores))
        return
    decoding = "greedy" if args.beams == 1 else f"beam search, K={args.beams}"
    print(f"{scores['task']} test split ({scores['n']} pairs, {decoding}): sequence accuracy "
          f"{scores['seq_acc']:.4f}, character accuracy {scores['char_acc']:.4f}")
