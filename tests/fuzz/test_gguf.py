"""Fuzz: mutants of a tiny GGUF file (written with gguf's own writer) fed to `lmlab eval perplexity`.

Header fields, every tensor's dtype / offset / shape / ndims, truncation at many points, every
llama.* hyperparameter and tokenizer key made NaN / negative / zero / huge / of the wrong type /
missing, bytes flipped anywhere (seeded cases plus hypothesis), and the conversion cache fed two
files that share name, size and mtime. Each must give one clean error or the clean file's output.
"""

import json
import math
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf import GGUFValueType as V
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz.inputs import DELETE, chat_tokenizer, data_files, tiny_decoder, write_gguf
from fuzz.oracle import classify, run_cli
from fuzz.record import check, fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)
from lmlab.models.llama.gguf import config_to_gguf
from lmlab.models.presets import preset

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY = "gguf"
LAYER_TENSORS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down"]
TENSORS = ["token_embd.weight", "output_norm.weight", *(f"blk.{i}.{t}.weight" for i in (0, 1) for t in LAYER_TENSORS)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The clean file's bytes, its layout (byte offsets of every field), a text file, and the
    perplexity JSON the clean file gives."""
    directory = tmp_path_factory.mktemp("gguf")
    tokenizer = chat_tokenizer()
    model = tiny_decoder("llama", tokenizer.vocab_size)
    path = write_gguf(directory / "clean.gguf", model, tokenizer)
    text = data_files(directory / "data")["text"]
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(directory / "cache"))
        run = run_cli(["eval", "perplexity", "--model", path, "--data", text, "--json"])
    assert run.code == 0, run.err
    return {"bytes": path.read_bytes(), "layout": layout(path), "text": text, "output": run.out,
            "model": model, "tokenizer": tokenizer}


def layout(path) -> dict:
    """Byte offsets in the file at `path`: header fields, each tensor's info parts, the data start."""
    reader = GGUFReader(path)
    base = reader.data.ctypes.data

    def at(part) -> int:
        return part.ctypes.data - base
    info = {}
    for tensor in reader.tensors:
        _, _, n_dims, dims, dtype, offset = tensor.field.parts
        info[tensor.name] = {"n_dims": at(n_dims), "dims": at(dims), "dtype": at(dtype), "offset": at(offset),
                             "offset_value": int(offset[0]), "start": tensor.field.offset,
                             "data": int(tensor.data_offset), "n_bytes": int(tensor.n_bytes)}
    fields = [f for k, f in reader.fields.items() if not k.startswith("GGUF.")]
    return {"version": 4, "tensor_count": 8, "kv_count": 16, "tensors": info, "size": len(reader.data),
            "kv_starts": [f.offset for f in fields], "tensor_info_start": min(t["start"] for t in info.values()),
            "data_start": min(t["data"] for t in info.values()), "n_tensors": len(info), "n_kv": len(reader.fields) - 3}


def put(data: bytes, offset: int, value: int, width: int, signed: bool = False) -> bytes:
    return data[:offset] + value.to_bytes(width, "little", signed=signed) + data[offset + width:]


def perplexity_probe(tmp_path, clean, case: str, data: bytes, may_change: bool = False, name: str = "m.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return probe(FAMILY, case, ["eval", "perplexity", "--model", path, "--data", clean["text"], "--json"],
                 clean["output"], may_change)


# -- header and tensor-info fields, edited in place ------------------------------------------------------------------

def header_mutants():
    for field, width in (("tensor_count", 8), ("kv_count", 8)):
        for how in ("zero", "minus_one", "plus_one", "huge"):
            yield f"{field}_{how}", field, width, how
    for how in ("zero", "one", "two", "huge"):
        yield f"version_{how}", "version", 4, how


@pytest.mark.parametrize("case, field, width, how", list(header_mutants()), ids=lambda v: str(v))
def test_header_field(tmp_path, clean, case, field, width, how):
    lay = clean["layout"]
    current = {"tensor_count": lay["n_tensors"], "kv_count": lay["n_kv"], "version": 3}[field]
    value = {"zero": 0, "minus_one": current - 1, "plus_one": current + 1, "huge": 2 ** (8 * width - 2),
             "one": 1, "two": 2}[how]
    perplexity_probe(tmp_path, clean, case, put(clean["bytes"], lay[field], value, width))


def test_bad_magic(tmp_path, clean):
    perplexity_probe(tmp_path, clean, "magic", b"GGUX" + clean["bytes"][4:])


TENSOR_EDITS = ["dtype_f16", "dtype_q8_0", "dtype_invalid", "offset_other_tensor", "offset_plus_32", "offset_eof",
                "dim0_double", "dim0_zero", "dim0_huge", "n_dims_zero", "n_dims_five"]


@pytest.mark.parametrize("edit", TENSOR_EDITS)
@pytest.mark.parametrize("tensor", TENSORS)
def test_tensor_info(tmp_path, clean, tensor, edit):
    info = clean["layout"]["tensors"][tensor]
    others = [t for name, t in clean["layout"]["tensors"].items() if name != tensor]
    data = clean["bytes"]
    if edit.startswith("dtype"):
        data = put(data, info["dtype"], {"dtype_f16": Q.F16, "dtype_q8_0": Q.Q8_0, "dtype_invalid": 99}[edit], 4)
    elif edit.startswith("offset"):
        value = {"offset_other_tensor": others[0]["offset_value"], "offset_plus_32": info["offset_value"] + 32,
                 "offset_eof": clean["layout"]["size"]}[edit]
        data = put(data, info["offset"], value, 8)
    elif edit.startswith("dim0"):
        dim0 = int.from_bytes(data[info["dims"]:info["dims"] + 8], "little")
        data = put(data, info["dims"], {"dim0_double": 2 * dim0, "dim0_zero": 0, "dim0_huge": 2 ** 40}[edit], 8)
    else:
        data = put(data, info["n_dims"], {"n_dims_zero": 0, "n_dims_five": 5}[edit], 4)
    perplexity_probe(tmp_path, clean, f"{tensor}:{edit}", data)


# -- truncation -----------------------------------------------------------------------------------------------------

CUTS = [f"fraction_{i}" for i in range(1, 20)] + ["after_magic", "after_header", "mid_kv_0", "mid_kv_3", "mid_kv_9",
                                                  "tensor_info", "mid_tensor_info", "data_start", "data_start_plus_1",
                                                  "last_tensor_mid", "minus_1", "minus_4", "empty"]


@pytest.mark.parametrize("cut", CUTS)
def test_truncated(tmp_path, clean, cut):
    lay, size = clean["layout"], clean["layout"]["size"]
    last = max(lay["tensors"].values(), key=lambda t: t["data"])
    at = {"after_magic": 4, "after_header": 24, "mid_kv_0": lay["kv_starts"][0] + 5,
          "mid_kv_3": lay["kv_starts"][3] + 9, "mid_kv_9": lay["kv_starts"][9] + 13,
          "tensor_info": lay["tensor_info_start"],
          "mid_tensor_info": (lay["tensor_info_start"] + lay["data_start"]) // 2,
          "data_start": lay["data_start"], "data_start_plus_1": lay["data_start"] + 1,
          "last_tensor_mid": last["data"] + last["n_bytes"] // 2, "minus_1": size - 1, "minus_4": size - 4,
          "empty": 0}
    cut_at = at[cut] if cut in at else size * int(cut.split("_")[1]) // 20
    perplexity_probe(tmp_path, clean, f"truncated_{cut}", clean["bytes"][:cut_at])


# -- metadata values, rewritten with gguf's writer ------------------------------------------------------------------

HYPER_KEYS = list(config_to_gguf(preset("llama-tiny")))
FLOAT_KEYS = {"llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"}
# name -> (value or a function of the clean value, type[, item type]); every one makes the file invalid
INT_VALUES = {"zero": (0, V.UINT32), "negative": (-1, V.INT32), "huge32": (2 ** 32 - 1, V.UINT32),
              "huge64": (2 ** 62, V.UINT64), "nan": (math.nan, V.FLOAT32), "fraction": (2.5, V.FLOAT32),
              "string": ("12", V.STRING), "array": ([1, 2], V.ARRAY, V.UINT32), "bool": (True, V.BOOL),
              "missing": DELETE, "plus_one": (lambda v: v + 1, V.UINT32), "minus_one": (lambda v: v - 1, V.UINT32)}
FLOAT_VALUES = {"nan": (math.nan, V.FLOAT32), "inf": (math.inf, V.FLOAT32), "minus_inf": (-math.inf, V.FLOAT32),
                "zero": (0.0, V.FLOAT32), "negative": (-1e-5, V.FLOAT32), "huge": (1e30, V.FLOAT32),
                "string": ("1e-5", V.STRING), "array": ([1.0], V.ARRAY, V.FLOAT32), "missing": DELETE,
                "same_as_float64": (lambda v: v, V.FLOAT64)}
# mutations a valid file may carry: the output may change (context_length sets the perplexity window)
MAY_CHANGE = {("llama.context_length", "plus_one"), ("llama.context_length", "minus_one"),
              ("llama.rope.freq_base", "missing")}


def hyper_cases():
    for key in HYPER_KEYS:
        for how in (FLOAT_VALUES if key in FLOAT_KEYS else INT_VALUES):
            yield key, how


@pytest.mark.parametrize("key, how", list(hyper_cases()))
def test_hyperparameter(tmp_path, clean, key, how):
    spec = (FLOAT_VALUES if key in FLOAT_KEYS else INT_VALUES)[how]
    if spec is not DELETE and callable(spec[0]):
        current = config_to_gguf(clean["model"].config)[key]
        spec = (spec[0](current), *spec[1:])
    path = write_gguf(tmp_path / "m.gguf", clean["model"], clean["tokenizer"], {key: spec})
    perplexity_probe(tmp_path, clean, f"{key}={how}", path.read_bytes(), may_change=(key, how) in MAY_CHANGE)


def tokenizer_overrides(clean) -> dict:
    """name -> (metadata overrides, may the output change?) for the tokenizer keys."""
    tokens = clean["tokenizer"].backend.get_vocab()
    tokens = sorted(tokens, key=tokens.get)
    n = len(tokens)
    merges = [m if isinstance(m, str) else " ".join(m)
              for m in json.loads(clean["tokenizer"].backend.to_str())["model"]["merges"]]
    return {
        "tokens_missing": ({"tokenizer.ggml.tokens": DELETE}, False),
        "tokens_one": ({"tokenizer.ggml.tokens": (tokens[:1], V.ARRAY, V.STRING)}, False),  # gguf writes no empty array
        "tokens_half": ({"tokenizer.ggml.tokens": (tokens[: n // 2], V.ARRAY, V.STRING)}, False),
        "tokens_extra": ({"tokenizer.ggml.tokens": (tokens + [f"extra{i}" for i in range(50)], V.ARRAY, V.STRING)},
                         False),
        "tokens_duplicate": ({"tokenizer.ggml.tokens": (tokens[:-1] + [tokens[100]], V.ARRAY, V.STRING)}, False),
        "tokens_ints": ({"tokenizer.ggml.tokens": (list(range(n)), V.ARRAY, V.UINT32)}, False),
        "tokens_string": ({"tokenizer.ggml.tokens": ("abc", V.STRING)}, False),
        "merges_missing": ({"tokenizer.ggml.merges": DELETE}, True),
        "merges_no_space": ({"tokenizer.ggml.merges": (["ab"] + merges[1:], V.ARRAY, V.STRING)}, False),
        "merges_unknown_tokens": ({"tokenizer.ggml.merges": (["zzq qqz", *merges], V.ARRAY, V.STRING)}, False),
        "merges_ints": ({"tokenizer.ggml.merges": (list(range(len(merges))), V.ARRAY, V.UINT32)}, False),
        "merges_string": ({"tokenizer.ggml.merges": ("a b", V.STRING)}, False),
        "token_type_short": ({"tokenizer.ggml.token_type": ([1, 3], V.ARRAY, V.INT32)}, False),
        "token_type_strings": ({"tokenizer.ggml.token_type": (["x"] * n, V.ARRAY, V.STRING)}, False),
        "token_type_missing": ({"tokenizer.ggml.token_type": DELETE}, True),
        "bos_out_of_range": ({"tokenizer.ggml.bos_token_id": (10 ** 6, V.UINT32)}, False),
        "eos_negative": ({"tokenizer.ggml.eos_token_id": (-5, V.INT32)}, False),
        "eos_string": ({"tokenizer.ggml.eos_token_id": ("2", V.STRING)}, False),
        "pad_float": ({"tokenizer.ggml.padding_token_id": (1.5, V.FLOAT32)}, False),
        "model_missing": ({"tokenizer.ggml.model": DELETE}, False),
        "model_int": ({"tokenizer.ggml.model": (7, V.UINT32)}, False),
        "pre_llama3": ({"tokenizer.ggml.pre": ("llama-bpe", V.STRING)}, True),
        "pre_int": ({"tokenizer.ggml.pre": (3, V.UINT32)}, False),
        "chat_template_int": ({"tokenizer.chat_template": (3, V.UINT32)}, False),
        "architecture_int": ({"general.architecture": (1, V.UINT32)}, False),
    }


TOKENIZER_CASES = ["tokens_missing", "tokens_one", "tokens_half", "tokens_extra", "tokens_duplicate", "tokens_ints",
                   "tokens_string", "merges_missing", "merges_no_space", "merges_unknown_tokens", "merges_ints",
                   "merges_string", "token_type_short", "token_type_strings", "token_type_missing",
                   "bos_out_of_range", "eos_negative", "eos_string", "pad_float", "model_missing", "model_int",
                   "pre_llama3", "pre_int", "chat_template_int", "architecture_int"]


@pytest.mark.parametrize("case", TOKENIZER_CASES)
def test_tokenizer_metadata(tmp_path, clean, case):
    overrides, may_change = tokenizer_overrides(clean)[case]
    path = write_gguf(tmp_path / "m.gguf", clean["model"], clean["tokenizer"], overrides)
    perplexity_probe(tmp_path, clean, case, path.read_bytes(), may_change)


# -- flipped bytes: seeded cases over the whole file, weighted to the header, plus hypothesis ------------------------

def flips(count: int = 60):
    rng = np.random.default_rng(17)
    for i in range(count):
        region = i % 3  # 0: header and metadata, 1: tensor infos, 2: anywhere
        yield i, region, int(rng.integers(1 << 30)), int(rng.integers(1, 256))


@pytest.mark.parametrize("i, region, draw, xor", list(flips()), ids=lambda v: str(v))
def test_flipped_byte(tmp_path, clean, i, region, draw, xor):
    lay = clean["layout"]
    low, high = [(0, lay["tensor_info_start"]), (lay["tensor_info_start"], lay["data_start"]), (0, lay["size"])][region]
    offset = low + draw % (high - low)
    data = bytearray(clean["bytes"])
    data[offset] ^= xor
    # a flip may legitimately change a weight's or token's value, so only a traceback, a hang or a
    # non-finite result fails
    perplexity_probe(tmp_path, clean, f"flip_{offset}^{xor}", bytes(data), may_change=True)


@settings(max_examples=40, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255), length=st.integers(1, 8))
def test_flipped_bytes_hypothesis(tmp_path, clean, where, xor, length):
    data = bytearray(clean["bytes"])
    offset = int(where * clean["layout"]["data_start"] * 1.2) % len(data)  # mostly the header and tensor infos
    for k in range(offset, min(offset + length, len(data))):
        data[k] ^= xor
    name = f"h{offset}_{xor}_{length}.gguf"  # a name per example: the cache must not mix them up
    perplexity_probe(tmp_path, clean, f"hypothesis_flip_{offset}^{xor}x{length}", bytes(data), may_change=True,
                     name=name)


# -- the conversion cache is keyed on content, not on name, size and mtime -------------------------------------------

@pytest.mark.parametrize("where", ["same_path_rewritten", "same_name_other_folder"])
def test_cache_serves_each_file_its_own_weights(tmp_path, clean, where):
    other = write_gguf(tmp_path / "other.gguf", tiny_decoder("llama", clean["tokenizer"].vocab_size, seed=1),
                       clean["tokenizer"]).read_bytes()
    assert len(other) == len(clean["bytes"])
    first = tmp_path / "a" / "m.gguf"
    first.parent.mkdir()
    first.write_bytes(clean["bytes"])
    stat = first.stat()
    assert run_cli(["eval", "perplexity", "--model", first, "--data", clean["text"], "--json"]).code == 0
    second = first if where == "same_path_rewritten" else tmp_path / "b" / "m.gguf"
    second.parent.mkdir(exist_ok=True)
    second.write_bytes(other)
    os.utime(second, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    expected = run_cli(["eval", "perplexity", "--model", tmp_path / "other.gguf", "--data", clean["text"], "--json"])
    run = run_cli(["eval", "perplexity", "--model", second, "--data", clean["text"], "--json"])
    outcome = classify(run, expected.out, may_change=False)
    check(FAMILY, f"cache_{where}", outcome)
