"""Atomic writes replace only what lmlab wrote, and clean up after writers that were killed."""

import os
import subprocess
import sys

import pytest

from lmlab.errors import LmlabError
from lmlab.io.atomic import MARKER, atomic_path, atomic_write_text, is_temp


def write_dir(path, files: dict[str, str]) -> None:
    with atomic_path(path) as tmp:
        tmp.mkdir()
        for name, text in files.items():
            (tmp / name).write_text(text)


def user_dir(path):
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    return path


def leftovers(directory) -> list[str]:
    return [p.name for p in directory.iterdir() if is_temp(p.name)]


def test_a_file_never_replaces_a_directory(tmp_path):
    victim = user_dir(tmp_path / "victim")
    with pytest.raises(LmlabError, match="is a directory, and lmlab writes a file there"):
        atomic_write_text(victim, "arpa")
    assert (victim / "notes.txt").read_text() == "mine" and not leftovers(tmp_path)


def test_a_directory_never_replaces_a_file(tmp_path):
    (tmp_path / "out").write_text("mine")
    with pytest.raises(LmlabError, match="is a file, and lmlab writes a directory there"):
        write_dir(tmp_path / "out", {"config.json": "{}"})
    assert (tmp_path / "out").read_text() == "mine" and not leftovers(tmp_path)


def test_a_directory_never_replaces_one_lmlab_did_not_write(tmp_path):
    victim = user_dir(tmp_path / "victim")
    with pytest.raises(LmlabError, match="lmlab did not write"):
        write_dir(victim, {"config.json": "{}"})
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"] and not leftovers(tmp_path)


def test_a_directory_replaces_an_empty_one_and_then_its_own(tmp_path):
    (tmp_path / "model").mkdir()
    write_dir(tmp_path / "model", {"a.txt": "1"})
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [MARKER, "a.txt"]
    write_dir(tmp_path / "model", {"b.txt": "2"})
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [MARKER, "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the old one went with the temporary


def test_a_file_replaces_a_file(tmp_path):
    atomic_write_text(tmp_path / "run.json", "1")
    atomic_write_text(tmp_path / "run.json", "2")
    assert (tmp_path / "run.json").read_text() == "2" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_the_temporary_is_named_after_its_writer(tmp_path):
    with atomic_path(tmp_path / "step_0000002.pt") as tmp:
        assert tmp.parent.name.startswith(f".step_0000002.pt.{os.getpid()}-") and is_temp(tmp.parent.name)
        tmp.write_text("x")


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    with atomic_path(tmp_path / "step_0000002.pt") as live:
        live.write_text("x")
        host = live.parent.name.split("-")[1]
        killed = tmp_path / f".step_0000004.pt.{dead}-{host}-abc123.tmp"
        (killed / "step_0000004.pt").parent.mkdir()
        (killed / "step_0000004.pt").write_text("half")
        elsewhere = tmp_path / f".step_0000004.pt.{dead}-00000000-abc123.tmp"  # another host's: its pid means nothing
        elsewhere.mkdir()
        atomic_write_text(tmp_path / "run.json", "{}")
        assert not killed.exists() and elsewhere.exists() and live.parent.exists()


def test_a_symbolic_link_is_never_written_through(tmp_path):
    (tmp_path / "theirs").mkdir()
    for target in ("theirs", "nowhere"):
        link = tmp_path / f"to_{target}"
        link.symlink_to(tmp_path / target)
        with pytest.raises(LmlabError, match="symbolic link"):
            write_dir(link, {"a.txt": "x"})
        assert link.is_symlink() and not leftovers(tmp_path)


@pytest.mark.parametrize("fails", ["oserror", "wrapped", "no_errno"])
def test_running_out_of_space_is_one_error_and_leaves_nothing(tmp_path, monkeypatch, fails):
    """ENOSPC as an OSError, wrapped by a library (torch's 'unexpected pos' keeps it as the context), or
    with no errno at all (safetensors' SafetensorError): then a probe write into the directory fails too."""
    import lmlab.io.atomic as atomic

    full = OSError(28, "No space left on device")
    if fails == "no_errno":
        monkeypatch.setattr(atomic.tempfile, "TemporaryFile", lambda **kw: (_ for _ in ()).throw(full))
    atomic_write_text(tmp_path / "kept.txt", "before")
    for path in (tmp_path / "kept.txt", tmp_path / "new" / "deeper" / "file.txt"):
        with pytest.raises(LmlabError, match="no space left to write") as error, atomic_path(path) as tmp:
            tmp.write_text("half")
            if fails == "oserror":
                raise full
            if fails == "wrapped":
                try:
                    raise full
                except OSError:
                    raise RuntimeError("unexpected pos 576 vs 534")  # noqa: B904 - as torch's writer does
            raise RuntimeError("Error while serializing")  # no OSError anywhere in the chain
        assert str(path) in str(error.value)
    assert (tmp_path / "kept.txt").read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]  # no temporary, no new/ left


def test_another_error_is_not_called_a_full_disk(tmp_path):
    with pytest.raises(RuntimeError, match="a bug"), atomic_path(tmp_path / "a" / "f.txt") as tmp:
        tmp.write_text("x")
        raise RuntimeError("a bug")
    assert list(tmp_path.iterdir()) == []


def test_an_append_cut_short_is_undone(tmp_path, monkeypatch):
    from lmlab.io.atomic import append_bytes

    path = tmp_path / "metrics.jsonl"
    append_bytes(path, b'{"step": 1}\n')
    real_open = open

    class Full:
        def __init__(self, file):
            self.file = file

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            self.file.write(bytes(data[:3]))
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda *a, **kw: Full(real_open(*a, **kw)))
    with pytest.raises(LmlabError, match="no space left"):
        append_bytes(path, b'{"step": 2}\n')
    assert path.read_bytes() == b'{"step": 1}\n'
