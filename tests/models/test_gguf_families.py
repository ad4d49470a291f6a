"""GGUF files of the Llama-like families, written by llama.cpp's own converter (convert_hf_to_gguf.py, from the
llama-cpp-python source distribution: `llama_cpp_converter.py`) from a tiny random-weight transformers model:
lmlab loads each with the logits transformers gives on the HF directory, and the greedy tokens llama.cpp
(llama-cpp-python) gives on the file. One family runs by default; every family with -m slow (a conversion
takes about 7 s).

The converter names a byte-level BPE vocabulary's pre-tokenizer by hashing how it encodes a fixed text, which
only published vocabularies match: OLMo 2 (which has no SentencePiece path) is converted with that name set
to "gpt-2" (the split of the vocabulary trained here); the weights and the architecture's keys are the
converter's own. The other families carry a SentencePiece tokenizer.model trained here."""

import dataclasses

import pytest
import torch

import lmlab
from hf_models import FAMILY_TINY, hf_model
from llama_cpp_converter import convert_hf_to_gguf, extracted_converter, tokenizer_files
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.errors import LmlabError
from lmlab.models.llama import gguf as llama_gguf
from lmlab.models.llama.rope_freqs import ROPE_FREQS, llama3_factors, llama3_settings
from lmlab.models.presets import preset
from lmlab.models.qwen2 import gguf as qwen2_gguf

pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]

SPM_VOCAB, BPE_VOCAB = 500, 300
# case -> (the lmlab preset of its family, its settings); windows are narrower than the test sequences,
# except Phi-3's: llama.cpp computes Phi-3 without its window (see models/phi3/gguf.py)
CASES = {
    "llama-llama3-rope": ("llama-tiny", FAMILY_TINY["llama-llama3-rope"]),
    "mistral": ("mistral-tiny", FAMILY_TINY["mistral"]),
    "qwen2": ("qwen2-tiny", FAMILY_TINY["qwen2"]),
    "qwen3": ("qwen3-tiny", FAMILY_TINY["qwen3"]),
    "olmo2": ("olmo2-tiny", FAMILY_TINY["olmo2"]),
    "phi3": ("phi3-tiny", FAMILY_TINY["phi3"] | {"sliding_window": 16}),
    # llama.cpp scales Gemma's queries by 1 / sqrt(head size) (the 27B's aside) and puts Gemma 3's global layer
    # every sixth, as the published checkpoints have them; the file holds neither
    # (and its converter writes no RoPE base for Gemma 2: llama.cpp's default is Gemma 2's 10000)
    "gemma2": ("gemma2-tiny", FAMILY_TINY["gemma2"] | {"attention_scale": 12 ** -0.5, "rope_base": 10000.0}),
    "gemma3": ("gemma3-tiny", FAMILY_TINY["gemma3-linear-rope"] | {"n_layers": 6, "global_every": 6,
                                                                   "attention_scale": 14 ** -0.5}),
}
DEFAULT = "llama-llama3-rope"  # Llama's q/k row order and Llama 3.1's rope_freqs
LENGTH = {"mistral": 5}  # llama.cpp's converter writes no window for Mistral: equal to transformers within it
PROMPT, NEW_TOKENS = [7, 93, 41, 250, 12], 8
# llama.cpp computes in fp32 too (its KV cache set to fp32), but its GELU reads a table of fp16 values: the
# Gemmas' logits differ from lmlab's (and transformers') by up to 5e-4, the others' by 3e-7
LLAMA_CPP_ATOL = {"gemma2": 1e-3, "gemma3": 1e-3}

def config(case: str):
    name, settings = CASES[case]
    return preset(name, **settings | {"vocab_size": BPE_VOCAB if case == "olmo2" else SPM_VOCAB})


@pytest.fixture(scope="module")
def converted(tmp_path_factory, request):
    """case -> (HF directory, GGUF file llama.cpp's converter wrote from it), each converted once per module."""
    root = tmp_path_factory.mktemp("gguf-families")
    cache = request.config.cache
    converter = extracted_converter(cache.mkdir("llama-cpp-converter"))
    done = {}

    def convert(case: str):
        if case not in done:
            hf_dir, out = root / case, root / f"{case}.gguf"
            model = hf_model(config(case))
            bos, eos = (None, None) if case == "olmo2" else (1, 2)  # the vocabulary's, not the family's defaults
            model.config.bos_token_id, model.config.eos_token_id = bos, eos
            model.generation_config.bos_token_id, model.generation_config.eos_token_id = bos, eos
            model.save_pretrained(hf_dir)
            tokenizer_files(config(case).family, hf_dir, root, config(case).vocab_size)
            done[case] = hf_dir, convert_hf_to_gguf(converter, hf_dir, out, pre="gpt-2")
        return done[case]

    return convert


def cases():
    return [pytest.param(case, marks=() if case == DEFAULT else pytest.mark.slow) for case in CASES]


@pytest.mark.parametrize("case", cases())
def test_a_converted_file_loads_with_transformers_logits(converted, case):
    transformers = pytest.importorskip("transformers")
    hf_dir, path = converted(case)
    model, _ = lmlab.load(path)
    expected = config(case)
    if case == "mistral":  # arch "llama" without a window: Llama
        expected = dataclasses.replace(expected, family="llama", sliding_window=None)
    # fp32 in the file: the norm epsilon; llama3 settings that give the same factors (test_llama3_rope_…)
    assert model.config.norm_eps == pytest.approx(expected.norm_eps, rel=1e-6)
    assert dataclasses.replace(model.config, norm_eps=expected.norm_eps,
                               rope_original_context=expected.rope_original_context,
                               rope_low_freq_factor=expected.rope_low_freq_factor,
                               rope_high_freq_factor=expected.rope_high_freq_factor) == expected
    reference = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    ids = torch.randint(0, expected.vocab_size, (2, LENGTH.get(case, 24)), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(ids).logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", cases())
def test_greedy_tokens_equal_llama_cpps_on_the_file(converted, case):
    llama_cpp = llama_cpp_module()
    _, path = converted(case)
    model, _ = lmlab.load(path)
    ours, theirs = list(PROMPT), list(PROMPT)
    f32 = llama_cpp.GGML_TYPE_F32  # its KV cache too (f16 by default)
    reference = llama_cpp.Llama(str(path), n_ctx=model.config.context_length, logits_all=True, verbose=False,
                                n_threads=1, type_k=f32, type_v=f32)
    reference.eval(theirs)
    for _ in range(NEW_TOKENS):
        with torch.no_grad():
            logits = model(torch.tensor([ours]))[0, -1]
        their_logits = torch.from_numpy(reference.scores[reference.n_tokens - 1].copy())
        assert (logits - their_logits).abs().max() < LLAMA_CPP_ATOL.get(case, 1e-5)
        ours.append(int(logits.argmax()))
        theirs.append(int(their_logits.argmax()))
        reference.eval(theirs[-1:])
    assert ours == theirs


def test_llama3_rope_parameters_are_found_from_llama_cpps_factors():
    """Llama 3.1 and 3.2's own settings come back from the factors the converter writes, and tiny ones that the
    factors leave partly open come back as settings that give the same factors."""
    llama31 = preset("llama-tiny", d_model=4096, n_heads=32, rope_base=500000.0, context_length=131072,
                     rope_scaling="llama3", rope_factor=8.0, rope_original_context=8192)
    found = llama3_settings(llama3_factors(llama31), 128, 500000.0)
    assert found == {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_original_context": 8192,
                     "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0}
    tiny = config("llama-llama3-rope")
    found = llama3_settings(llama3_factors(tiny), tiny.head_dim, tiny.rope_base)
    torch.testing.assert_close(llama3_factors(tiny.replace(**found)), llama3_factors(tiny), rtol=1e-5, atol=0)
    assert llama3_settings(torch.ones(64), 128, 500000.0) == {}


def test_factors_no_llama3_scaling_gives_are_refused():
    factors = llama3_factors(config("llama-llama3-rope"))
    with pytest.raises(LmlabError, match="rope_freqs.weight' holds RoPE factors that no llama3 scaling gives"):
        llama3_settings(factors.flip(0), 8, 10000.0)
    with pytest.raises(LmlabError, match="factors below 1 or not finite"):
        llama3_settings(torch.tensor([1.0, 0.5, 2.0, 2.0]), 8, 10000.0)


def qwen2_meta(**changes) -> dict:
    cfg = config("qwen2")
    meta = {k.replace("llama.", "qwen2."): v for k, v in llama_gguf.config_to_gguf(cfg).items()}
    return meta | changes


@pytest.mark.parametrize("key, value, fragment", [
    ("qwen2.attention.sliding_window", 64, "'qwen2.attention.sliding_window'=64 belongs to a qwen2 variant"),
    ("qwen2.rope.scaling.type", "yarn", "'qwen2.rope.scaling.type'='yarn': lmlab reads none and linear"),
    ("qwen2.expert_count", 8, "'qwen2.expert_count'=8, but lmlab's qwen2 computes 0 only"),
    ("qwen2.rope.dimension_count", 4, "'qwen2.rope.dimension_count'=4 differs from embedding_length / head_count = 8"),
    ("qwen2.attention.value_length", 4, "value_length'=4 differs from key_length 8"),
])
def test_a_key_lmlab_does_not_compute_is_refused_in_one_line(key, value, fragment):
    cfg = config("qwen2")
    shapes = {name: tuple(t.shape) for name, t in llama_gguf.to_gguf(_meta_state(cfg), cfg, qwen2_gguf.LAYOUT).items()}
    assert qwen2_gguf.config_from_gguf(qwen2_meta(), shapes) == cfg
    with pytest.raises(LmlabError, match="^[^\n]*$") as error:
        qwen2_gguf.config_from_gguf(qwen2_meta(**{key: value}), shapes)
    assert fragment in str(error.value)


def test_a_llama_file_with_a_window_is_mistral():
    """llama.cpp's converter writes Mistral as "llama" without its window (it loads as Llama, above); a file
    that names the window loads as Mistral with it."""
    cfg = config("mistral")
    shapes = {name: tuple(t.shape) for name, t in llama_gguf.to_gguf(_meta_state(cfg), cfg).items()}
    meta = llama_gguf.config_to_gguf(cfg)  # lmlab's export names the window
    assert meta["llama.attention.sliding_window"] == cfg.sliding_window
    unnamed = {k: v for k, v in meta.items() if k != "llama.attention.sliding_window"}
    assert llama_gguf.config_from_gguf(unnamed, shapes) == cfg.replace(family="llama", sliding_window=None)
    assert llama_gguf.config_from_gguf(meta, shapes) == cfg


def test_llamas_rope_freqs_is_read_as_its_rope_scaling_once():
    cfg = config("llama-llama3-rope")
    tensors = llama_gguf.to_gguf(_meta_state(cfg), cfg)
    shapes, meta = {name: tuple(t.shape) for name, t in tensors.items()}, llama_gguf.config_to_gguf(cfg)
    found = llama_gguf.config_from_gguf(meta, shapes, tensors.get)
    assert (found.rope_scaling, found.rope_factor) == ("llama3", 8.0)
    torch.testing.assert_close(llama3_factors(found), tensors[ROPE_FREQS], rtol=1e-5, atol=0)
    with pytest.raises(LmlabError, match="scales RoPE twice"):
        llama_gguf.config_from_gguf(meta | {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0},
                                    shapes, tensors.get)


def test_window_patterns_read_as_llama_cpp_reads_them():
    meta = {"gemma3.attention.sliding_window": 5}
    read = llama_gguf.window_settings
    assert read(meta, "gemma3", 12, 6) == {"sliding_window": 5, "global_every": 6}
    assert read(meta, "gemma3", 2, 6) == {"sliding_window": 5, "global_every": 0}  # no sixth layer: all local
    flags = [True, False] * 3
    assert read(meta | {"gemma3.attention.sliding_window_pattern": flags}, "gemma3", 6, 6)["global_every"] == 2
    assert read(meta | {"gemma3.attention.sliding_window_pattern": 1}, "gemma3", 6, 6) == {}  # all global
    assert read({}, "gemma2", 4, 2, 4096) == {"sliding_window": 4096, "global_every": 2}  # llama.cpp's defaults
    with pytest.raises(LmlabError, match="is not a global layer every k layers"):
        read(meta | {"gemma3.attention.sliding_window_pattern": [False, True, True]}, "gemma3", 3, 6)


def test_layouts_round_trip_through_llama_cpps_names_and_row_order():
    """to_gguf then from_gguf gives each family's state back, llama's q/k rows reordered on the way (and not
    Qwen2's, whose biases go through the same split)."""
    from lmlab.models import registry
    for case in ("llama-llama3-rope", "qwen2"):
        cfg = config(case)
        gguf = registry.lookup(cfg.family).gguf
        state = registry.build(cfg).state_dict()
        written = llama_gguf.to_gguf(state, cfg, gguf.LAYOUT)
        q = state["blocks.0.attention.qkv.weight"][:cfg.n_heads * cfg.head_dim]
        assert torch.equal(written["blk.0.attn_q.weight"], q) == (case == "qwen2")
        back = gguf.from_gguf(written, cfg)
        assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
        assert (ROPE_FREQS in written) == (cfg.rope_scaling == "llama3")


def _meta_state(cfg):
    from lmlab.models import registry
    from lmlab.modules.meta import on_meta
    with on_meta():
        return registry.build(cfg).state_dict()
