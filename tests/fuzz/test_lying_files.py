"""Fuzz: model files that are well formed but lie, fed to `lmlab eval perplexity` / `lmlab embed`.

stray_weights: a directory whose *.safetensors files disagree with each other or with their index (a stale
backup holding a tensor again, shards the index misnames, omits or places outside the directory);
config_keys: an HF config.json key that changes the computation set to a value lmlab does not compute,
or contradicting config.json's "lmlab" section; gguf_keys: llama.* keys of variants (separate head
sizes, experts, scaled RoPE, sliding windows, softcapping) and `tokenizer.ggml.pre` names.

Each case must be a clean error or be honoured: a decoder directory lmlab accepts must give the logits
transformers gives for it (whenever transformers loads it), so an accepted lie is found even when
lmlab's output equals the clean file's.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from gguf import GGUFValueType as V
from safetensors.torch import load_file, save_file

from fuzz.inputs import DELETE, chat_tokenizer, data_files, model_dirs, tiny_decoder, write_gguf
from fuzz.oracle import Outcome, classify, run_cli
from fuzz.record import check, fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)
from lmlab.errors import LmlabError
from lmlab.models.decoder_files import load_hf_dir

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

INDEX = "model.safetensors.index.json"
PROMPT_IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 31]])


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """kind -> (directory, the clean output of the command reading it), plus a text file and a GGUF's parts."""
    root = tmp_path_factory.mktemp("lying")
    tokenizer = chat_tokenizer()
    text = data_files(root / "data")["text"]
    dirs = model_dirs(root, tokenizer)
    model = tiny_decoder("llama", tokenizer.vocab_size)
    gguf_path = write_gguf(root / "clean.gguf", model, tokenizer)
    outputs = {}
    transformers.logging.set_verbosity_error()
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(root / "cache"))
        for kind, directory in {**dirs, "gguf": gguf_path}.items():
            run = run_cli(command(kind, directory, text))
            assert run.code == 0, (kind, run.err)
            outputs[kind] = run.out
    return {"dirs": dirs, "outputs": outputs, "text": text, "model": model, "tokenizer": tokenizer}


def command(kind: str, path, text) -> list:
    if kind == "bert":
        return ["embed", "--model", path, "--text", "the cat sat on a mat", "--json"]
    return ["eval", "perplexity", "--model", path, "--data", text, "--json"]


def copy(clean, kind: str, tmp_path) -> Path:
    return shutil.copytree(clean["dirs"][kind], tmp_path / kind)


def lying_probe(clean, family: str, kind: str, case: str, directory: Path, may_change: bool = False,
                must_succeed: bool = False) -> Outcome:
    """Run the kind's command on `directory`, classify it, and for a decoder lmlab accepted, compare its
    logits with transformers' on the same directory: any difference is silent_wrong."""
    outcome = classify(run_cli(command(kind, directory, clean["text"])), clean["outputs"][kind], may_change)
    if must_succeed and outcome.kind == "clean_error":
        outcome = Outcome("wrong_refusal", f"a valid input was refused: {outcome.detail}")
    if outcome.ok and outcome.kind != "clean_error" and kind != "bert":
        difference = transformers_difference(directory)
        if difference is not None and difference > 1e-4:
            outcome = Outcome("silent_wrong", f"lmlab loaded it, but its logits differ from transformers' by "
                                              f"{difference:.4f}")
    check(family, f"{kind}/{case}", outcome)
    return outcome


def transformers_difference(directory: Path) -> float | None:
    """max |lmlab logits - transformers logits| on a prompt, None when transformers does not load it."""
    try:
        theirs = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    except Exception:  # noqa: BLE001 - transformers refusing the directory leaves nothing to compare
        return None
    ours = load_hf_dir(directory)
    with torch.no_grad():
        return (ours(PROMPT_IDS) - theirs(PROMPT_IDS).logits).abs().max().item()


# -- stray_weights: *.safetensors files that disagree with each other or with the index ------------------------

def split_weights(directory: Path) -> tuple[dict, dict]:
    """The directory's model.safetensors removed and its tensors returned in two halves (by name order)."""
    state = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(state)
    half = len(names) // 2
    return {n: state[n] for n in names[:half]}, {n: state[n] for n in names[half:]}


def shards(directory: Path, first: dict, second: dict, index: dict | None = None) -> None:
    """Write two shards and (unless `index` is given as something else) the index that describes them."""
    save_file(first, directory / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    save_file(second, directory / "model-00002-of-00002.safetensors", metadata={"format": "pt"})
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first} | {
        n: "model-00002-of-00002.safetensors" for n in second}
    index = {"metadata": {}, "weight_map": weight_map} if index is None else index
    (directory / INDEX).write_text(json.dumps(index))


def _backup_duplicate(d):  # the issue's case: an old copy of one tensor, zeros, in a second file
    name, tensor = next(iter(load_file(d / "model.safetensors").items()))
    save_file({name: torch.zeros_like(tensor)}, d / "zz-old-backup.safetensors")


def _backup_disjoint(d):  # a second file whose tensors the model does not have: not read
    save_file({"unrelated.weight": torch.ones(3)}, d / "extra.safetensors")


def _renamed_single(d):  # one weights file under another name
    (d / "model.safetensors").rename(d / "weights.safetensors")


def _two_files_no_index(d):
    first, second = split_weights(d)
    save_file(first, d / "a.safetensors")
    save_file(second, d / "b.safetensors")


def _sharded(d):  # a valid sharded model, as transformers saves a large one
    shards(d, *split_weights(d))


def _sharded_beside_stale_full(d):  # the index wins over model.safetensors, which holds every tensor again
    state = load_file(d / "model.safetensors")
    first, second = split_weights(d)
    save_file({k: torch.zeros_like(v) for k, v in state.items()}, d / "model.safetensors")
    shards(d, first, second)


def _index_missing_shard(d):
    shards(d, *split_weights(d))
    (d / "model-00002-of-00002.safetensors").unlink()


def _index_wrong_shard(d):
    first, second = split_weights(d)
    shards(d, first, second)
    index = json.loads((d / INDEX).read_text())
    index["weight_map"][next(iter(first))] = "model-00002-of-00002.safetensors"
    (d / INDEX).write_text(json.dumps(index))


def _index_omits_tensor(d):
    first, second = split_weights(d)
    shards(d, first, second)
    index = json.loads((d / INDEX).read_text())
    del index["weight_map"][next(iter(second))]
    (d / INDEX).write_text(json.dumps(index))


def _tensor_in_both_shards(d):
    first, second = split_weights(d)
    name = next(iter(second))
    shards(d, first | {name: torch.zeros_like(second[name])}, second)


def _stray_third_shard(d):
    first, second = split_weights(d)
    shards(d, first, second)
    name = next(iter(first))
    save_file({name: torch.zeros_like(first[name])}, d / "model-00003-of-00002.safetensors")


def _index_outside(d):
    first, second = split_weights(d)
    save_file(second, d.parent / "outside.safetensors")
    shards(d, first, second)
    (d / "model-00002-of-00002.safetensors").unlink()
    index = json.loads((d / INDEX).read_text())
    index["weight_map"] = {k: ("../outside.safetensors" if "00002" in v else v) for k, v in index["weight_map"].items()}
    (d / INDEX).write_text(json.dumps(index))


def _index_absolute(d):
    first, second = split_weights(d)
    shards(d, first, second)
    index = json.loads((d / INDEX).read_text())
    index["weight_map"] = {k: str(d / v) for k, v in index["weight_map"].items()}
    (d / INDEX).write_text(json.dumps(index))


def _index_names_bin(d):
    first, second = split_weights(d)
    shards(d, first, second)
    index = json.loads((d / INDEX).read_text())
    index["weight_map"] = {k: "pytorch_model.bin" for k in index["weight_map"]}
    (d / INDEX).write_text(json.dumps(index))


def _index_without_map(d):
    shards(d, *split_weights(d), index={"metadata": {}})


def _index_map_is_list(d):
    shards(d, *split_weights(d), index={"weight_map": ["model-00001-of-00002.safetensors"]})


STRAY = {  # case -> (mutation, a valid directory that must load unchanged)
    "backup_duplicate": (_backup_duplicate, False), "backup_disjoint": (_backup_disjoint, False),
    "renamed_single": (_renamed_single, True), "two_files_no_index": (_two_files_no_index, False),
    "sharded": (_sharded, True), "sharded_beside_stale_full": (_sharded_beside_stale_full, False),
    "index_missing_shard": (_index_missing_shard, False), "index_wrong_shard": (_index_wrong_shard, False),
    "index_omits_tensor": (_index_omits_tensor, False), "tensor_in_both_shards": (_tensor_in_both_shards, False),
    "stray_third_shard": (_stray_third_shard, False), "index_outside": (_index_outside, False),
    "index_absolute": (_index_absolute, False), "index_names_bin": (_index_names_bin, False),
    "index_without_map": (_index_without_map, False), "index_map_is_list": (_index_map_is_list, False),
}


@pytest.mark.parametrize("case", list(STRAY))
@pytest.mark.parametrize("kind", ["llama", "gpt2-hf", "bert"])
def test_stray_weights(clean, tmp_path, kind, case):
    mutate, valid = STRAY[case]
    directory = copy(clean, kind, tmp_path)
    mutate(directory)
    outcome = lying_probe(clean, "stray_weights", kind, case, directory, must_succeed=valid)
    if case in ("backup_duplicate", "two_files_no_index", "tensor_in_both_shards", "index_outside"):
        assert outcome.kind == "clean_error", outcome  # a lie about which tensor is the model's is never guessed


# -- config_keys: keys that change the computation, and the lmlab section against the HF keys --------------------

HF_ONLY = {  # kind -> case -> (config.json changes, may the output change while honoured?)
    "llama-hf": {
        "hidden_act=gelu": ({"hidden_act": "gelu"}, False), "hidden_act=relu": ({"hidden_act": "relu"}, False),
        "head_dim=64": ({"head_dim": 64}, False), "head_dim=8": ({"head_dim": 8}, False),
        "head_dim=matching": ({"head_dim": 16}, False), "head_dim=null": ({"head_dim": None}, False),
        "attention_bias": ({"attention_bias": True}, False), "mlp_bias": ({"mlp_bias": True}, False),
        "rope_scaling=linear": ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, True),
        "rope_scaling=dynamic": ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, False),
        "rope_scaling=llama3": ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
                                True),
        "rope_scaling=null": ({"rope_scaling": None}, False),
        "rope_parameters=default": ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, False),
        "rope_parameters=yarn": ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
                                 False),
        "rope_parameters=yarn_complete": ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                               "original_max_position_embeddings": 8}}, True),
        "rope_parameters=other_theta": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}, False),
        "rope_parameters_only": ({"rope_theta": DELETE, "rope_parameters": {"rope_theta": 500.0}}, True),
        "rope_theta=500": ({"rope_theta": 500.0}, True), "rms_norm_eps=1e-3": ({"rms_norm_eps": 1e-3}, True),
        "pretraining_tp=2": ({"pretraining_tp": 2}, False),
        "attention_dropout=0.1": ({"attention_dropout": 0.1}, False),
        "sliding_window=4": ({"sliding_window": 4}, False),
        "max_position_embeddings=128": ({"max_position_embeddings": 128}, True),
        "num_key_value_heads=2": ({"num_key_value_heads": 2}, False),
        "tie_word_embeddings=true": ({"tie_word_embeddings": True}, False),
        "model_type=mistral": ({"model_type": "mistral"}, False),
    },
    "gpt2-hf": {
        "activation_function=relu": ({"activation_function": "relu"}, False),
        "activation_function=gelu": ({"activation_function": "gelu"}, False),
        "activation_function=gelu_pytorch_tanh": ({"activation_function": "gelu_pytorch_tanh"}, False),
        "scale_attn_weights=false": ({"scale_attn_weights": False}, False),
        "scale_attn_by_inverse_layer_idx": ({"scale_attn_by_inverse_layer_idx": True}, False),
        "add_cross_attention": ({"add_cross_attention": True}, False),
        "reorder_and_upcast_attn": ({"reorder_and_upcast_attn": True}, False),
        "n_ctx=16": ({"n_ctx": 16}, False), "layer_norm_epsilon=1e-3": ({"layer_norm_epsilon": 1e-3}, True),
        "tie_word_embeddings=false": ({"tie_word_embeddings": False}, False),
    },
}
SECTION = {  # kind -> case -> HF key changes that contradict the lmlab section (which lmlab reads)
    "llama": {"num_hidden_layers": {"num_hidden_layers": 1}, "rope_theta": {"rope_theta": 500.0},
              "hidden_act": {"hidden_act": "gelu"}, "rms_norm_eps": {"rms_norm_eps": 0.5},
              "num_attention_heads": {"num_attention_heads": 4}, "intermediate_size": {"intermediate_size": 32},
              "vocab_size": {"vocab_size": 999}, "num_key_value_heads": {"num_key_value_heads": 2},
              "tie_word_embeddings": {"tie_word_embeddings": False}, "head_dim": {"head_dim": 8},
              "rope_parameters": {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
              "rope_parameters_only": {"rope_theta": DELETE, "rope_parameters": {"rope_theta": 500.0}},
              "max_position_embeddings": {"max_position_embeddings": 128},
              "rope_scaling": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
              "rope_parameters_yarn": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                           "original_max_position_embeddings": 8}}},
    "gpt2": {"n_layer": {"n_layer": 1}, "n_embd": {"n_embd": 64}, "layer_norm_epsilon": {"layer_norm_epsilon": 0.5},
             "activation_function": {"activation_function": "relu"}, "n_positions": {"n_positions": 32},
             "tie_word_embeddings": {"tie_word_embeddings": False}, "n_inner": {"n_inner": 32}},
    "bert": {"num_hidden_layers": {"num_hidden_layers": 1}, "hidden_size": {"hidden_size": 64},
             "layer_norm_eps": {"layer_norm_eps": 0.5}, "hidden_act": {"hidden_act": "relu"}},
}


def edit_config(directory: Path, changes: dict) -> None:
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("kind, case", [(k, c) for k, cases in HF_ONLY.items() for c in cases])
def test_hf_config_key(clean, tmp_path, kind, case):
    changes, may_change = HF_ONLY[kind][case]
    directory = copy(clean, kind, tmp_path)
    edit_config(directory, changes)
    lying_probe(clean, "config_keys", kind, case, directory, may_change)


@pytest.mark.parametrize("kind, case", [(k, c) for k, cases in SECTION.items() for c in cases])
def test_lmlab_section_against_hf_keys(clean, tmp_path, kind, case):
    directory = copy(clean, kind, tmp_path)
    edit_config(directory, SECTION[kind][case])
    outcome = lying_probe(clean, "config_keys", kind, f"section_vs_{case}", directory)
    assert outcome.kind == "clean_error", outcome  # two sources that disagree are refused


# -- gguf_keys: llama.* keys of variants, and tokenizer.ggml.pre names -------------------------------------------

U32, F32, STR = V.UINT32, V.FLOAT32, V.STRING
GGUF = {  # case -> (metadata overrides, may the output change?, a valid file that must load)
    "key_length=64": ({"llama.attention.key_length": (64, U32)}, False, False),
    "key_length=matching": ({"llama.attention.key_length": (16, U32)}, False, True),
    "value_length=8": ({"llama.attention.value_length": (8, U32)}, False, False),
    "value_length=matching": ({"llama.attention.value_length": (16, U32)}, False, True),
    "expert_count=8": ({"llama.expert_count": (8, U32), "llama.expert_used_count": (2, U32)}, False, False),
    "expert_count=0": ({"llama.expert_count": (0, U32)}, False, True),
    "expert_used_count=2": ({"llama.expert_used_count": (2, U32)}, False, False),
    "rope_scaling=linear": ({"llama.rope.scaling.type": ("linear", STR), "llama.rope.scaling.factor": (2.0, F32)},
                            True, True),  # honoured: positions / 2, as llama.cpp computes them
    "rope_scaling=yarn": ({"llama.rope.scaling.type": ("yarn", STR)}, False, False),
    "rope_scaling=none": ({"llama.rope.scaling.type": ("none", STR)}, False, True),
    "rope_scaling_factor=4": ({"llama.rope.scaling.factor": (4.0, F32)}, False, False),
    "rope_scaling_original_context": ({"llama.rope.scaling.original_context_length": (32, U32)}, False, True),
    "rope_dimension_count=8": ({"llama.rope.dimension_count": (8, U32)}, False, False),
    "sliding_window=4": ({"llama.attention.sliding_window": (4, U32)}, True, True),  # honoured: read as Mistral
    "attn_logit_softcapping": ({"llama.attn_logit_softcapping": (50.0, F32)}, False, False),
    "final_logit_softcapping": ({"llama.final_logit_softcapping": (30.0, F32)}, False, False),
    "layer_norm_epsilon": ({"llama.attention.layer_norm_epsilon": (1e-5, F32)}, False, False),
    "unknown_llama_key": ({"llama.made_up_key": (1, U32)}, False, False),
    "vocab_size=off": ({"llama.vocab_size": (7, U32)}, False, False),
    "general_key": ({"general.name": ("tiny", STR), "general.license": ("mit", STR)}, False, True),
    "other_arch_key": ({"qwen2.context_length": (4, U32)}, False, True),
    "pre=absent": ({"tokenizer.ggml.pre": DELETE}, False, True),
    "pre=gpt-2": ({"tokenizer.ggml.pre": ("gpt-2", STR)}, False, True),
    "pre=qwen2": ({"tokenizer.ggml.pre": ("qwen2", STR)}, True, True),
    "pre=llama3": ({"tokenizer.ggml.pre": ("llama3", STR)}, True, True),
    "pre=smollm": ({"tokenizer.ggml.pre": ("smollm", STR)}, True, True),
    "pre=unknown": ({"tokenizer.ggml.pre": ("made-up", STR)}, False, False),
    "pre=tekken": ({"tokenizer.ggml.pre": ("tekken", STR)}, True, True),  # Mistral Nemo's split, read since #36
    "pre=deepseek-llm": ({"tokenizer.ggml.pre": ("deepseek-llm", STR)}, False, False),
    "pre=empty": ({"tokenizer.ggml.pre": ("", STR)}, False, False),
}
HONOURED_ONLY = {"key_length=64", "value_length=8", "expert_count=8", "expert_used_count=2", "rope_scaling=yarn",
                 "rope_scaling_factor=4", "rope_dimension_count=8", "attn_logit_softcapping",
                 "final_logit_softcapping", "layer_norm_epsilon", "unknown_llama_key", "pre=unknown"}  # a variant lmlab does not compute: only a refusal is right


@pytest.mark.parametrize("case", list(GGUF))
def test_gguf_key(clean, tmp_path, case):
    overrides, may_change, valid = GGUF[case]
    path = write_gguf(tmp_path / "m.gguf", clean["model"], clean["tokenizer"], overrides)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(tmp_path / "cache"))
        outcome = probe("gguf_keys", case, command("gguf", path, clean["text"]), clean["outputs"]["gguf"],
                        may_change, must_succeed=valid)
    if case in HONOURED_ONLY:
        assert outcome.kind == "clean_error", outcome


def test_encoder_decoder_reads_the_same_shared_checks(tmp_path):
    """The encoder-decoder reader goes through the same weight-file and section checks."""
    from lmlab.models.encoder_decoder.build import build_encoder_decoder
    from lmlab.models.encoder_decoder.files import load_encoder_decoder, save_encoder_decoder
    from lmlab.models.presets import preset
    small = dict(vocab_size=40, d_model=16, d_ff=32, n_heads=2, max_source_length=12, max_target_length=10)
    directory = save_encoder_decoder(build_encoder_decoder(preset("bart-tiny", **small)), None, tmp_path / "m")
    stray = shutil.copytree(directory, tmp_path / "stray")
    _backup_duplicate(stray)
    contradicted = shutil.copytree(directory, tmp_path / "contradicted")
    edit_config(contradicted, {"d_model": 32})
    for case, path in (("backup_duplicate", stray), ("section_vs_d_model", contradicted)):
        try:
            load_encoder_decoder(path)
            outcome = Outcome("silent_wrong", "loaded")
        except LmlabError as e:
            outcome = Outcome("clean_error", str(e))
        check("stray_weights" if "backup" in case else "config_keys", f"bart/{case}", outcome)
