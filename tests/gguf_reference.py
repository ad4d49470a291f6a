"""The references for GGUF quantization types: tiny random Llamas written in a given type (by gguf-py where
it quantizes that type, by llama.cpp's own quantizer, through llama-cpp-python, where it does not), and
transformers' LlamaForCausalLM on gguf-py's dequantization of the same file."""

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from gguf_files import logits, write_gguf
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.modules.kv_cache import KVCache

GGUF_PY_TYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0)  # the block types gguf.quants.quantize writes
FTYPES = {  # the block type -> the llama.cpp file type whose default (with `pure`) it is
    Q.Q2_K: "LLAMA_FTYPE_MOSTLY_Q2_K", Q.Q3_K: "LLAMA_FTYPE_MOSTLY_Q3_K_M", Q.Q4_K: "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    Q.Q5_K: "LLAMA_FTYPE_MOSTLY_Q5_K_M", Q.Q6_K: "LLAMA_FTYPE_MOSTLY_Q6_K", Q.IQ4_NL: "LLAMA_FTYPE_MOSTLY_IQ4_NL",
    Q.IQ4_XS: "LLAMA_FTYPE_MOSTLY_IQ4_XS", Q.Q5_0: "LLAMA_FTYPE_MOSTLY_Q5_0", Q.Q5_1: "LLAMA_FTYPE_MOSTLY_Q5_1",
    Q.Q8_0: "LLAMA_FTYPE_MOSTLY_Q8_0", Q.Q4_0: "LLAMA_FTYPE_MOSTLY_Q4_0", Q.Q4_1: "LLAMA_FTYPE_MOSTLY_Q4_1",
}
FALLBACK = {Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.IQ4_XS: Q.IQ4_NL}
# what llama.cpp (llama-quant.cpp, tensor_type_fallback) stores a row whose width is not a multiple of 256 as
PROMPTS = [torch.randint(0, 250, (n,), generator=torch.Generator().manual_seed(100 + n)).tolist() for n in (3, 7, 12)]
# held-out prompts: ids the logit batches (gguf_files.IDS) do not start with


def wide_model(vocab_size: int, d_model: int, d_ff: int, seed: int = 0):
    """A random 2-layer Llama (grouped-query attention, untied head) with rows `d_model` and `d_ff` wide and
    norms that are not all ones."""
    torch.manual_seed(seed)
    cfg = preset("llama-tiny", vocab_size=vocab_size, context_length=64, n_layers=2, n_heads=4, n_kv_heads=2,
                 d_model=d_model, d_ff=d_ff, rope_base=500.0, tie_embeddings=False)
    model = build_decoder(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def written_as(directory: Path, model, tokenizer, qtype: Q) -> Path:
    """`model` as a GGUF file whose matrices are `qtype` (the norms F32): written by gguf-py where it quantizes
    `qtype`, else an F32 file requantized by llama.cpp (`pure`: every matrix in `qtype`, or its fallback where
    a row is not a multiple of 256 wide). Skips the test when llama-cpp-python is not installed."""
    if qtype in GGUF_PY_TYPES:
        return write_gguf(directory / f"{qtype.name}.gguf", model, tokenizer, {"weight": qtype})
    source = write_gguf(directory / "f32.gguf", model, tokenizer)
    return quantized_by_llama_cpp(source, directory / f"{qtype.name}.gguf", FTYPES[qtype], pure=True)


def quantized_by_llama_cpp(source: Path, out: Path, ftype: str, pure: bool = False) -> Path:
    """`source` quantized by llama.cpp's quantizer (llama-cpp-python's `llama_model_quantize`) into the llama.cpp
    file type `ftype` ("LLAMA_FTYPE_MOSTLY_Q4_K_M", …), requantizing quantized tensors if needed."""
    llama_cpp = llama_cpp_module()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype)
    params.allow_requantize = True
    params.pure = pure
    params.nthread = 1
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} as {ftype}")
    return out


def matrix_types(path: Path) -> dict[str, Q]:
    """GGUF tensor name -> type, for the file's matrices."""
    return {t.name: t.tensor_type for t in GGUFReader(path).tensors if len(t.shape) == 2}


def transformers_model(path: Path):
    """transformers' LlamaForCausalLM reading the GGUF file at `path` (gguf-py dequantizes it), fp32."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # transformers needs it to read GGUF files
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                             dtype=torch.float32).eval()


def reference_greedy(reference, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy continuation of `prompt`, `n` tokens (no stop token)."""
    with torch.no_grad():
        out = reference.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def greedy(model, prompt: list[int], n: int) -> list[int]:
    """lmlab's greedy continuation of `prompt`, `n` tokens, decoded step by step with a KV cache (the path
    generation takes, quantized kernels included)."""
    cfg = model.config
    cache = KVCache(cfg.n_layers, 1, cfg.n_kv_heads, cfg.head_dim, len(prompt) + n)
    ids, new = torch.tensor([prompt]), []
    with torch.no_grad():
        for _ in range(n):
            ids = model(ids, kv_cache=cache)[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            new.append(ids.item())
    return new


def assert_same_choices_but_ties(model, reference, ids: list[int], start: int):
    """Teacher-forced on `ids` (the reference's greedy continuation from `start`): at every position `model`
    picks the reference's token unless the reference's logits for the two picks differ by less than twice
    the largest logit error there (a tie within the quantization's error)."""
    batch = torch.tensor([ids])
    ours, theirs = logits(model, batch)[0, start - 1:-1], logits(reference, batch)[0, start - 1:-1]  # (T, V)
    picked, expected = ours.argmax(-1), theirs.argmax(-1)
    margin = theirs.gather(-1, expected[:, None]) - theirs.gather(-1, picked[:, None])  # (T, 1)
    tolerance = 2 * (ours - theirs).abs().amax(-1, keepdim=True)
    assert ((picked == expected)[:, None] | (margin <= tolerance)).all(), (picked, expected)


def llama_cpp_greedy(path: Path, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """llama.cpp's `n` greedy tokens after `prompt` (its KV cache in fp32) and its logits along the way,
    (n, V)."""
    llama_cpp = llama_cpp_module()
    f32 = llama_cpp.GGML_TYPE_F32
    reference = llama_cpp.Llama(str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=1, type_k=f32,
                                type_v=f32)
    try:
        tokens = list(prompt)
        reference.eval(tokens)
        for _ in range(n):
            tokens.append(int(reference.scores[reference.n_tokens - 1].argmax()))
            reference.eval(tokens[-1:])
        scores = torch.from_numpy(reference.scores[len(prompt) - 1:reference.n_tokens - 1].copy())
        return tokens[len(prompt):], scores
    finally:
        reference.close()


def assert_llama_cpp_decodes_as(model, path: Path, prompt: list[int], n: int) -> None:
    """llama.cpp running the quantized GGUF file at `path` against lmlab's `model` read from the same file with
    its activations rounded as llama.cpp rounds them (`lmlab.load(path, mode, activations="int8")`): the same
    greedy tokens, and logits within 1e-4 of llama.cpp's (with fp32 activations they differ by about 1 % at
    every step) at least until a value that fp32 arithmetic in another order (another thread count, another
    kernel) puts a last bit away rounds to its other 8-bit neighbour, which moves the logits by up to a rounding
    step from there on: the closest step is within 1e-4."""
    theirs, their_logits = llama_cpp_greedy(path, prompt, n)
    assert greedy(model, prompt, n) == theirs
    with torch.no_grad():
        logits = model(torch.tensor([prompt + theirs]))[0, len(prompt) - 1:-1]  # (n, V)
    gaps = (logits - their_logits).abs().amax(-1)  # (n,)
    assert gaps.min() < 1e-4, gaps
