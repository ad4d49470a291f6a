"""Fuzz: where commands write, against what the user has. An output that is one of the command's
inputs (or holds one, or lies inside one), a run directory that is not lmlab's, a disk that fills up
mid-write (a real 5 MB tmpfs where this process may mount one, and the file size limit in a
subprocess everywhere), and symbolic links where a command writes or copies from. Every case must
give one clean error (or, where the path is fine, the command's result), and leave every file of the
user's as it was, with no temporary and no empty directory behind."""

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.inputs import chat_tokenizer, data_files, save_model_dir, tiny_decoder
from fuzz.oracle import Outcome, Run, classify, run_cli
from fuzz.record import check, fuzz_report  # noqa: F401 (fuzz_report: the session's report)
from fuzz.test_files import TINY_SFT, TINY_TRAIN, digest
from lmlab.io.atomic import is_temp
from lmlab.io.outputs import RUN_MARKER

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A tiny model directory, data files, an n-gram run and its ARPA file, and a word2vec model."""
    root = tmp_path_factory.mktemp("made")
    tokenizer = chat_tokenizer()
    made = {"model": save_model_dir(root / "model", tiny_decoder("llama", tokenizer.vocab_size), tokenizer),
            **data_files(root / "data")}
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(root / "cache"))
        assert run_cli(["train", "--arch", "ngram", "--order", "2", "--data", made["text"], "--tokenizer",
                        made["model"], "--block-size", "32", "--out", root / "ngram"]).code == 0
        assert run_cli(["ngram", "export", "--model", root / "ngram", "--arpa", root / "m.arpa"]).code == 0
        assert run_cli(["word2vec", "train", "--data", made["text"], "--out", root / "vectors", "--dim", "8",
                        "--epochs", "1", "--min-count", "1"], timeout=30).code == 0
    return made | {"ngram": root / "ngram", "arpa": root / "m.arpa", "vectors": root / "vectors"}


def user_tree(made, root: Path) -> dict[str, Path]:
    """The user's own copy of every input, under `root` (what a case must leave unchanged)."""
    root.mkdir()
    paths = {}
    for name in ("model", "text", "chats", "classify_csv", "ngram", "arpa", "vectors"):
        source = made[name]
        paths[name] = root / source.name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, paths[name])
    return paths


def watched(args: list, user: Path, flag: str | None, must_succeed: bool = False, timeout: float = 30,
            run=None) -> Outcome:
    """The outcome of `lmlab ARGS` (or of `run()`, a Run), failed when anything of the user's under `user`
    changed, when a temporary or a new empty directory is left, when a refusal does not name `flag`, or
    when a refused command wrote anything."""
    before, dirs = digest(user), _directories(user)
    outcome = late_error(run() if run else run_cli(args, timeout))
    after = digest(user)
    changed = sorted(k for k in before if after.get(k) != before[k])
    temps = sorted(str(p) for p in user.rglob("*") if is_temp(p.name))
    empty = sorted(str(d) for d in _directories(user) - dirs if not any(d.iterdir()))
    if changed:
        return Outcome("silent_wrong", f"the user's files changed or vanished: {changed} ({outcome.detail})")
    if temps or empty:
        return Outcome("silent_wrong", f"left behind: {temps + empty} ({outcome.detail})")
    if outcome.kind == "clean_error":
        if must_succeed:
            return Outcome("wrong_refusal", outcome.detail)
        if set(after) != set(before):
            return Outcome("silent_wrong", f"refused but wrote {sorted(set(after) - set(before))}")
        if flag and flag not in outcome.detail:
            return Outcome("messy_error", f"the error does not name {flag}: {outcome.detail}")
    elif not must_succeed and outcome.ok:
        return Outcome("silent_wrong", f"not refused: {outcome.detail}")
    return outcome


def late_error(run: Run) -> Outcome:
    """`classify`'s outcome, except that a command that fails once at work (a full disk) may have shown
    its progress and warnings first: then the error must be the one `lmlab: error:` line at the end."""
    lines = [line for line in re.split(r"[\r\n]", run.err.strip()) if line.strip()]
    if run.code == 2 and not run.error and "Traceback" not in run.err and lines and \
            lines[-1].startswith("lmlab: error:") and sum("lmlab: error" in line for line in lines) == 1:
        return Outcome("clean_error", lines[-1])
    return classify(run, None, may_change=True)


def _directories(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()}


# -- outputs that are inputs ----------------------------------------------------------------------------------------

# command -> (its arguments, given the user's paths and the output; the input the output is set against; the flag)
COMMANDS = {
    "quantize": (lambda p, o: ["quantize", "--model", p["model"], "--to", "int8", "--out", o], "model", "--out"),
    "train": (lambda p, o: ["train", *TINY_TRAIN, "--data", p["text"], "--out", o], "text", "--out"),
    "train_tokenizer": (lambda p, o: ["train", *TINY_TRAIN, "--data", p["chats"], "--tokenizer", p["model"],
                                      "--out", o], "model", "--out"),
    "sft_model": (lambda p, o: ["sft", "--model", p["model"], "--data", p["chats"], "--out", o, *TINY_SFT],
                  "model", "--out"),
    "sft_data": (lambda p, o: ["sft", "--model", p["model"], "--data", p["chats"], "--out", o, *TINY_SFT],
                 "chats", "--out"),
    "tokenizer_train": (lambda p, o: ["tokenizer", "train", "--data", p["text"], "--vocab-size", "300", "--out", o],
                        "text", "--out"),
    "ngram_import": (lambda p, o: ["ngram", "import", "--arpa", p["arpa"], "--tokenizer", p["model"], "--out", o],
                     "arpa", "--out"),
    "ngram_export": (lambda p, o: ["ngram", "export", "--model", p["ngram"], "--arpa", o], "ngram", "--arpa"),
    "word2vec_train": (lambda p, o: ["word2vec", "train", "--data", p["text"], "--out", o], "text", "--out"),
    "word2vec_export": (lambda p, o: ["word2vec", "export", "--model", p["vectors"], "--out", o], "vectors", "--out"),
    "finetune": (lambda p, o: ["finetune", "--model", p["model"], "--task", "classify", "--data", p["classify_csv"],
                               "--out", o, "--epochs", "1"], "classify_csv", "--out"),
    "inspect_png": (lambda p, o: ["inspect", "attention", "--model", p["model"], "--text", "hello", "--png", o],
                    "model", "--png"),
}
RELATIONS = ["is", "holds", "inside", "link_to"]


def related(path: Path, relation: str, tmp_path: Path) -> Path:
    """An output that is `path`, holds it, lies inside it, or is a symbolic link to it."""
    if relation == "link_to":
        (tmp_path / "link").symlink_to(path)
        return tmp_path / "link"
    return {"is": path, "holds": path.parent, "inside": path / "sub" / "out"}[relation]


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_output_is_input(made, tmp_path, command, relation):
    user = user_tree(made, tmp_path / "user")
    build, source, flag = COMMANDS[command]
    out = related(user[source], relation, tmp_path)
    outcome = watched(build(user, out), tmp_path / "user", flag)
    if outcome.kind == "clean_error" and "the input" not in outcome.detail:
        outcome = Outcome("messy_error", f"refused, but not as the command's input: {outcome.detail}")
    check("outputs_are_inputs", f"{command}:{relation}", outcome)


@pytest.mark.parametrize("command", ["quantize", "tokenizer_train"])
def test_output_beside_input(made, tmp_path, command):
    """An output whose name merely starts with an input's (model -> model2) is not that input."""
    user = user_tree(made, tmp_path / "user")
    build, source, flag = COMMANDS[command]
    out = user[source].with_name(user[source].name + "2")
    outcome = watched(build(user, out), tmp_path / "user", flag, must_succeed=True)
    check("outputs_are_inputs", f"{command}:beside", outcome)


# -- run directories ------------------------------------------------------------------------------------------------

NOT_RUNS = {
    "user_metrics": {"metrics.jsonl": '{"mine": 1}\n', "notes.txt": "my notes\n"},
    "hf_model_folder": {"config.json": "{}", "tokenizer.json": "{}", "model.safetensors": ""},
    "run_json_without_recipe": {"run.json": "{}"},
    "foreign_marker": {RUN_MARKER: '{"format": "someone-else-1"}'},
    "tokenizer_only": {"tokenizer.json": "{}"},
    "checkpoints_of_the_user": {"checkpoints/notes.txt": "mine\n"},
}
RUN_COMMANDS = {
    "train": lambda p, o: ["train", *TINY_TRAIN, "--data", p["text"], "--tokenizer", p["model"], "--out", o],
    "ngram": lambda p, o: ["train", "--arch", "ngram", "--order", "2", "--data", p["text"], "--tokenizer",
                           p["model"], "--block-size", "32", "--out", o],
    "sft": lambda p, o: ["sft", "--model", p["model"], "--data", p["chats"], "--out", o, *TINY_SFT],
    "elmo": lambda p, o: ["elmo", "train", "--data", p["text"], "--out", o, "--max-steps", "1"],
}


@pytest.mark.parametrize("kind", list(NOT_RUNS))
@pytest.mark.parametrize("command", list(RUN_COMMANDS))
def test_not_a_run(made, tmp_path, command, kind):
    user = user_tree(made, tmp_path / "user")
    out = user["model"].parent / "mine"
    for name, text in NOT_RUNS[kind].items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    outcome = watched(RUN_COMMANDS[command](user, out), tmp_path / "user", "--out")
    check("run_dirs", f"{command}:{kind}", outcome)


@pytest.mark.parametrize("arch", ["gpt2", "lstm"])
def test_a_bad_tokenizer_leaves_no_run(made, tmp_path, arch):
    """A run whose --tokenizer is refused writes nothing: the run is claimed only once its tokenizer is read."""
    user = user_tree(made, tmp_path / "user")
    (user["model"].parent / "bad.json").write_text("{}")
    model = TINY_TRAIN if arch == "gpt2" else ["--arch", "lstm", "--max-steps", "1"]
    args = ["train", *model, "--data", user["text"], "--tokenizer", user["model"].parent / "bad.json",
            "--out", user["model"].parent / "new-run"]
    check("run_dirs", f"bad_tokenizer:{arch}", watched(args, tmp_path / "user", "bad.json"))


@pytest.mark.parametrize("case", ["new", "empty", "resume", "resume_older_run", "ngram_again"])
def test_a_run(made, tmp_path, case):
    """lmlab's own runs stay usable: a new or empty directory becomes a marked run, a run (marked, or of
    lmlab before the marker) resumes, and a marked n-gram run is trained again."""
    user = user_tree(made, tmp_path / "user")
    out = tmp_path / "run"
    command = "ngram" if case == "ngram_again" else "train"
    args = RUN_COMMANDS[command](user, out)
    if case == "empty":
        out.mkdir()
    if case in ("resume", "resume_older_run", "ngram_again"):
        assert run_cli(args + (["--stop-after", "1"] if command == "train" else []), timeout=30).code == 0
        args = args + (["--resume"] if command == "train" else [])
    if case == "resume_older_run":
        (out / RUN_MARKER).unlink()
    outcome = watched(args, tmp_path / "user", None, must_succeed=True)
    if outcome.ok and not (out / RUN_MARKER).is_file():
        outcome = Outcome("silent_wrong", f"the run has no {RUN_MARKER} marker")
    check("run_dirs", case, outcome)


# -- disk full ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    """A real 5 MB tmpfs (None where this process may not mount one)."""
    where = tmp_path_factory.mktemp("small_disk")
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(where)], capture_output=True)
    except OSError:
        mounted = None
    if mounted is None or mounted.returncode != 0:
        yield None
        return
    yield where
    subprocess.run(["umount", str(where)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Empty the small disk, then fill it to `leave` free bytes."""
    for entry in disk.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (disk / "filler").write_bytes(bytes(max(0, shutil.disk_usage(disk).free - leave)))


# case -> (the command given the user's paths and the disk, free bytes to leave, what it must leave intact
# there: a previous output, written by the same command first with room to spare)
FULL = {
    "train_checkpoint": (lambda p, d: RUN_COMMANDS["train"](p, d / "run"), 200_000, None),
    "train_resume": (lambda p, d: RUN_COMMANDS["train"](p, d / "run") + ["--resume"], 0, "run"),
    "quantize": (lambda p, d: ["quantize", "--model", p["model"], "--to", "int8", "--out", d / "q"], 20_000, None),
    "quantize_over_its_output": (lambda p, d: ["quantize", "--model", p["model"], "--to", "int8", "--out", d / "q"],
                                 0, "q"),
    "tokenizer_train": (lambda p, d: ["tokenizer", "train", "--data", p["text"], "--vocab-size", "300", "--out",
                                      d / "tok"], 0, None),
    "ngram_export": (lambda p, d: ["ngram", "export", "--model", p["ngram"], "--arpa", d / "m.arpa"], 0, "m.arpa"),
    "word2vec_export": (lambda p, d: ["word2vec", "export", "--model", p["vectors"], "--out", d / "v.txt"], 0, None),
}


@pytest.mark.parametrize("case", list(FULL))
def test_disk_full(made, tmp_path, small_disk, case):
    if small_disk is None:
        pytest.skip("no tmpfs can be mounted here; test_file_size_limit covers running out of space")
    user = user_tree(made, tmp_path / "user")
    build, leave, previous = FULL[case]
    fill(small_disk, 10**6)
    if previous:
        first = build(user, small_disk)
        first = [a for a in first if a != "--resume"] + (["--stop-after", "1"] if case == "train_resume" else [])
        assert run_cli(first, timeout=30).code == 0
    kept = digest(small_disk / previous) if previous else {}
    (small_disk / "filler").unlink()
    (small_disk / "filler").write_bytes(bytes(max(0, shutil.disk_usage(small_disk).free - leave)))
    outcome = watched(build(user, small_disk), tmp_path / "user", None)
    if outcome.ok and previous and digest(small_disk / previous) != kept:
        outcome = Outcome("silent_wrong", f"the previous {previous} changed")
    check("disk_full", case, _no_space(outcome, small_disk, previous))


def _no_space(outcome: Outcome, disk: Path, previous: str | None) -> Outcome:
    """`outcome`, failed unless it is the no-space error and the disk holds no temporary nor a new empty
    directory (a run directory may stay: it is the run's)."""
    if outcome.kind != "clean_error":
        return outcome
    if "no space left" not in outcome.detail:
        return Outcome("messy_error", f"not the no-space error: {outcome.detail}")
    temps = [str(p) for p in disk.rglob("*") if is_temp(p.name)]
    empty = [str(p) for p in disk.rglob("*") if p.is_dir() and not any(p.iterdir()) and p.name != previous]
    return Outcome("silent_wrong", f"left behind: {temps + empty}") if temps or empty else outcome


# case -> (the command given the user's paths and the output folder, the file size limit in bytes)
FSIZE = {
    "tokenizer_train": (lambda p, d: ["tokenizer", "train", "--data", p["text"], "--vocab-size", "300", "--out",
                                      d / "tok"], 2048),
    "train_checkpoint": (lambda p, d: RUN_COMMANDS["train"](p, d / "run"), 30_000),
    "quantize": (lambda p, d: ["quantize", "--model", p["model"], "--to", "int8", "--out", d / "q"], 16_000),
}


@pytest.mark.parametrize("case", list(FSIZE))
def test_file_size_limit(made, tmp_path, case):
    """The file size limit (RLIMIT_FSIZE: EFBIG, "File too large") in a subprocess: a real want of space
    on any machine."""
    user = user_tree(made, tmp_path / "user")
    out = tmp_path / "out"
    out.mkdir()
    build, limit = FSIZE[case]
    args = [str(a) for a in build(user, out)]

    def run():
        def limited():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        done = subprocess.run([sys.executable, "-m", "lmlab.cli.main", *args], capture_output=True, text=True,
                              preexec_fn=limited, timeout=120, env=os.environ | {"OMP_NUM_THREADS": "1"})
        return Run(done.returncode, done.stdout, done.stderr, 0.0)

    outcome = watched(args, tmp_path / "user", None, run=run)
    check("disk_full", f"file_size_limit:{case}", _no_space(outcome, out, None))


# -- symbolic links -------------------------------------------------------------------------------------------------

LINK_TARGETS = ["empty_dir", "lmlab_dir", "user_dir", "file", "dangling"]


def link_to(tmp_path: Path, user: Path, target: str) -> Path:
    """A symbolic link in `tmp_path` to a `target` of the user's."""
    to = {"empty_dir": user / "empty", "lmlab_dir": user / "quantized", "user_dir": user / "mine",
          "file": user / "notes.txt", "dangling": user / "nowhere"}[target]
    if target == "empty_dir":
        to.mkdir()
    elif target == "lmlab_dir":
        to.mkdir()
        (to / ".lmlab").write_text("written by lmlab\n")
    elif target == "user_dir":
        to.mkdir()
        (to / "notes.txt").write_text("mine\n")
    elif target == "file":
        to.write_text("mine\n")
    (tmp_path / "link").symlink_to(to)
    return tmp_path / "link"


@pytest.mark.parametrize("target", LINK_TARGETS)
@pytest.mark.parametrize("command", ["quantize", "tokenizer_train", "ngram_export", "train"])
def test_output_is_a_link(made, tmp_path, command, target):
    """An output that is a symbolic link is refused before any work (a run directory may be a link to a
    directory: it is written into, not replaced)."""
    user = user_tree(made, tmp_path / "user")
    link = link_to(tmp_path, user["model"].parent, target)
    build = {"quantize": COMMANDS["quantize"][0], "tokenizer_train": COMMANDS["tokenizer_train"][0],
             "ngram_export": COMMANDS["ngram_export"][0], "train": RUN_COMMANDS["train"]}[command]
    writes_into = command == "train" and target == "empty_dir" or \
        command == "tokenizer_train" and target in ("empty_dir", "lmlab_dir", "user_dir")
    flag = "--arpa" if command == "ngram_export" else "--out"
    outcome = watched(build(user, link), tmp_path / "user", flag, must_succeed=writes_into)
    check("symlinks", f"{command}:{target}", outcome)


FROM_LINKS = {
    "loop": ("sub/loop", ".."),
    "dir_inside": ("sub/again", "."),
    "dangling": ("gone.json", "nowhere.json"),
    "device": ("zero.json", "/dev/zero"),
}
FILE_LINKS = {"file_inside": "config.json", "file_outside": "{outside}"}  # copied as the files they name


@pytest.mark.parametrize("case", [*FROM_LINKS, *FILE_LINKS])
def test_download_from_a_folder_with_links(made, tmp_path, monkeypatch, case):
    """`download --from DIR` follows no link to a directory (a loop copied until ELOOP) and copies no
    device; a link to a regular file, inside DIR or not (an HF cache snapshot links into ../../blobs), is
    copied as the file."""
    monkeypatch.setenv("LMLAB_CACHE", str(tmp_path / "cache"))
    user = tmp_path / "user"
    folder = user / "folder"
    shutil.copytree(made["model"], folder)
    (user / "outside.json").write_text('{"secret": 1}')
    if case in FILE_LINKS:
        (folder / "same.json").symlink_to(FILE_LINKS[case].format(outside=user / "outside.json"))
    else:
        name, to = FROM_LINKS[case]
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).symlink_to(to.format(outside=user / "outside.json"))
    outcome = watched(["download", "smollm2-135m-instruct-hf", "--from", folder], user, "--from",
                      must_succeed=case in FILE_LINKS, timeout=20)
    cache = tmp_path / "cache"
    copied = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    if outcome.kind == "clean_error" and copied:
        outcome = Outcome("silent_wrong", f"refused but left {copied} in the cache")
    if case in FILE_LINKS and outcome.ok and not any(p.name == "same.json" and not p.is_symlink() for p in copied):
        outcome = Outcome("silent_wrong", "the linked file was not copied as a file")
    check("symlinks", f"download_from:{case}", outcome)
