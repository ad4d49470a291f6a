"""Encoders: lmlab versus Hugging Face transformers on the same BERT and DeBERTa weights, in one run.

1. Sentence embeddings/s with all-MiniLM-L6-v2 (downloaded with `lmlab download all-minilm-l6-v2`):
   sentences of mixed length (1 to ~60 words, taken from the Python standard library's docstrings
   and comments) in batches of 32, tokenization included, mean-pooled and L2-normalised.
     lmlab:         `lmlab.inference.embeddings.sentence_embeddings` (length-sorted batches, inference mode)
     lmlab-inorder: the same encoder on the same batches as HF (no sorting): the model path alone
     HF:            what a transformers user writes: AutoTokenizer(batch, padding=True) -> BertModel under
                    no_grad -> mean over the attention mask -> F.normalize
   Both sides' embeddings are checked equal (max difference) before timing.
2. Fine-tuning steps/s of a BERT-small classifier (4 layers, d_model 512, 8 heads, d_ff 2048, the
   Turc et al. 2019 shape; dropout 0.1): the same config and starting weights on both sides (the
   logits are checked equal), the same padded batches of sentences, AdamW with linear warmup/decay.
     lmlab: the `lmlab finetune` step — EncoderWithHead(encoder, SequenceClassifier) -> cross-entropy
            -> backward -> clip_grad_norm_ -> fused AdamW (build_optimizer) -> zero_grad(set_to_none)
            -> schedule.
     HF:    BertForSequenceClassification(..., labels=...).loss -> backward -> clip_grad_norm_ ->
            torch.optim.AdamW(fused=True) -> zero_grad -> schedule. The fused AdamW is what a
            transformers user gets by default: `TrainingArguments().optim` is "adamw_torch_fused".
   The batches are what a tokenizer gives with padding to the longest sentence: mostly padding
   (their share of real tokens is printed and kept in the JSON). lmlab's encoder skips the padding,
   attention included (modules/unpadding.py); HF's BertModel computes it.
3. The same fine-tuning steps with DeBERTa-v3's settings at that shape (4 layers, d_model 512, 8 heads,
   d_ff 2048, 256 log buckets, shared position keys, normed relative rows, no input positions or token
   types; dropout 0.1), against DebertaV2ForSequenceClassification, on a WordPiece vocabulary trained on
   the sentences (no download). lmlab's disentangled attention runs the projections and feed-forward on
   the real tokens only but scores attention over the padded layout, masked, as HF does throughout.

Rounds interleave lmlab and HF (alternating which goes first). Each side reports its median, and
the ratio of each round's pair (lmlab rate / HF rate, taken back to back) is reported as a median
with its range, so a load that shifts between rounds moves both sides of a pair alike. Usage:

  python benchmarks/encoders.py               # CPU
  python benchmarks/encoders.py --quick       # a smoke test, not a benchmark
  python benchmarks/encoders.py --only deberta  # one part (embed, finetune, deberta)
  python benchmarks/encoders.py --device cuda
"""

import argparse
import json
import os
import platform
import random
import re
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

from lmlab.config import EncoderConfig
from lmlab.data.stdlib import stdlib_texts
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.task_model import EncoderWithHead
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.losses.task_heads import classification_loss
from lmlab.models.bert import convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.deberta import convert as deberta_convert
from lmlab.models.encoders import build
from lmlab.models.load import load_encoder
from lmlab.models.presets import preset
from lmlab.modules.pooling import mean_pooled_embedding
from lmlab.recipes.finetune_encoder import EncoderFinetuneConfig
from lmlab.tokenizers.wordpiece import encode_batch, train_wordpiece
from lmlab.training.optim import build_optimizer, build_schedule
from machine import alternating, device_name, downloaded, synchronize  # benchmarks/machine.py

RESULTS = Path(__file__).parent / "results" / "encoders.json"
BERT_SMALL = EncoderConfig(vocab_size=30522, context_length=512, n_layers=4, n_heads=8, d_model=512, d_ff=2048,
                           dropout=0.1)
DEBERTA_SMALL = preset("deberta-v3-small", vocab_size=30522, n_layers=4, n_heads=8, d_model=512, d_ff=2048,
                       dropout=0.1, pooler=True)  # DeBERTa-v3's settings at BERT_SMALL's shape
OPTIM = EncoderFinetuneConfig().optim  # lr 5e-5, weight decay 0.01, betas (0.9, 0.999), 10% warmup, linear decay
LR, WEIGHT_DECAY, GRAD_CLIP, N_LABELS = OPTIM.lr, OPTIM.weight_decay, OPTIM.grad_clip, 2


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--sentences", type=int, default=512, help="sentences embedded per side per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=8, help="timed fine-tuning steps per side per round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved lmlab/HF repetitions; the median is kept")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="few sentences and steps: a smoke test")
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS),
                   help="the parts to run (default: all; embed and finetune need all-minilm-l6-v2 downloaded)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda asked for but CUDA is not available")
    if args.quick:
        args.sentences, args.steps, args.rounds = 64, 2, 2
    return args


def mixed_sentences(n: int, seed: int = 0) -> list[str]:
    """`n` English sentences of mixed length from the standard library's docstrings and comments."""
    text = " ".join(re.findall(r"^\s*(?:#|\"\"\")?\s*([A-Z][a-z][^\n]{10,})$", "\n".join(stdlib_texts()[:400]),
                               flags=re.MULTILINE))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 1 <= len(s.split()) <= 60]
    rng = random.Random(seed)
    rng.shuffle(sentences)
    return sentences[:n]


def timed(fn, device: torch.device) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def paired_speedups(seconds: dict[str, list[float]], name: str) -> list[float]:
    """Per round, `name`'s rate over HF's (HF seconds / `name` seconds): the two ran back to back."""
    return [hf / ours for ours, hf in zip(seconds[name], seconds["hf"])]


def row(benchmark: str, model: str, name: str, seconds: dict[str, list[float]], work: int, unit: str) -> dict:
    """One result: `work` units done per round, the median rate, and the speedup over HF two ways
    (ratio of the medians; median and range of the per-round paired ratios)."""
    rate = work / statistics.median(seconds[name])
    paired = paired_speedups(seconds, name)
    return {"benchmark": benchmark, "model": model, "impl": name, "unit": unit, "rate": rate,
            "rounds_s": seconds[name], "speedup_vs_hf": rate / (work / statistics.median(seconds["hf"])),
            "paired_speedup_median": statistics.median(paired), "paired_speedup_range": [min(paired), max(paired)]}


def interleaved(sides: dict, rounds: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds per round of each side's callable, alternating the order every round."""
    seconds = {name: [] for name in sides}
    for _, name in alternating(sides, rounds):
        seconds[name].append(timed(sides[name], device))
    return seconds


# --- 1. sentence embeddings ----------------------------------------------------------------

def hf_embeddings(model, tokenizer, texts: list[str], batch_size: int, device: torch.device) -> torch.Tensor:
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, return_tensors="pt")
            batch = {k: v.to(device) for k, v in batch.items()}
            hidden = model(**batch).last_hidden_state  # (B, T, C)
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out.append(F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1))
    return torch.cat(out)


@torch.inference_mode()
def lmlab_inorder_embeddings(encoder, tokenizer, texts: list[str], batch_size: int, device) -> torch.Tensor:
    out = []
    for start in range(0, len(texts), batch_size):
        ids, mask, types = (t.to(device) for t in encode_batch(tokenizer, texts[start:start + batch_size]))
        out.append(mean_pooled_embedding(encoder(ids, mask, types), mask))
    return torch.cat(out)


def embedding_benchmark(args, device: torch.device) -> list[dict]:
    path = downloaded("all-minilm-l6-v2")
    encoder, tokenizer = load_encoder(path)
    encoder = encoder.to(device)
    hf_model = transformers.BertModel.from_pretrained(path).to(device).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    texts = mixed_sentences(args.sentences)
    bs = args.batch_size
    sides = {
        "lmlab": lambda: sentence_embeddings(encoder, tokenizer, texts, bs),
        "lmlab-inorder": lambda: lmlab_inorder_embeddings(encoder, tokenizer, texts, bs, device),
        "hf": lambda: hf_embeddings(hf_model, hf_tokenizer, texts, bs, device),
    }
    outputs = {name: fn() for name, fn in sides.items()}  # also the warm-up
    max_diff = max((outputs[name] - outputs["hf"]).abs().max().item() for name in ("lmlab", "lmlab-inorder"))
    assert max_diff <= 1e-4, f"lmlab and HF embeddings differ by {max_diff}"
    seconds = interleaved(sides, args.rounds, device)
    lengths = [sum(e.attention_mask) for e in tokenizer.encode_batch(texts)]
    return [row("embed", "all-minilm-l6-v2", name, seconds, len(texts), "sentences/s") | {
            "max_abs_diff_vs_hf": max_diff, "sentences": len(texts),
            "tokens_min_mean_max": [min(lengths), sum(lengths) / len(lengths), max(lengths)]} for name in seconds]


# --- 2. fine-tuning steps ------------------------------------------------------------------

class LmlabStep:
    """The step of `recipes.finetune_encoder`."""

    def __init__(self, model: EncoderWithHead, total: int):
        self.model = model.train()
        self.optimizer = build_optimizer(model, OPTIM)
        self.scheduler = build_schedule(self.optimizer, OPTIM, total)

    def __call__(self, batch: dict) -> float:
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        loss = classification_loss(logits, batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return loss.item()


class HFStep:
    """A plain transformers fine-tuning step."""

    def __init__(self, model, total: int):
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
        self.scheduler = transformers.get_linear_schedule_with_warmup(self.optimizer, OPTIM.warmup(total), total)

    def __call__(self, batch: dict) -> float:
        loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.scheduler.step()
        return loss.item()


def classifier_pair(device: torch.device) -> tuple[EncoderWithHead, torch.nn.Module]:
    """lmlab's encoder with a SequenceClassifier and HF's BertForSequenceClassification with the same weights."""
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification(transformers.BertConfig(
        **convert.config_to_hf(BERT_SMALL), num_labels=N_LABELS, classifier_dropout=BERT_SMALL.dropout))
    ours = EncoderWithHead(build_encoder(BERT_SMALL),
                           SequenceClassifier(BERT_SMALL.d_model, N_LABELS, dropout=BERT_SMALL.dropout))
    state = hf.state_dict()
    ours.encoder.load_state_dict(convert.from_hf({k.removeprefix("bert."): v for k, v in state.items()
                                                  if k.startswith("bert.")}, BERT_SMALL))
    ours.head.classifier.load_state_dict({"weight": state["classifier.weight"], "bias": state["classifier.bias"]})
    return ours.to(device), hf.to(device)


def deberta_classifier_pair(device: torch.device) -> tuple[EncoderWithHead, torch.nn.Module]:
    """lmlab's DeBERTa with a SequenceClassifier and HF's DebertaV2ForSequenceClassification with the same weights."""
    torch.manual_seed(0)
    hf = transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(
        **deberta_convert.config_to_hf(DEBERTA_SMALL), num_labels=N_LABELS, cls_dropout=DEBERTA_SMALL.dropout))
    ours = EncoderWithHead(build(DEBERTA_SMALL),
                           SequenceClassifier(DEBERTA_SMALL.d_model, N_LABELS, dropout=DEBERTA_SMALL.dropout))
    state = {k.removeprefix(deberta_convert.BASE_PREFIX): v for k, v in hf.state_dict().items()}
    ours.encoder.load_state_dict(deberta_convert.from_hf(state, DEBERTA_SMALL))
    ours.head.classifier.load_state_dict({"weight": state["classifier.weight"], "bias": state["classifier.bias"]})
    return ours.to(device), hf.to(device)


def finetune_benchmark(args, device: torch.device) -> list[dict]:
    _, tokenizer = load_encoder(downloaded("all-minilm-l6-v2"))  # a BERT uncased vocabulary (30522)
    return timed_finetuning(args, device, "bert-small (4x512)", classifier_pair(device), tokenizer)


def deberta_benchmark(args, device: torch.device) -> list[dict]:
    tokenizer = train_wordpiece(mixed_sentences(4000, seed=2), 8000)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    return timed_finetuning(args, device, "deberta-v3 (4x512)", deberta_classifier_pair(device), tokenizer)


def timed_finetuning(args, device: torch.device, model: str, pair: tuple[EncoderWithHead, torch.nn.Module],
                     tokenizer) -> list[dict]:
    """Steps/s of the lmlab and HF classifiers `pair` (same weights, logits checked equal) on the same
    padded batches of `tokenizer`'s ids, interleaved."""
    texts = mixed_sentences(args.batch_size * 4, seed=1)
    batches = []
    for start in range(0, len(texts), args.batch_size):
        ids, mask, types = encode_batch(tokenizer, texts[start:start + args.batch_size])
        labels = torch.tensor([len(t) % N_LABELS for t in texts[start:start + args.batch_size]])
        batches.append({"input_ids": ids.to(device), "attention_mask": mask.to(device),
                        "token_type_ids": types.to(device), "labels": labels.to(device)})
    ours, hf = pair
    ours.eval(), hf.eval()
    with torch.no_grad():
        b = batches[0]
        diff = (ours(b["input_ids"], b["attention_mask"], b["token_type_ids"]) - hf(
            b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"]).logits)
    max_diff = diff.abs().max().item()
    assert max_diff <= 1e-4, f"lmlab and HF logits differ by {max_diff}"
    total = (args.rounds + 1) * args.steps
    steps = {"lmlab": LmlabStep(ours, total), "hf": HFStep(hf, total)}

    def run(name: str):
        return lambda: [steps[name](batches[i % len(batches)]) for i in range(args.steps)]

    for name in steps:
        run(name)()  # warm-up
    seconds = interleaved({name: run(name) for name in steps}, args.rounds, device)
    return [row("finetune", model, name, seconds, args.steps, "steps/s") | {
            "max_abs_diff_vs_hf": max_diff, "tokens_per_batch": [int(b["input_ids"].numel()) for b in batches],
            "real_tokens_per_batch": [int(b["attention_mask"].sum()) for b in batches]} for name in seconds]


BENCHMARKS = {"embed": embedding_benchmark, "finetune": finetune_benchmark, "deberta": deberta_benchmark}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()[0]
    results = [r for name in args.only for r in BENCHMARKS[name](args, device)]
    print(f"device {device_name(device)}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, fp32, batch {args.batch_size}, {args.rounds} rounds (median); "
          f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'benchmark':<10}{'model':<20}{'impl':<15}{'rate':>12}  {'unit':<12}{'lmlab/HF':>9}"
          f"  {'paired: median (range)':<24}")
    for r in results:
        low, high = r["paired_speedup_range"]
        print(f"{r['benchmark']:<10}{r['model']:<20}{r['impl']:<15}{r['rate']:>12.2f}  {r['unit']:<12}"
              f"{r['speedup_vs_hf']:>8.2f}x  {r['paired_speedup_median']:.2f}x ({low:.2f}-{high:.2f})")
    real = [n / total for r in results if r["benchmark"] == "finetune" and r["impl"] == "hf"
            for n, total in zip(r["real_tokens_per_batch"], r["tokens_per_batch"])]
    if real:
        print(f"fine-tuning batches: {min(real):.0%}-{max(real):.0%} real tokens, the rest padding")
    machine = {"device": str(device), "device_name": device_name(device), "cpu_count": os.cpu_count(),
               "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
               "transformers": transformers.__version__, "python": platform.python_version(),
               "load_average_1min": [load_before, os.getloadavg()[0]]}
    settings = {"batch_size": args.batch_size, "sentences": args.sentences, "steps": args.steps,
                "rounds": args.rounds, "quick": args.quick, "lr": LR, "weight_decay": WEIGHT_DECAY,
                "grad_clip": GRAD_CLIP, "bert_small": vars(BERT_SMALL), "deberta_small": vars(DEBERTA_SMALL),
                "only": args.only}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
