"""`lmlab finetune`: fine-tune a BERT encoder with a task head (classify, pair, regress, tag, qa, choice),
or an encoder-decoder on source/target pairs (`--task text-to-text`, in `cli/finetune/encoder_decoder.py`).

(Decoders are tuned by the post-training commands sft, reward, dpo and ppo: `cli/post_training/`.)
"""

import argparse
import sys
import warnings

from lmlab.cli.common.config_flags import add_config_flags, config_overrides
from lmlab.cli.common.vocabulary import alias, renamed_values
from lmlab.cli.finetune import encoder_decoder
from lmlab.config import ENCODER_PRESETS
from lmlab.data.encoder_tasks import DEFAULT_COLUMNS, EMBEDDED_TASKS, TASKS, Columns
from lmlab.io import zoo
from lmlab.training.recipe_configs import PER_EPOCH, EncoderFinetuneConfig

COLUMNS_HELP = """expected columns (CSV with a header line, or JSONL objects; rename with --*-column):
  classify  text, label                        label: any string
  pair      text, text_pair, label             the two sentences of a pair
  regress   text, [text_pair], label           label: a number
  tag       tokens, tags                       space-separated words and one BIO tag per word (JSONL: lists)
  qa        question, context, answer, [answer_start]   answer: a span of the context
  choice    question, choices, label           choices separated by " | " (JSONL: a list); label: the index
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "finetune", help="fine-tune a BERT encoder on a task (classify, pair, regress, tag, qa, choice) or an "
                         "encoder-decoder on source/target pairs (text-to-text)",
        description="Fine-tune a BERT encoder with a task head: AdamW, linear warmup (10%% of the steps unless "
                    "--warmup-steps) and decay, evaluation after each epoch, early stopping on the task's metric; "
                    "the best model is kept in OUT/model. Several processes: torchrun --nproc_per_node N -m "
                    "lmlab.cli.main finetune ...",
        epilog=COLUMNS_HELP + encoder_decoder.PAIRS_HELP + "\n\nexamples:\n"
               "  lmlab finetune --model all-minilm-l6-v2 --task classify --data sentiment --out runs/sst\n"
               "  lmlab finetune --model bert-tiny --task classify --data sentiment --out runs/scratch "
               "--lr 5e-4 --epochs 8\n"
               "  lmlab finetune --model runs/mlm --task tag --data ner.jsonl --eval ner-dev.jsonl --out runs/ner\n"
               "  lmlab finetune --task text-to-text --model t5-tiny --data numbers --out runs/numbers",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help=f"encoder to start from: a preset trained from scratch ({', '.join(ENCODER_PRESETS)}), a zoo "
                        f"name ({', '.join(n for n in zoo.ZOO if 'minilm' in n)}), an HF BERT directory or an "
                        "lmlab run directory")
    p.add_argument("--task", required=True, choices=[*TASKS, encoder_decoder.TASK],
                   type=renamed_values("--task", {"seq2seq": encoder_decoder.TASK}),
                   help=f"the head to train on the encoder, or {encoder_decoder.TASK} for an encoder-decoder")
    alias(p, "--data", "--train", dest="data", required=True,
                   help=f"training data: a CSV/JSONL file, or an embedded task: {', '.join(EMBEDDED_TASKS)}")
    p.add_argument("--eval", help="evaluation data (default: the embedded task's own, or part of --data)")
    p.add_argument("--out", required=True, help="run directory (checkpoints, metrics, curves, the model)")
    p.add_argument("--tokenizer", help="tokenizer.json or its directory, instead of the model's own")
    p.add_argument("--text-column", help="column of the text / words / question")
    p.add_argument("--pair-column", help="column of the second text / context / choices")
    p.add_argument("--label-column", help="column of the label / score / tags / answer")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many steps this session")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 …")
    group = p.add_argument_group("fine-tuning settings (unset ones keep their defaults)")
    # the epochs set PER_EPOCH (--task text-to-text has them); FSDP shards decoders only
    add_config_flags(group, EncoderFinetuneConfig, skip={*PER_EPOCH, "fsdp"})
    encoder_decoder.add_encoder_decoder_flags(p)
    p.set_defaults(run=run)


def run(args) -> None:
    from lmlab.recipes.finetune_encoder import finetune_encoder

    if args.task == encoder_decoder.TASK:
        return encoder_decoder.run(args)
    encoder_decoder.refuse_flags(args, encoder_decoder.TEXT_TO_TEXT_ONLY, args.task)
    default = DEFAULT_COLUMNS[args.task]
    columns = Columns(args.text_column or default.text, args.pair_column or default.pair,
                      args.label_column or default.label)
    cfg = EncoderFinetuneConfig(**config_overrides(args, EncoderFinetuneConfig))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _one_line_warning
        result = finetune_encoder(args.model, args.task, args.data, args.out, args.eval, cfg, columns,
                                  args.tokenizer, args.resume, args.stop_after, args.device)
    if not result.finished:
        print(f"stopped at step {result.step}; a checkpoint is in {args.out}/checkpoints. "
              f"Continue with: lmlab finetune … --out {args.out} --resume")
        return
    how = "stopped early (no better score for --patience epochs)" if result.stopped_early else "done"
    print(f"{how}: {result.step} steps; best epoch {result.best_epoch}")
    for name, value in result.best.items():
        before = f"{result.before[name]:.3f} -> " if name in result.before else ""
        print(f"  eval {name}: {before}{value:.3f}{'  (early-stopping metric)' if name == result.metric else ''}")
    print(f"model saved to {result.model_dir} (load it with lmlab.models.encoder_task_files.load_finetuned)")


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"lmlab: warning: {message}", file=sys.stderr)
