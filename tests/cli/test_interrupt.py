"""Ctrl-C at any moment exits 130 with one line and no traceback; a reader that closes stdout early
ends the command quietly. Both in real processes: signals and pipes are what is under test."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TINY_MODEL_ARGS

TRAIN = ["train", "--model", "gpt2-tiny", *TINY_MODEL_ARGS, "--max-steps", "100000", "--batch-size", "4",
         "--block-size", "16", "--log-every", "1", "--device", "cpu"]


def start(*args, **kwargs) -> subprocess.Popen:
    """lmlab in a child process that takes Ctrl-C as a terminal's foreground job does (a test runner
    started in the background of a script passes SIGINT down ignored)."""
    return subprocess.Popen([sys.executable, "-m", "lmlab.cli.main", *map(str, args)], stderr=subprocess.PIPE,
                            text=True, env=os.environ | {"OMP_NUM_THREADS": "1"}, preexec_fn=default_sigint, **kwargs)


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# 1 s: importing torch and the commands (about 2 s; the interpreter itself starts in 0.1 s, more on a busy
# machine); 2.5 s: the last imports or the tokenizer's training.
@pytest.mark.parametrize("delay", [1.0, 2.5])
def test_ctrl_c_during_start_up_is_one_line_exit_130(tmp_path, corpus_file, delay):
    proc = start(*TRAIN, "--data", corpus_file, "--out", tmp_path / "r", stdout=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and stderr.endswith("lmlab: interrupted\n") and "Traceback" not in stderr, stderr


def test_ctrl_c_during_an_import_lands_after_it(tmp_path):
    """A Ctrl-C in the middle of a module's import is raised once the import has finished, so no library is
    left half-imported (deterministic: the module sends SIGINT to its own process halfway through)."""
    (tmp_path / "halfway.py").write_text("import signal, time\nsignal.raise_signal(signal.SIGINT)\n"
                                         "time.sleep(0.1)\nFINISHED = True\n")
    child = ("import signal, sys, time\n"
             "from lmlab.cli.main import _interrupt_outside_imports\n"
             "signal.signal(signal.SIGINT, _interrupt_outside_imports)\n"
             "try:\n"
             "    import halfway\n"
             "    for _ in range(500):  # 5 s of Python: the held-back Ctrl-C lands between two sleeps\n"
             "        time.sleep(0.01)\n"
             "except KeyboardInterrupt:\n"
             "    print('interrupted after the import:', sys.modules['halfway'].FINISHED)\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60,
                          env=os.environ | {"PYTHONPATH": str(tmp_path)})
    assert done.stdout == "interrupted after the import: True\n", done.stderr


def test_ctrl_c_during_training_saves_a_checkpoint_and_exits_130(tmp_path, corpus_file):
    out = tmp_path / "r"
    proc = start(*TRAIN, "--data", corpus_file, "--out", out, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text().count("\n") >= 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and stderr.endswith("lmlab: interrupted\n") and "Traceback" not in stderr, stderr
    assert "stopped at step" in stdout and "--resume" in stdout
    assert any((out / "checkpoints").iterdir())


def test_a_closed_stdout_ends_the_command_quietly():
    proc = start("list", stdout=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written, as `| head -0` would be
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 141 and stderr == "", stderr


def test_generate_into_head_ends_quietly(tmp_path, corpus_file):
    model = tmp_path / "ngram"
    assert subprocess.run([sys.executable, "-m", "lmlab.cli.main", "train", "--arch", "ngram", "--data",
                           str(corpus_file), "--out", str(model)], capture_output=True).returncode == 0
    shell = (f"{sys.executable} -m lmlab.cli.main generate --model {model} --prompt Zini --max-new-tokens 500 "
             "| head -c 10; exit ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert len(done.stdout) == 10 and done.stderr == "" and done.returncode in (0, 141), done.stderr
