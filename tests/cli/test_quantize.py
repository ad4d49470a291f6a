"""`lmlab quantize` writes a quantized model directory that every command reads back; `--dtype` on generate,
chat, logprobs and eval (perplexity, task) loads a model quantized; bad flags and outputs are one line, before any work."""

import json

import pytest
import torch

from chat_models import tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.models.load import load
from lmlab.models.quantized_files import QUANTIZATION_FILE
from lmlab.modules.quantized import QuantizedLinear

pytestmark = pytest.mark.usefixtures("one_thread", "built_kernels")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("models") / "chat")


@pytest.mark.parametrize("mode,group_size", [("int8", None), ("int4", None), ("int4", 32)])
def test_quantize_writes_a_directory_load_reads_back(tmp_path, chat_dir, capsys, mode, group_size):
    flags = ["--group-size", group_size] if group_size else []
    assert lmlab("quantize", "--model", chat_dir, "--to", mode, "--out", tmp_path / "q", *flags) == 0
    assert f"{mode} weights" in capsys.readouterr().out
    info = json.loads((tmp_path / "q" / QUANTIZATION_FILE).read_text())
    assert info["mode"] == mode and info["group_size"] == (32 if mode == "int4" else None)
    model, _ = load(tmp_path / "q")
    layer = model.blocks[0].feed_forward.gate_up
    assert isinstance(layer, QuantizedLinear) and layer.bits == int(mode[3:])
    expected, _ = load(chat_dir, mode, group_size=group_size or 32)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(model(ids), expected(ids))


def test_quantized_directory_serves_generate(tmp_path, chat_dir, capsys):
    lmlab("quantize", "--model", chat_dir, "--to", "int4", "--out", tmp_path / "q")
    capsys.readouterr()
    assert lmlab("generate", "--model", tmp_path / "q", "--prompt", "1+2", "--greedy", "--max-new-tokens", "5",
                 "--json") == 0
    from_dir = json.loads(capsys.readouterr().out)
    assert lmlab("generate", "--model", chat_dir, "--dtype", "int4", "--prompt", "1+2", "--greedy",
                 "--max-new-tokens", "5", "--json") == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == from_dir["token_ids"]


@pytest.mark.parametrize("command", [
    ["chat", "--prompt", "1+2", "--greedy", "--max-new-tokens", "3"],
    ["logprobs", "--prompt", "1+2="],
    ["eval", "perplexity", "--data", "{text}"],
    ["eval", "task", "--questions", "2", "--max-operand", "9"],
])
@pytest.mark.parametrize("dtype", ["int8", "int4", "bf16"])
def test_commands_take_a_dtype(tmp_path, chat_dir, capsys, command, dtype):
    text = tmp_path / "text.txt"
    text.write_text("1+2=3\n4+5=9\n")
    args = [a.format(text=text) for a in command]
    assert lmlab(*args[:2] if args[0] == "eval" else args[:1], "--model", chat_dir, "--dtype", dtype,
                 *(args[2:] if args[0] == "eval" else args[1:])) == 0, capsys.readouterr().err


def test_bad_dtype_is_refused_before_loading(capsys):
    with pytest.raises(SystemExit) as exited:
        lmlab("generate", "--model", "no-such-model", "--dtype", "int3", "--prompt", "x")
    assert exited.value.code == 2
    assert "invalid choice: 'int3'" in capsys.readouterr().err


@pytest.mark.parametrize("flags,fragment", [
    (["--to", "int8", "--group-size", "64"], "--group-size is int4's setting"),
    (["--to", "int4", "--group-size", "48"], "not a positive multiple of 32"),
    (["--to", "int4", "--group-size", "128"], "does not divide the 32 inputs"),
])
def test_bad_quantize_flags_are_one_line(tmp_path, chat_dir, capsys, flags, fragment):
    assert lmlab("quantize", "--model", chat_dir, "--out", tmp_path / "q", *flags) == 2
    one_line_error(capsys, fragment)
    assert not (tmp_path / "q").exists()


def test_quantize_will_not_replace_a_directory_it_did_not_write(tmp_path, chat_dir, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert lmlab("quantize", "--model", chat_dir, "--to", "int8", "--out", mine) == 2
    one_line_error(capsys, "--out", "did not write")
    assert (mine / "notes.txt").read_text() == "keep me"
    assert lmlab("quantize", "--model", chat_dir, "--to", "int8", "--out", tmp_path / "q") == 0
    assert lmlab("quantize", "--model", chat_dir, "--to", "int4", "--out", tmp_path / "q") == 0  # its own: replaced
    assert json.loads((tmp_path / "q" / QUANTIZATION_FILE).read_text())["mode"] == "int4"
