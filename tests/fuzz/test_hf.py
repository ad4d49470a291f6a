"""Fuzz: mutants of HF-layout model directories (a tiny GPT-2 and Llama as lmlab saves them, the same
with a transformers-only config.json, and a BERT encoder) fed to `lmlab eval perplexity` and
`lmlab embed`, and chat templates fed to `lmlab chat`.

config.json: non-UTF-8, invalid JSON, not an object, every key missing / of the wrong type / zero /
negative / huge / off by one; weights: NaN, inf, a tensor missing or extra, layers dropped or
added, a shape or dtype changed, truncation, a corrupt header; tokenizer.json and
tokenizer_config.json corrupted; templates that blow up, loop, recurse, fail or come as HF's list.
"""

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from encoder_data import tiny_encoder_dir
from fuzz.inputs import CHATML, chat_tokenizer, data_files, model_dirs, save_model_dir, tiny_decoder
from fuzz.oracle import run_cli
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = ["gpt2", "llama", "gpt2-hf", "llama-hf", "bert"]  # -hf: config.json without lmlab's own block
MISSING = object()
# A mutation of a config value: name -> new value (or a function of the old one). Values a valid file may hold
# for that field (MAY_CHANGE) may change the output; every other one makes the file invalid or inconsistent.
INT_EDITS = {"missing": MISSING, "string": "x", "zero": 0, "negative": -1, "huge": 10 ** 12, "fraction": 2.5,
             "null": None, "plus_one": lambda v: v + 1, "minus_one": lambda v: v - 1}
FLOAT_EDITS = {"missing": MISSING, "string": "x", "zero": 0.0, "negative": -1.0, "nan": math.nan, "inf": math.inf,
               "null": None, "half": 0.5, "large": 1e12}
STR_EDITS = {"missing": MISSING, "unknown": "x", "number": 0, "null": None}
BOOL_EDITS = {"missing": MISSING, "flipped": lambda v: not v, "string": "x", "null": None}
OTHER_EDITS = {"missing": MISSING, "string": "x", "negative": -1, "list": [1]}
MAY_CHANGE = {"half", "large"}  # float hyperparameters (eps, rope base) may take these values
ROPE_CONTEXT = {("llama", "context_length"), ("llama-hf", "max_position_embeddings")}  # no weights depend on it


def edits_for(value) -> dict:
    if isinstance(value, bool):
        return BOOL_EDITS
    if isinstance(value, int):
        return INT_EDITS
    if isinstance(value, float):
        return FLOAT_EDITS
    if isinstance(value, str):
        return STR_EDITS
    return OTHER_EDITS


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """kind -> (model directory, the clean output of the command that reads it), plus a text file."""
    root = tmp_path_factory.mktemp("hf")
    tokenizer = chat_tokenizer()
    text = data_files(root / "data")["text"]
    dirs = model_dirs(root, tokenizer)
    outputs = {}
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(root / "cache"))
        for kind, directory in dirs.items():
            run = run_cli(command(kind, directory, text))
            assert run.code == 0, (kind, run.err)
            outputs[kind] = run.out
        chat = run_cli(chat_command(dirs["llama"]))
        assert chat.code == 0, chat.err
    return {"dirs": dirs, "outputs": outputs, "text": text, "chat_output": chat.out}


def command(kind: str, directory, text) -> list:
    if kind == "bert":
        return ["embed", "--model", directory, "--text", "the cat sat on a mat", "paris is in france", "--json"]
    return ["eval", "perplexity", "--model", directory, "--data", text, "--json"]


def chat_command(directory) -> list:
    return ["chat", "--model", directory, "--prompt", "What is 2 + 3?", "--greedy", "--max-new-tokens", "4"]


def copy(clean, kind: str, tmp_path):
    return shutil.copytree(clean["dirs"][kind], tmp_path / kind)


def run_probe(clean, kind: str, case: str, directory, may_change: bool = False):
    return probe(f"hf_{kind}", case, command(kind, directory, clean["text"]), clean["outputs"][kind], may_change)


# -- config.json, key by key ---------------------------------------------------------------------------------------

def config_cases():
    """(kind, path of the key inside config.json, edit name) for every key of every kind's config.json."""
    for kind in KINDS:
        directory = {"gpt2": "gpt2", "llama": "llama", "gpt2-hf": "gpt2", "llama-hf": "llama", "bert": "bert"}[kind]
        config = json.loads(_config_text(directory))
        block = config["lmlab"] if kind in ("gpt2", "llama") else config
        prefix = ("lmlab",) if kind in ("gpt2", "llama") else ()
        for key, value in block.items():
            if key == "lmlab":
                continue
            for edit in edits_for(value):
                yield kind, (*prefix, key), edit
    yield "bert", ("lmlab", "n_layers"), "plus_one"  # the encoder's own block is read too
    yield "bert", ("lmlab", "d_model"), "zero"
    yield "bert", ("lmlab", "layer_norm_eps"), "nan"


def _config_text(family: str) -> str:
    """The config.json lmlab writes for the tiny models (built once at collection, offline and fast)."""
    if family not in _CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            if family == "bert":
                tiny_encoder_dir(Path(tmp) / "m")
            else:
                tokenizer = chat_tokenizer()
                save_model_dir(Path(tmp) / "m", tiny_decoder(family, tokenizer.vocab_size), tokenizer)
            _CONFIGS[family] = (Path(tmp) / "m" / "config.json").read_text()
    return _CONFIGS[family]


_CONFIGS: dict[str, str] = {}


@pytest.mark.parametrize("kind, key, edit", list(config_cases()), ids=lambda v: ".".join(v) if isinstance(v, tuple)
                         else str(v))
def test_config_key(clean, tmp_path, kind, key, edit):
    directory = copy(clean, kind, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    holder = config
    for part in key[:-1]:
        holder = holder[part]
    old = holder[key[-1]]
    new = edits_for(old)[edit] if key[-1] in holder else MISSING
    if new is MISSING:
        del holder[key[-1]]
    else:
        holder[key[-1]] = new(old) if callable(new) else new
    (directory / "config.json").write_text(json.dumps(config))
    may_change = (edit in MAY_CHANGE or edits_for(old) is OTHER_EDITS
                  or ((kind, key[-1]) in ROPE_CONTEXT and edit in ("plus_one", "minus_one"))
                  or ("head" in key[-1] and edit == "minus_one")  # 1 head of 32: another valid model, same shapes
                  or (kind.endswith("-hf") and edit == "missing" and edits_for(old) is FLOAT_EDITS))  # HF's default
    run_probe(clean, kind, f"config.{'.'.join(key)}={edit}", directory, may_change)


CONFIG_FILES = {"non_utf8": b'{"model_type": "\xff\xfe"}', "invalid_json": b'{"model_type": ', "list": b"[1, 2]",
                "string": b'"gpt2"', "number": b"3", "null": b"null", "empty": b"", "nul_bytes": b"\x00" * 64,
                "utf16": '{"model_type": "gpt2"}'.encode("utf-16"), "huge_nesting": b"[" * 100000 + b"]" * 100000}


@pytest.mark.parametrize("content", list(CONFIG_FILES))
@pytest.mark.parametrize("kind", KINDS)
def test_config_file(clean, tmp_path, kind, content):
    directory = copy(clean, kind, tmp_path)
    (directory / "config.json").write_bytes(CONFIG_FILES[content])
    run_probe(clean, kind, f"config.json={content}", directory)


# -- weights --------------------------------------------------------------------------------------------------------

WEIGHT_EDITS = ["nan_first", "nan_last", "inf_middle", "missing_first", "missing_last", "extra_tensor",
                "extra_layer", "dropped_layer", "shape_plus_row", "int_dtype", "float16", "bfloat16",
                "duplicate_in_second_file", "unrelated_second_file", "truncated_4", "truncated_header",
                "truncated_data", "truncated_minus_1", "header_length_huge", "header_not_json", "empty", "text_file",
                "no_weights"]


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in ("h", "layers", "layer") and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


@pytest.mark.parametrize("edit", WEIGHT_EDITS)
@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_weights(clean, tmp_path, kind, edit):
    directory = copy(clean, kind, tmp_path)
    path = directory / "model.safetensors"
    state = load_file(path)
    names = sorted(state)
    raw = path.read_bytes()
    header = 8 + int.from_bytes(raw[:8], "little")
    may_change = edit in ("float16", "bfloat16")
    if edit.startswith(("nan", "inf")):
        name = {"nan_first": names[0], "nan_last": names[-1], "inf_middle": names[len(names) // 2]}[edit]
        state[name] = state[name].clone().view(-1)
        state[name][0] = math.nan if edit.startswith("nan") else math.inf
        state[name] = state[name].view(load_file(path)[name].shape)
    elif edit.startswith("missing"):
        del state[names[0] if edit == "missing_first" else names[-1]]
    elif edit == "extra_tensor":
        state["extra.weight"] = torch.zeros(3)
    elif edit in ("extra_layer", "dropped_layer"):
        last = max(filter(None.__ne__, map(_layer_of, names)))
        layer = {n: t for n, t in state.items() if _layer_of(n) == last}
        if edit == "dropped_layer":
            state = {n: t for n, t in state.items() if n not in layer}
        else:
            state |= {n.replace(f".{last}.", f".{last + 1}.", 1): t.clone() for n, t in layer.items()}
    elif edit == "shape_plus_row":
        name = next(n for n in names if state[n].dim() == 2)
        state[name] = torch.cat([state[name], state[name][:1]])
    elif edit == "int_dtype":
        state[names[0]] = state[names[0]].to(torch.int64)
    elif edit in ("float16", "bfloat16"):
        state = {n: t.to(getattr(torch, edit)) for n, t in state.items()}
    if edit == "duplicate_in_second_file":
        save_file({names[0]: torch.zeros_like(state[names[0]])}, directory / "model-00002.safetensors")
    elif edit == "unrelated_second_file":
        save_file({"other.weight": torch.ones(4)}, directory / "model-00002.safetensors")
    elif edit.startswith(("truncated", "header", "empty", "text_file", "no_weights")):
        data = {"truncated_4": raw[:4], "truncated_header": raw[:header // 2],
                "truncated_data": raw[:(header + len(raw)) // 2],
                "truncated_minus_1": raw[:-1], "header_length_huge": (2 ** 60).to_bytes(8, "little") + raw[8:],
                "header_not_json": raw[:8] + b"x" * (header - 8) + raw[header:], "empty": b"",
                "text_file": b"not safetensors\n" * 20}.get(edit)
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
    else:
        save_file(state, path, metadata={"format": "pt"})
    run_probe(clean, kind, f"weights:{edit}", directory, may_change)


# -- tokenizer files ------------------------------------------------------------------------------------------------

TOKENIZER_FILES = {
    "tokenizer.json": {"invalid_json": b'{"model": ', "non_utf8": b'{"version": "\xff"}', "empty": b"",
                       "list": b"[]", "wrong_model": b'{"model": 1}', "truncated": None, "missing": None,
                       "extra_tokens": None},
    "tokenizer_config.json": {"invalid_json": b'{"eos_token": ', "non_utf8": b'{"eos_token": "\xff"}', "list": b"[1]",
                              "eos_int": b'{"eos_token": 5}', "eos_unknown": b'{"eos_token": "<nope>"}',
                              "bos_dict": b'{"bos_token": {"content": "<|bos|>"}}', "stop_tokens_string":
                              b'{"stop_tokens": "<|im_end|>"}', "stop_tokens_ints": b'{"stop_tokens": [1, 2]}',
                              "chat_template_int": b'{"chat_template": 5}', "empty": b""},
}
# valid files (perplexity does not use the tokens they name); one naming a token the vocabulary lacks is refused
CONFIG_MAY_CHANGE = {"bos_dict", "stop_tokens_ints"}


def tokenizer_cases():
    for kind in ("gpt2", "llama"):
        for file, edits in TOKENIZER_FILES.items():
            for edit in edits:
                yield kind, file, edit


@pytest.mark.parametrize("kind, file, edit", list(tokenizer_cases()))
def test_tokenizer_file(clean, tmp_path, kind, file, edit):
    directory = copy(clean, kind, tmp_path)
    path = directory / file
    content = TOKENIZER_FILES[file][edit]
    if edit == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif edit == "missing":
        path.unlink()
    elif edit == "extra_tokens":  # a tokenizer larger than the model's embedding
        tokenizer = json.loads(path.read_text())
        start = max(tokenizer["model"]["vocab"].values()) + 1
        tokenizer["model"]["vocab"] |= {f"zz{i}": start + i for i in range(500)}
        path.write_text(json.dumps(tokenizer))
    else:
        path.write_bytes(content)
    run_probe(clean, kind, f"{file}:{edit}", directory, may_change=edit in CONFIG_MAY_CHANGE)


# -- chat templates -------------------------------------------------------------------------------------------------

TEMPLATES = {
    "huge_output": "{{ 'x' * 4000000000 }}",
    "center_huge": "{{ 'x' | center(2000000000) }}",
    "nested_loops": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "range_huge": "{{ range(10 ** 12) | list | length }}",
    "list_multiply": "{{ ([0] * 1000000000) | length }}",
    "power": "{{ 10 ** 10 ** 10 }}",
    "syntax_error": "{% for m in messages %}{{ m['content'] }",
    "raise_exception": "{{ raise_exception('roles must alternate') }}",
    "sandbox_escape": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "attribute_escape": "{{ messages.__class__.__init__.__globals__ }}",
    "format_escape": "{{ '{0.__class__}'.format(messages) }}",
    "undefined_call": "{{ nothing() }}",
    "divide_by_zero": "{{ 1 / 0 }}",
    "empty": "",
    "whitespace": "   ",
}
LIST_TEMPLATES = {
    "list_default": [{"name": "default", "template": CHATML}, {"name": "tool_use", "template": "tools"}],
    "list_no_default": [{"name": "tool_use", "template": CHATML}],
    "list_bad_entries": [1, "x", {"name": "default"}],
    "list_empty": [],
    "dict_template": {"default": CHATML},
}
MUST_WORK = {"list_default"}  # HF's named templates: the one named default is the template
TEMPLATE_MAY_CHANGE = {"empty", "whitespace", "list_no_default", "list_empty", "undefined_call"}


@pytest.mark.parametrize("name", [*TEMPLATES, *LIST_TEMPLATES])
def test_chat_template(clean, tmp_path, name):
    directory = copy(clean, "llama", tmp_path)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATES.get(name, LIST_TEMPLATES.get(name))
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    probe("template", name, chat_command(directory), clean["chat_output"], may_change=name in TEMPLATE_MAY_CHANGE,
          must_succeed=name in MUST_WORK)
