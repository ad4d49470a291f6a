"""int8 and int4 decoders on the GPU compute what the CPU's C++ kernels compute: quantizing there gives the
same integers, a quantized layer the same products (its input kept fp32, or first rounded to 8 bits in
blocks as llama.cpp rounds it: q8_0, q8_1, q8_K), and a quantized model loaded with `lmlab.load` the same
logits and greedy tokens, with `activations="int8"` too. Skipped without CUDA; LMLAB_GPU_TESTS_DEVICE=cpu
runs it on the CPU (tests/gpu_device.py)."""

import pytest
import torch

from chat_models import tiny_chat_model
from gpu_device import DEVICE, on, on_device
from lmlab.generation import GenerationConfig, generate_batch
from lmlab.models.load import load
from lmlab.models.quantize import quantize_model
from lmlab.modules.quantized import QuantizedLinear
from lmlab.modules.quantized_formats import quantize_int4, quantize_int8

pytestmark = [on_device, pytest.mark.usefixtures("one_thread", "built_kernels")]

QUANTIZE = {"int8": quantize_int8, "int4": quantize_int4}
IN, OUT = 256, 96  # a whole block of q8_K (256) wide


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("chat"))


def weight() -> torch.Tensor:
    return torch.randn(OUT, IN, generator=torch.Generator().manual_seed(0)) * 0.05


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantizing_on_the_device_gives_the_cpu_s_integers(mode, chat_dir):
    cpu = QUANTIZE[mode](weight())
    device = QUANTIZE[mode](weight().to(DEVICE))
    assert torch.equal(device.q.cpu(), cpu.q) and torch.equal(device.scales.cpu(), cpu.scales)
    assert (device.mins is None) == (cpu.mins is None)
    if cpu.mins is not None:
        assert torch.equal(device.mins.cpu(), cpu.mins)
    model = load(chat_dir, "fp32")[0]
    quantized = quantize_model(on(model), mode).state_dict()
    for name, tensor in quantize_model(model, mode).state_dict().items():
        assert torch.equal(quantized[name].cpu(), tensor), name


@pytest.mark.parametrize("rows", [1, 3, 40])  # a decoding step, a few rows, a prompt (the kernels' GEMM path)
@pytest.mark.parametrize("activations", [None, "q8_0", "q8_1", "q8_K"])
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_a_quantized_layer_gives_the_cpu_kernels_products(mode, activations, rows):
    bias = torch.randn(OUT, generator=torch.Generator().manual_seed(1))
    layer = QuantizedLinear(QUANTIZE[mode](weight()), bias, activations)
    x = torch.randn(rows, IN, generator=torch.Generator().manual_seed(2))
    x[0, :32] = 0  # a block of zeros: its scale is 0
    expected = layer(x)
    device = on(layer)
    got = device(x.to(DEVICE))
    assert got.device.type == DEVICE.type
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    if activations is not None:  # the rounding happened on the device: fp32 inputs give other products
        device.activations = None
        assert (device(x.to(DEVICE)).cpu() - got.cpu()).abs().max() > 1e-4


@pytest.mark.parametrize("activations", ["fp32", "int8"])
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_a_quantized_model_gives_the_cpu_s_logits_and_greedy_tokens(chat_dir, mode, activations):
    """int8 activations are rounded from inputs that already differ in their last bits between the devices,
    which can put one on the other side of a rounding boundary: a step of its block's scale, hence the
    looser tolerance (the layer test above holds the rounding itself to fp32's)."""
    cpu, tokenizer = load(chat_dir, mode, activations=activations)
    device = on(cpu)
    ids = torch.randint(0, cpu.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = cpu(ids)
        got = device(ids.to(DEVICE)).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 if activations == "fp32" else 2e-3)
    prompts = [tokenizer.encode(text) for text in ("1+2=", "what is 3 + 4", "9")]
    config = GenerationConfig(max_new_tokens=16)
    assert ([g.token_ids for g in generate_batch(device, prompts, config)]
            == [g.token_ids for g in generate_batch(cpu, prompts, config)])
