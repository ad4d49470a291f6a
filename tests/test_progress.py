"""Progress on stderr: evaluation passes count their items on a bar that is erased when done."""

from lmlab.progress import in_batches


def test_batches_cover_the_items_in_order_and_the_bar_counts_them(capsys):
    batches = list(in_batches(list(range(10)), 4, "decoding", "pair"))
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    printed = capsys.readouterr()
    assert printed.out == "" and "decoding:" in printed.err and "/10 [" in printed.err  # total known: an ETA


def test_a_hidden_bar_prints_nothing(capsys):
    assert [len(b) for b in in_batches("abcde", 2, "x", "letter", show=False)] == [2, 2, 1]
    assert capsys.readouterr().err == ""
