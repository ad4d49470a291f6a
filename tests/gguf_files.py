"""Tiny GGUF files for tests: a random Llama with non-trivial norms, written in llama.cpp's layout
(any tensor type), the texts its tokenizer is trained on and a batch of ids to compare logits on."""

import json

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from lmlab.models.decoder import build_decoder
from lmlab.models.llama.gguf import config_to_gguf, to_gguf
from lmlab.models.presets import preset
from lmlab.tokenizers.gguf import CONTROL, NORMAL

TEXTS = ["the cat sat on the mat", "a dog ran after the cat, and the cat ran up a tree!", "héllo wörld 123 4567",
         "def f(x):\n    return x * 2\n"]
CHATML = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")
IDS = torch.randint(0, 200, (2, 24), generator=torch.Generator().manual_seed(1))  # (B, T) below every tiny vocab


def tiny_model(vocab_size: int, tie: bool = True, seed: int = 0):
    """A random 2-layer Llama (grouped-query attention) whose norms are not all ones."""
    torch.manual_seed(seed)
    cfg = preset("llama-tiny", vocab_size=vocab_size, context_length=64, n_layers=2, n_heads=4, n_kv_heads=2,
                 d_model=64, d_ff=256, rope_base=500.0, tie_embeddings=tie)
    model = build_decoder(cfg).eval()
    with torch.no_grad():  # norms start at 1; make them count
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def write_gguf(path, model, tokenizer, types=None, arch="llama", tokenizer_model="gpt2"):
    """Write `model` and `tokenizer` as a llama.cpp-style GGUF file; `types` maps a GGUF tensor-name
    suffix ("attn_q.weight", "token_embd.weight", …) to the type it is stored as (default F32)."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in config_to_gguf(cfg).items():
        (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(key, value)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL if t.startswith("<|") else NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(vocab["<|bos|>"])
    writer.add_eos_token_id(vocab["<|eos|>"])
    writer.add_pad_token_id(vocab["<|pad|>"])
    writer.add_chat_template(CHATML)
    for name, tensor in to_gguf(model.state_dict(), cfg).items():
        values = tensor.detach().float().numpy()
        qtype = next((t for suffix, t in (types or {}).items() if name.endswith(suffix)), Q.F32)
        if qtype == Q.F32 or values.ndim == 1:
            writer.add_tensor(name, values)
        elif qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):  # gguf-py cannot quantize these: all-zero blocks decode to 0
            writer.add_tensor(name, np.zeros(gguf.quant_shape_to_byte_shape(values.shape, qtype), np.uint8),
                              raw_dtype=qtype)
        else:
            writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def logits(model, ids):
    """(B, T, V) logits without gradients."""
    with torch.no_grad():
        return model(ids)


def fitted(model, ids: list[int], steps: int, lr: float):
    """`model` after `steps` AdamW steps of next-token prediction on the token ids `ids`, in eval mode: a
    trained model's greedy choices are clear, where a random model's top two logits are often closer than
    quantization (or fp32's last bits under it) moves them."""
    batch = torch.tensor([ids])  # (1, T)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(batch[:, :-1])[0], batch[0, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
