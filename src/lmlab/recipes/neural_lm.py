"""Training the fixed-window LM and the RNN / LSTM / GRU LMs with truncated backpropagation
through time (TBPTT).

Read top to bottom: documents -> the transformer's tokenizer and block split -> B parallel token
streams -> for each chunk of block_size tokens: run the model from the state the previous chunk
left, cross-entropy, backward (which stops at the chunk's start: the state is detached), then the
training loop's clipping and AdamW step (`lmlab.training.loop`) -> checkpoints that hold the carried
state (`session.state`), so a resumed run is exact -> a model directory. The window LM uses the
same loop: its state is the last n - 1 tokens, so every (n previous tokens -> next) pair of a
chunk is a training example, the first ones included. One process (a step's batch of streams
does not split into parts for gradient accumulation or torchrun); validation scores the held-out
blocks from a fresh state, as `mean_block_loss` does for transformers.

Random resets. Evaluation reads every block from the initial state, but a state carried across a
whole epoch is never initial after the first chunk. An LSTM trained so can learn cell states that
drift over thousands of tokens, and then predicts badly from a fresh one (markov corpus, ±0.1
embeddings, constant lr: validation perplexity 80, against 14 for the same run with resets). So
at each chunk start, a row's carried state goes back to the initial one with probability
STATE_RESET_PROBABILITY: the model learns to start from nothing, as it is evaluated, while most
chunks still carry the state (truncated BPTT). The draw is a function of the seed and step, so a
resumed run draws the same resets.
"""

import dataclasses
from pathlib import Path

import numpy as np
import torch

from lmlab.config import TrainConfig
from lmlab.data.blocks import split_blocks
from lmlab.data.corpora import load_corpus
from lmlab.data.streams import parallel_streams
from lmlab.data.tokens import tokenize_corpus
from lmlab.errors import LmlabError
from lmlab.eval.perplexity import held_out_loss
from lmlab.io.outputs import claim_run_dir
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.models import registry
from lmlab.models.neural_lm_files import save_neural_lm_dir
from lmlab.models.rnn import RNNConfig
from lmlab.models.window import WindowConfig
from lmlab.tokenizers.bpe import TOKENIZER_FILE, load_tokenizer, save_tokenizer, train_bpe
from lmlab.training import distributed
from lmlab.training.checkpoint import resume_checkpoint
from lmlab.training.device import training_device
from lmlab.training.loop import last_evaluation, run_steps, start_session
from lmlab.training.result import PretrainResult
from lmlab.training.sharding import decoder_only

DEFAULT_BLOCK_SIZE = 64  # tokens per chunk (the BPTT truncation length) when TrainConfig.block_size is None
STATE_RESET_PROBABILITY = 0.1  # per row and chunk: a carried state lives 10 chunks on average
def train_neural_lm(model_cfg: WindowConfig | RNNConfig, train_cfg: TrainConfig, data: str, out: str | Path,
                    tokenizer: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
                    device: str = "auto", show_progress: bool = True) -> PretrainResult:
    """Train a window or recurrent LM on `data` (a path or an embedded corpus name) into the run directory `out`.

    As `lmlab.recipes.pretrain.pretrain`: `tokenizer` is a tokenizer.json (or its directory), else a
    byte-level BPE of `model_cfg.vocab_size` is trained on the data; `stop_after` ends the session
    after that many steps with a checkpoint (continue with `resume=True`); so does Ctrl-C.
    """
    out = Path(out)
    decoder_only(train_cfg.loop.fsdp, train_cfg.max_memory, "the window and RNN LMs")
    processes = distributed.current().world_size
    accum = train_cfg.loop.grad_accum
    if accum * processes != 1:  # each row carries its state to the next step: a batch does not split
        raise LmlabError(f"--grad-accum {accum} over {processes} process(es): the window and RNN LMs "
                         "train one whole batch per step; drop --grad-accum and run in one process (no torchrun)")
    train_cfg = train_cfg.replace(block_size=train_cfg.block_size or DEFAULT_BLOCK_SIZE)
    ckpt = resume_checkpoint(out, resume)
    dev = training_device(device)

    # 1. Text and tokenizer, as for the transformers (nothing is written before the data is read).
    texts = load_corpus(data)
    tok_file = out / TOKENIZER_FILE
    if not tok_file.exists():
        made = load_tokenizer(tokenizer) if tokenizer else train_bpe(texts, model_cfg.vocab_size)
        claim_run_dir(out)  # after the tokenizer is read or trained: a bad one leaves nothing behind
        save_tokenizer(made, out)
    tok = load_tokenizer(tok_file)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=tok.get_vocab_size())

    # 2. The transformer's block split (same validation blocks), training blocks laid out as B streams.
    tokens = tokenize_corpus(texts, tok)
    block_size, batch_size, seed = train_cfg.block_size, train_cfg.loop.batch_size, train_cfg.loop.seed
    split = split_blocks(tokens, block_size, train_cfg.val_fraction, seed)
    streams = parallel_streams(tokens, split.train_blocks, block_size, batch_size)
    settings = {"recipe": "neural_lm", "model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(train_cfg),
                "data": data, "data_key": Path(tokens.filename).stem}

    # 3. The model and its session; the state carried from chunk to chunk is the session's, so a
    # checkpoint holds it and a resumed run continues each stream where it stopped.
    torch.manual_seed(seed)
    model = registry.build(model_cfg).to(dev)
    session = start_session(out, model, train_cfg.optim, train_cfg.loop, settings, ckpt)
    session.state.setdefault("carried", model.initial_state(batch_size))

    def step_loss(step: int, part: int, parts: int) -> tuple[torch.Tensor, dict]:
        carried = tuple(t.to(dev) for t in session.state["carried"])
        if streams.starts_epoch(step):
            carried = model.initial_state(batch_size)
        carried = model.reset_rows(carried, reset_draw(seed, step, batch_size).to(dev))
        inputs, targets = (t.to(dev, non_blocking=True) for t in streams.chunk(step))  # (B, T) each
        logits, carried = model.unroll(inputs, carried)  # (B, T, V)
        session.state["carried"] = tuple(t.detach() for t in carried)  # the next chunk's gradient stops here
        return cross_entropy(logits, targets), {}

    def validate() -> dict:
        return held_out_loss(model, split, train_cfg.eval_batches, batch_size, dev)

    # 4. Train; then the model directory, once training has reached max_steps.
    finished = run_steps(session, step_loss, validate, stop_after, show_progress, ylabel="loss (nats/token)",
                         throughput=("tokens_per_s", batch_size * block_size))
    if finished:
        save_neural_lm_dir(model, out / "model", tok)
    return PretrainResult(step=session.step, val_loss=last_evaluation(session).get("val_loss"),
                          model_dir=out / "model" if finished else None, interrupted=not finished)


def reset_draw(seed: int, step: int, batch_size: int) -> torch.Tensor:
    """Which rows (B,) bool start the chunk at `step` from the initial state: each with probability
    STATE_RESET_PROBABILITY, drawn from (seed, step) alone."""
    rng = np.random.default_rng((seed, step))
    return torch.from_numpy(rng.random(batch_size) < STATE_RESET_PROBABILITY)
