"""`lmlab.load(..., activations="int8")`: each quantized matrix's input rounded as llama.cpp rounds it for the
GGUF type of its weight (Q8_0 / Q8_1 blocks of 32, Q8_K blocks of 256), so lmlab on a GGUF file decodes
llama.cpp's tokens; with fp32 activations it does not."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

import lmlab
from conftest import lmlab as run_lmlab
from gguf_files import TEXTS, fitted, write_gguf
from gguf_reference import PROMPTS, assert_llama_cpp_decodes_as, greedy, llama_cpp_greedy, wide_model, written_as
from lmlab.errors import LmlabError
from lmlab.generation.batch import new_cache
from lmlab.generation.fused import fused_step, fused_step_refusal
from lmlab.models.decoder_files import save_hf_dir
from lmlab.modules.activation_rounding import round_activations
from lmlab.modules.quantized import QuantizedLinear
from lmlab.tokenizers.bpe import train_bpe

MODE = {Q.Q8_0: "int8", Q.Q4_0: "int4", Q.Q4_1: "int4", Q.Q4_K: "int4"}  # the mode that keeps the type's blocks
ROUNDING = {Q.Q8_0: "q8_0", Q.Q4_0: "q8_0", Q.Q4_1: "q8_1", Q.Q4_K: "q8_K"}


def trained_model(tokenizer):
    """A 2-layer Llama (rows 256 and 512 wide, as Q4_K needs) after 100 AdamW steps on TEXTS (2 s)."""
    model = wide_model(tokenizer.get_vocab_size(), 256, 512)
    return fitted(model, sum((tokenizer.encode(text).ids for text in TEXTS), []), 100, 3e-3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """GGUF type -> `trained_model` written in that type."""
    root, tokenizer = tmp_path_factory.mktemp("activations"), train_bpe(TEXTS * 20, vocab_size=300)
    model = trained_model(tokenizer)
    return {qtype: written_as(root, model, tokenizer, qtype) for qtype in MODE}


def roundings(model) -> set[str | None]:
    """How the model's quantized layers round their inputs (None: fp32 activations)."""
    return {layer.activations for layer in model.modules() if isinstance(layer, QuantizedLinear)}


@pytest.mark.parity
@pytest.mark.parametrize("qtype", list(MODE), ids=lambda t: t.name)
def test_lmlab_as_stored_rounds_activations_and_decodes_llama_cpps_tokens(files, qtype):
    model, _ = lmlab.load(files[qtype])  # the defaults: the file's own blocks, rounded as llama.cpp rounds
    assert roundings(model) == {ROUNDING[qtype]}
    assert roundings(lmlab.load(files[qtype], MODE[qtype], activations="int8")[0]) == {ROUNDING[qtype]}
    for prompt in PROMPTS:
        assert_llama_cpp_decodes_as(model, files[qtype], prompt, 32)


@pytest.mark.parity
def test_with_fp32_activations_the_logits_are_a_rounding_away_from_llama_cpps(files):
    """What the rounding is for: without it lmlab's logits differ from llama.cpp's at every step by far more than
    the 1e-4 they agree to with it."""
    model, _ = lmlab.load(files[Q.Q8_0], "int8", activations="fp32")
    theirs, their_logits = llama_cpp_greedy(files[Q.Q8_0], PROMPTS[0], 8)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPTS[0] + theirs]))[0, len(PROMPTS[0]) - 1:-1]
    assert (logits - their_logits).abs().amax(-1).min() > 1e-4  # at every step


def test_q8_0_values_lie_on_the_blocks_grid_and_q8_k_takes_the_largest_magnitudes_sign():
    x = torch.randn(3, 512) * torch.logspace(-1, 2, 512)  # (3, 512), magnitudes over three decades
    q8_0 = round_activations(x, "q8_0").view(3, 16, 32)
    exact = x.view(3, 16, 32).abs().amax(-1, keepdim=True) / 127  # (3, 16, 1): the step before fp16 rounds it
    d = exact.half().float()
    assert torch.equal(q8_0, (q8_0 / d).round() * d) and (q8_0 / d).abs().max() <= 127
    assert ((q8_0 - x.view(3, 16, 32)).abs() <= exact / 2 + 127 * (d - exact).abs() + 1e-6).all()
    block = torch.zeros(256)
    block[7], block[9] = -2.0, 1.0  # the largest magnitude is negative: scale 1 / (127 / 2), q = 127 there
    rounded = round_activations(block, "q8_K")
    assert rounded[7] == -2.0 and rounded[9] == round(127 / 2) * (1 / (127 / 2))
    assert torch.equal(round_activations(torch.zeros(256), "q8_K"), torch.zeros(256))


@pytest.mark.parametrize("qtype", list(MODE), ids=lambda t: t.name)
def test_rounded_activations_run_the_fused_step_with_the_modules_logits(files, qtype):
    """The C++ step rounds each matrix's input as its layer does and multiplies the integers: its logits are the
    modules' (which round in the same C++ op, checked against activation_rounding.py in test_quantized.py)."""
    model, _ = lmlab.load(files[qtype], MODE[qtype], activations="int8")
    assert fused_step_refusal(model) is None
    step, ids = fused_step(model), torch.tensor([PROMPTS[0][:5]])  # (1, 5)
    cache = new_cache(model, 1, 16)
    with torch.no_grad():
        fused = step(ids, cache.k, cache.v, [0])  # (1, 5, V): the five tokens in one call
        modules = model(ids)  # (1, 5, V)
    torch.testing.assert_close(fused, modules, rtol=1e-5, atol=1e-5)


def test_by_default_only_matrices_from_quantized_gguf_types_take_rounded_activations(tmp_path, files):
    """What llama.cpp multiplies in floats keeps fp32 activations: a matrix from an F16 tensor (re-quantized
    to int8 by lmlab), a float model quantized by lmlab, and a file whose stacked parts round differently."""
    tokenizer = train_bpe(TEXTS * 20, vocab_size=300)
    model = wide_model(tokenizer.get_vocab_size(), 256, 512)
    beside_f16 = write_gguf(tmp_path / "f16.gguf", model, tokenizer, {"ffn_down.weight": Q.F16, "weight": Q.Q4_0})
    loaded, _ = lmlab.load(beside_f16, "int4")
    assert {block.feed_forward.down.activations for block in loaded.blocks} == {None}
    assert roundings(loaded) == {None, "q8_0"}
    mixed = write_gguf(tmp_path / "mixed.gguf", model, tokenizer, {"attn_q.weight": Q.Q4_1, "weight": Q.Q4_0})
    assert roundings(lmlab.load(mixed)[0]) == {None}  # q (Q8_1 inputs) stacked with k and v (Q8_0 inputs)
    with pytest.raises(LmlabError, match="cannot round as llama.cpp does"):
        lmlab.load(mixed, activations="int8")
    assert roundings(lmlab.load(files[Q.Q4_1], activations="fp32")[0]) == {None}
    float_model = save_hf_dir(model, tmp_path / "hf", tokenizer)
    assert roundings(lmlab.load(float_model, "int4")[0]) == {None}


def test_activations_int8_needs_a_quantized_model_and_takes_int8_only(files):
    with pytest.raises(LmlabError, match="add --dtype int8 or int4"):
        lmlab.load(files[Q.Q8_0], "fp32", activations="int8")
    as_stored, _ = lmlab.load(files[Q.Q8_0], activations="int8")  # a quantized file loads quantized by default
    assert {layer.activations for layer in as_stored.modules() if hasattr(layer, "activations")} == {"q8_0"}
    with pytest.raises(LmlabError, match="activations 'int4'"):
        lmlab.load(files[Q.Q8_0], "int8", activations="int4")


def test_generate_takes_activations_int8(files, capsys):
    model, tokenizer = lmlab.load(files[Q.Q4_K], "int4", activations="int8")
    assert run_lmlab("generate", "--model", files[Q.Q4_K], "--dtype", "int4", "--activations", "int8", "--greedy",
                     "--max-new-tokens", 6, "--prompt", "the cat") == 0
    printed = capsys.readouterr()
    assert "decodes through its modules" not in printed.err  # the fused step runs it
    expected = tokenizer.decode(greedy(model, tokenizer.encode("the cat"), 6))
    assert printed.out.strip().endswith(expected.strip())


@pytest.mark.slow
def test_smollm2_with_rounded_activations_hangs_on_the_last_bits_of_fp32():
    """Why lmlab and llama.cpp part on SmolLM2 with the same rounding (docs/export.md): a relative change of 1e-7
    in the embeddings (a float's last bits) moves its logits by a whole 8-bit rounding step's effect, not by a
    float rounding's as with fp32 activations."""
    from real_models import real_model

    path, moves = real_model("smollm2-135m-instruct"), {}
    torch.manual_seed(0)
    for activations in ("fp32", "int8"):
        model, tokenizer = lmlab.load(path, "int4", activations=activations)
        ids = torch.tensor([tokenizer.encode("The history of Rome")])
        embedding = model.token_embedding.forward
        with torch.no_grad():
            logits = model(ids)[0, -1]
            model.token_embedding.forward = lambda i, rows=embedding: rows(i) * (1 + 1e-7 * torch.randn(1, i.shape[-1], 576))
            moves[activations] = float((model(ids)[0, -1] - logits).abs().max())
    assert moves["fp32"] < 1e-3 < 1e-2 < moves["int8"], moves
