"""Fuzz: `lmlab generate`'s sampling flags at and past the edges of their ranges (temperatures that
overflow float32, top-p that rounds to 0, penalties of 1e±300, seeds past 64 bits, non-finite numbers,
sizes of 10^30). Each is refused in one line, or runs and prints text; never a traceback.
"""

import pytest

from chat_models import tiny_chat_model
from fuzz.oracle import run_cli
from fuzz.record import fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)

pytestmark = pytest.mark.usefixtures("one_thread")

BIG = str(10**30)
REFUSED = {  # case: flags (after a sampling --temperature 1 --seed 1)
    "temperature_1e-45": ["--temperature", "1e-45"],
    "temperature_1e-310": ["--temperature", "1e-310"],
    "temperature_below_min": ["--temperature", "0.005"],
    "temperature_negative": ["--temperature", "-1"],
    "temperature_nan": ["--temperature", "nan"],
    "temperature_inf": ["--temperature", "inf"],
    "top_p_zero": ["--top-p", "0"],
    "top_p_over_one": ["--top-p", "1.5"],
    "top_p_nan": ["--top-p", "nan"],
    "repetition_penalty_1e-300": ["--repetition-penalty", "1e-300"],
    "repetition_penalty_1e300": ["--repetition-penalty", "1e300"],
    "repetition_penalty_zero": ["--repetition-penalty", "0"],
    "repetition_penalty_negative": ["--repetition-penalty", "-1"],
    "repetition_penalty_nan": ["--repetition-penalty", "nan"],
    "seed_2**64": ["--seed", str(2**64)],
    "seed_-2**63-1": ["--seed", str(-2**63 - 1)],
    "seed_10**30": ["--seed", BIG],
    "max_new_tokens_10**30": ["--max-new-tokens", BIG],
    "max_new_tokens_zero": ["--max-new-tokens", "0"],
    "top_k_zero": ["--top-k", "0"],
    "beams_10**30": ["--temperature", "0", "--beams", BIG],
    "length_penalty_nan": ["--temperature", "0", "--beams", "2", "--length-penalty", "nan"],
    "length_penalty_1e308": ["--temperature", "0", "--beams", "2", "--length-penalty", "1e308"],
    "length_penalty_-1e308": ["--temperature", "0", "--beams", "2", "--length-penalty=-1e308"],
}
RUNS = {  # case: flags that are valid, at the edge of their range
    "temperature_min": ["--temperature", "0.01"],
    "temperature_1e308": ["--temperature", "1e308"],
    "repetition_penalty_min": ["--repetition-penalty", "0.01"],
    "repetition_penalty_max": ["--repetition-penalty", "100"],
    "seed_2**64-1": ["--seed", str(2**64 - 1)],
    "seed_-2**63": ["--seed", str(-2**63)],
    "top_k_10**30": ["--top-k", BIG],
    "length_penalty_max": ["--temperature", "0", "--beams", "2", "--length-penalty", "4"],
    "length_penalty_min": ["--temperature", "0", "--beams", "2", "--length-penalty=-4"],
}
GREEDY_TOO = {  # case: flags whose sampling keeps only the most likely token, so the output is the greedy one
    "top_p_1e-50": ["--top-p", "1e-50"],
    "top_p_1e-300": ["--top-p", "1e-300"],
    "top_p_5e-324": ["--top-p", "5e-324"],
}


@pytest.fixture(scope="module")
def generate(tmp_path_factory):
    """flags -> the `lmlab generate` command on a tiny model, sampling with seed 1 unless flags say otherwise;
    and the greedy command's output."""
    model = tiny_chat_model(tmp_path_factory.mktemp("sampling") / "model")

    def command(flags: list[str]) -> list[str]:
        return ["generate", "--model", model, "--prompt", "1+2", "--max-new-tokens", "8", "--temperature", "1",
                "--seed", "1", *flags]

    greedy = run_cli(command(["--temperature", "0"]))
    assert greedy.code == 0, greedy.err
    return command, greedy.out


@pytest.mark.parametrize("case", REFUSED)
def test_out_of_range_flags_are_one_line(generate, case):
    command, _ = generate
    assert probe("sampling_flags", case, command(REFUSED[case]), None).kind == "clean_error"


@pytest.mark.parametrize("case", RUNS)
def test_flags_at_the_edge_of_their_range_run(generate, case):
    command, _ = generate
    probe("sampling_flags", case, command(RUNS[case]), None, may_change=True, must_succeed=True)


@pytest.mark.parametrize("case", GREEDY_TOO)
def test_a_top_p_below_float32s_range_samples_the_most_likely_token(generate, case):
    command, greedy = generate
    assert probe("sampling_flags", case, command(GREEDY_TOO[case]), greedy, must_succeed=True).kind == "same_output"
