"""A tiny chat model for the post-training tests (SFT, reward, PPO, DPO): a random Llama with a ChatML
template and a tokenizer trained on the addition task, the settings of a 4-step run on it (as a
PostTrainConfig and as CLI flags) and a toy reward."""

import torch

from lmlab.config import LoopConfig, OptimConfig
from lmlab.data.tasks import task_examples
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer
from lmlab.training.post_training import PostTrainConfig

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# A tiny run on the addition task with operands up to 9 (100 questions): 4 steps of 4 chats.
TINY_RUN = PostTrainConfig(loop=LoopConfig(max_steps=4, batch_size=4, eval_every=2, checkpoint_every=2,
                                           keep_checkpoints=2, log_every=1), block_size=48,
                           optim=OptimConfig(lr=1e-2, warmup_steps=1, weight_decay=0.0), lora_rank=4, task_size=60,
                           task_max_operand=9, task_eval_size=4)
TINY_FLAGS = ["--max-steps", "4", "--batch-size", "4", "--block-size", "48", "--lr", "0.01", "--warmup-steps", "1",
              "--eval-every", "2", "--checkpoint-every", "2", "--lora-rank", "4", "--task-size", "60",
              "--task-max-operand", "9", "--task-eval-size", "4"]


def tiny_chat_model(directory, seed: int = 0, context_length: int = 64):
    """A tiny random Llama with a ChatML template and a BPE tokenizer trained on the task, saved as
    a model directory that `lmlab.load` reads (what a zoo model is, 2 layers of width 32, a context of
    `context_length` tokens)."""
    texts = [m["content"] for chat in task_examples(200) for m in chat] + ["user", "assistant", "system"]
    backend = train_bpe(texts, 300)
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    im_end = backend.token_to_id("<|im_end|>")
    torch.manual_seed(seed)
    model = build_decoder(preset("llama-tiny", vocab_size=backend.get_vocab_size(), context_length=context_length,
                                 n_layers=2, n_heads=2, n_kv_heads=1, d_model=32, d_ff=64))
    save_hf_dir(model, directory)
    TextTokenizer(backend, eos_id=im_end, pad_id=2, stop_ids=(im_end,), chat_template=CHATML).save(directory)
    return directory


def ascii_letters(prompt: list[dict], reply: str) -> float:
    """The toy reward: the share of the reply's characters that are ASCII letters."""
    return sum(c.isascii() and c.isalpha() for c in reply) / max(len(reply), 1)
