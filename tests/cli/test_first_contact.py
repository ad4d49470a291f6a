"""What a new user meets first: `lmlab --version`, and an unknown flag pointing to the command's own help."""

import subprocess
import sys
from importlib.metadata import version

import pytest

from conftest import lmlab


def test_version_prints_the_installed_version():
    done = subprocess.run([sys.executable, "-m", "lmlab.cli.main", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"lmlab {version('lmlab')}"


@pytest.mark.parametrize("argv, help_of", [
    (["generate", "--model", "m", "--prompt", "p", "--max_new_tokens", "3"], "lmlab generate"),
    (["eval", "perplexity", "--model", "m", "--data", "markov", "--bogus"], "lmlab eval perplexity"),
])
def test_an_unknown_flag_points_to_the_commands_own_help(capsys, argv, help_of):
    with pytest.raises(SystemExit) as exited:
        lmlab(*argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1
    assert "unrecognized arguments" in err and err.endswith(f"(see `{help_of} --help`)")
