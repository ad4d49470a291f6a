"""Wilson's interval against SciPy's, and the bootstrap interval's coverage of a known mean."""

import pytest

from lmlab.errors import LmlabError
from lmlab.eval.intervals import bootstrap_interval, wilson_interval

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parity
@pytest.mark.parametrize("successes,n", [(0, 5), (3, 10), (7, 10), (40, 40), (13, 57)])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_wilson_matches_scipy(successes, n, level):
    scipy = stats.binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
    assert wilson_interval(successes, n, level) == pytest.approx((scipy.low, scipy.high), abs=1e-12)


def test_bootstrap_brackets_the_mean_and_narrows_with_more_data():
    small = bootstrap_interval([0.2, 0.4, 0.6, 0.8])
    large = bootstrap_interval([0.2, 0.4, 0.6, 0.8] * 25)
    assert small[0] < 0.5 < small[1] and large[0] < 0.5 < large[1]
    assert large[1] - large[0] < (small[1] - small[0]) / 3
    assert bootstrap_interval([0.2, 0.4, 0.6, 0.8]) == small  # seeded: the same interval each time


def test_impossible_inputs_are_one_error():
    with pytest.raises(LmlabError, match="not a share"):
        wilson_interval(6, 5)
    with pytest.raises(LmlabError, match="at least one value"):
        bootstrap_interval([])
