"""Progress on stderr: evaluation passes count their items on a bar that is erased when done, shown on a terminal
only (in a log or before an error line it would be noise)."""

import io
import sys

from lmlab.progress import in_batches


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_batches_cover_the_items_in_order_and_the_bar_counts_them_on_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stderr", Terminal())
    batches = list(in_batches(list(range(10)), 4, "decoding", "pair"))
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    shown = sys.stderr.getvalue()
    assert "decoding:" in shown and "/10 [" in shown  # the total is known: an ETA


def test_off_a_terminal_the_transient_bar_prints_nothing(capsys):
    assert len(list(in_batches(list(range(10)), 4, "decoding", "pair"))) == 3
    assert capsys.readouterr().err == ""


def test_a_hidden_bar_prints_nothing(capsys):
    assert [len(b) for b in in_batches("abcde", 2, "x", "letter", show=False)] == [2, 2, 1]
    assert capsys.readouterr().err == ""
