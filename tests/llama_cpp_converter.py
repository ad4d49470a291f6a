"""llama.cpp's own converter (convert_hf_to_gguf.py) as the reference writer of GGUF files.

It is taken from the llama-cpp-python source distribution, which vendors llama.cpp, never committed: the
file LMLAB_LLAMA_CPP_SDIST names (`.ci/run` fetches it with `pip download llama-cpp-python==VERSION --no-deps
--no-binary :all:` before the tests, which run offline), else the newest /tmp/lcpp/llama_cpp_python-*.tar.gz.
Without one a test that needs it is skipped, and fails under CI (`missing`). Only the converter, its
`conversion` package and llama.cpp's own gguf-py (which it puts first on its path) are extracted. It runs in
a subprocess (it needs torch, numpy, transformers and sentencepiece)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SDIST_GLOB = "/tmp/lcpp/llama_cpp_python-*.tar.gz"
VENDORED = "vendor/llama.cpp/"
PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
TIMEOUT_S = 300


def missing(reason: str):
    """Skip the test for want of a reference; under CI (`.ci/run` installs every reference) fail it instead."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def llama_cpp():
    """The `llama_cpp` module (llama-cpp-python, in the test extra), or `missing`."""
    try:
        import llama_cpp
    except ImportError:
        missing("llama.cpp's own run needs llama-cpp-python (the test extra)")
    return llama_cpp


def extracted_converter(directory: Path) -> Path:
    """llama.cpp's convert_hf_to_gguf.py (with what it imports) extracted under `directory`; `missing` when
    there is no source distribution."""
    found = os.environ.get("LMLAB_LLAMA_CPP_SDIST") or max(glob.glob(SDIST_GLOB), default=None)
    if found is None or not Path(found).is_file():
        missing("llama.cpp's converter needs the llama-cpp-python sdist (set LMLAB_LLAMA_CPP_SDIST)")
    marker = directory / "extracted-from"  # a folder kept between sessions is extracted once per sdist
    if marker.is_file() and marker.read_text() == str(Path(found).resolve()):
        return directory / PARTS[0]
    for part in PARTS:  # another sdist's files
        shutil.rmtree(directory / part, ignore_errors=True)
    with tarfile.open(found) as sdist:
        members = [m for m in sdist.getmembers() if m.isfile() and VENDORED in m.name
                   and m.name.split(VENDORED, 1)[1].startswith(PARTS)]
        for member in members:
            target = directory / member.name.split(VENDORED, 1)[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(sdist.extractfile(member).read())
    marker.write_text(str(Path(found).resolve()))
    return directory / PARTS[0]


# The converter run with the pre-tokenizer name given: it names a byte-level BPE vocabulary's split from a hash
# of how its own tokenizer splits a fixed text, which a vocabulary trained in a test never matches.
WITH_PRE = """
import pathlib, runpy, sys
converter, pre = sys.argv.pop(1), sys.argv.pop(1)
root = pathlib.Path(converter).parent
sys.path[:0] = [str(root), str(root / "gguf-py")]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv[0] = converter
runpy.run_path(converter, run_name="__main__")
"""


def convert_hf_to_gguf(converter: Path, hf_dir: Path, out: Path, outtype: str = "f32", pre: str | None = None) -> Path:
    """The HF model directory `hf_dir` written as the GGUF file `out` by llama.cpp's converter (`pre`: the
    pre-tokenizer name to write, for a byte-level BPE vocabulary it does not know)."""
    command = [str(converter)] if pre is None else ["-c", WITH_PRE, str(converter), pre]
    done = subprocess.run([sys.executable, *command, str(hf_dir), "--outfile", str(out), "--outtype", outtype],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed on {hf_dir}:\n{done.stderr[-3000:]}")
    return out


def tokenizer_files(family: str, hf_dir: Path, work: Path, vocab_size: int) -> None:
    """The tokenizer files llama.cpp's converter reads beside a model of `family` in `hf_dir`: OLMo 2's byte-level
    BPE tokenizer.json (run the converter with `pre`, as it knows no hash of a vocabulary trained here), else a
    SentencePiece tokenizer.model trained once into `work` (the converter pads it to `vocab_size`)."""
    from gguf_files import TEXTS
    from lmlab.tokenizers.bpe import train_bpe
    from sentencepiece_models import trained

    if family == "olmo2":
        train_bpe(TEXTS * 20, vocab_size=vocab_size).save(str(hf_dir / "tokenizer.json"))
        (hf_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
        return
    model = work / "llama.model"
    if not model.is_file():
        trained(work, "llama")
    shutil.copy(model, hf_dir / "tokenizer.model")
    # llama.cpp finds Phi-3's <|endoftext|> by name: a Phi-3 vocabulary must hold it
    added = {str(vocab_size - 1): {"content": "<|endoftext|>", "special": True}} if family == "phi3" else {}
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "added_tokens_decoder": added}))
