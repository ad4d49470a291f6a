"""Probing classifiers: control labels are fixed per word type, the probe finds a linear label and not
a random one, python-tokens labels are Python's own, the CLI gives one row per layer, bad JSONL is named."""

import json
import random

import pytest
import torch

from conftest import lmlab, one_line_error
from encoder_data import tiny_encoder_dir, write_jsonl
from fuzz.inputs import chat_tokenizer, save_model_dir, tiny_decoder
from lmlab.data.probing import python_token_lines
from lmlab.errors import LmlabError
from lmlab.inspect.probe import control_labels, fit_probe, probe_accuracy, split_by_text
from real_models import real_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_control_labels_are_fixed_per_type_seeded_and_follow_the_label_distribution():
    rng = random.Random(0)
    types = [f"w{rng.randrange(2000)}" for _ in range(20000)]
    labels = ["A" if rng.random() < 0.75 else "B" for _ in types]
    control = control_labels(types, labels, seed=1)
    by_type = {}
    for kind, label in zip(types, control):
        assert by_type.setdefault(kind, label) == label  # one label per type, wherever it occurs
    assert control == control_labels(types, labels, seed=1)
    assert control != control_labels(types, labels, seed=2)
    share = sum(label == "A" for label in by_type.values()) / len(by_type)
    assert 0.70 < share < 0.80


def test_probe_reads_a_linearly_separable_label_and_not_a_random_one():
    torch.manual_seed(0)
    sign = torch.randint(0, 2, (600,)) * 2 - 1  # (N,) the label as -1 / +1
    direction = torch.nn.functional.normalize(torch.randn(16), dim=0)
    states = (torch.randn(600, 16) + 4 * sign[:, None] * direction) * 3 + 5  # (N, C), a margin of 4 sigma
    separable = ["yes" if s > 0 else "no" for s in sign]
    noise = [random.Random(i).choice(["yes", "no"]) for i in range(600)]
    train, test = torch.arange(450), torch.arange(450, 600)
    assert probe_accuracy(states, separable, train, test) > 0.97
    assert probe_accuracy(states, noise, train, test) < 0.65


def test_fit_probe_is_deterministic():
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    assert torch.equal(fit_probe(x, y, 3), fit_probe(x, y, 3))


def test_split_keeps_every_text_on_one_side_and_is_seeded():
    texts = [f"t{i // 3}" for i in range(300)]  # 100 texts of 3 units each
    train, test = split_by_text(texts, seed=0)
    assert not {texts[i] for i in train.tolist()} & {texts[i] for i in test.tolist()}
    assert len(test) == 60 and len(train) == 240
    assert torch.equal(test, split_by_text(texts, seed=0)[1])
    assert not torch.equal(test, split_by_text(texts, seed=1)[1])
    with pytest.raises(LmlabError, match="single text"):
        split_by_text(["same", "same"], seed=0)


def test_python_token_labels_on_a_hand_written_snippet():
    source = ('import os\n'
              'def area(r, pi=3.14):  # circle\n'
              '    return pi * r ** 2 if r is not None else "none"\n'
              'doc = """two\n'
              'lines""" + x\n'
              'y = [1,\n'
              '     2]\n')
    lines = python_token_lines(source)
    assert [line.text for line in lines] == ['def area(r, pi=3.14):  # circle',
                                             'return pi * r ** 2 if r is not None else "none"', 'y = [1,']
    assert list(zip(lines[0].types(), lines[0].labels)) == [
        ("def", "KEYWORD"), ("area", "NAME"), ("(", "OP"), ("r", "NAME"), (",", "OP"), ("pi", "NAME"), ("=", "OP"),
        ("3.14", "NUMBER"), (")", "OP"), (":", "OP"), ("# circle", "COMMENT")]
    assert list(zip(lines[1].types(), lines[1].labels)) == [
        ("return", "KEYWORD"), ("pi", "NAME"), ("*", "OP"), ("r", "NAME"), ("**", "OP"), ("2", "NUMBER"),
        ("if", "KEYWORD"), ("r", "NAME"), ("is", "KEYWORD"), ("not", "KEYWORD"), ("None", "KEYWORD"),
        ("else", "KEYWORD"), ('"none"', "STRING")]
    assert python_token_lines("x = (1,\n") == []  # cut short: nothing is trusted


@pytest.fixture(scope="module")
def tiny_decoder_dir(tmp_path_factory):
    tokenizer = chat_tokenizer()
    return save_model_dir(tmp_path_factory.mktemp("decoder"), tiny_decoder("llama", tokenizer.vocab_size), tokenizer)


def _probe_json(capsys, *args) -> dict:
    assert lmlab("inspect", "probe", *args, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_cli_gives_one_row_per_layer_for_a_decoder_on_python_tokens(tiny_decoder_dir, tmp_path, capsys):
    png = tmp_path / "probe.png"
    result = _probe_json(capsys, "--model", tiny_decoder_dir, "--task", "python-tokens", "--examples", 30,
                         "--png", png)
    assert [row["layer"] for row in result["layers"]] == [0, 1, 2]
    assert result["level"] == "word" and result["train_units"] > result["test_units"] > 0
    assert set(result["label_counts"]) <= {"NAME", "KEYWORD", "OP", "NUMBER", "STRING", "COMMENT"}
    for row in result["layers"]:
        assert 0 <= row["majority"] <= 1 and 0 <= row["accuracy"] <= 1
        assert row["selectivity"] == pytest.approx(row["accuracy"] - row["control_accuracy"])
    assert png.read_bytes().startswith(b"\x89PNG")


def test_cli_probes_an_encoder_on_sentences_and_on_user_words(tmp_path, capsys):
    encoder = tiny_encoder_dir(tmp_path / "encoder", vocab_size=128)
    result = _probe_json(capsys, "--model", encoder, "--task", "sentiment", "--examples", 20)
    assert result["level"] == "sentence" and len(result["layers"]) == 3
    assert result["train_units"] + result["test_units"] == 20 and result["skipped"] == 0
    rows = [{"words": ["the", "cat", "sat"], "labels": ["DET", "NOUN", "VERB"]},
            {"words": ["a", "movie", "was", "good"], "labels": ["DET", "NOUN", "VERB", "ADJ"]},
            {"words": ["the", "food", "was", "bad"], "labels": ["DET", "NOUN", "VERB", "ADJ"]}]
    result = _probe_json(capsys, "--model", encoder, "--task", write_jsonl(tmp_path / "pos.jsonl", rows))
    assert result["task"] == "pos.jsonl" and result["label_counts"]["DET"] == 3
    assert result["train_units"] + result["test_units"] + result["skipped"] == 11


@pytest.mark.parametrize("rows, fragments", [
    (["not json"], ["bad.jsonl:1", "not valid JSON"]),
    ([{"word": ["a"]}], ["bad.jsonl:1", 'neither "words" nor "text"']),
    ([{"words": ["a", "b"], "labels": ["X"]}], ["bad.jsonl:1", "one label per word (2)"]),
    ([{"words": ["a", ""], "labels": ["X", "Y"]}], ["bad.jsonl:1", "non-blank strings"]),
    ([{"text": "a b", "label": "X"}, {"words": ["a"], "labels": ["X"]}], ["bad.jsonl:2", "one shape"]),
    ([{"text": "a b", "label": ["X"]}], ["bad.jsonl:1", "label ['X']"]),
    ([{"text": "a b"}], ["bad.jsonl:1", 'no "label"']),
    ([{"text": "a b", "label": "X"}, {"text": "c d", "label": "X"}], ["single label"]),
])
def test_bad_jsonl_is_one_line_naming_the_line(tiny_decoder_dir, tmp_path, capsys, rows, fragments):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    assert lmlab("inspect", "probe", "--model", tiny_decoder_dir, "--task", path) == 2
    one_line_error(capsys, *fragments)


def test_unknown_task_and_bad_examples_are_refused(tiny_decoder_dir, capsys):
    assert lmlab("inspect", "probe", "--model", tiny_decoder_dir, "--task", "pos-tags") == 2
    one_line_error(capsys, "--task pos-tags", "python-tokens, sentiment")
    assert lmlab("inspect", "probe", "--model", tiny_decoder_dir, "--task", "sentiment", "--examples", 0) == 2
    one_line_error(capsys, "--examples 0")


@pytest.mark.slow
def test_minilm_reads_python_token_categories_beyond_word_identity(capsys):
    result = _probe_json(capsys, "--model", real_model("all-minilm-l6-v2"), "--task", "python-tokens",
                         "--examples", 100)
    for row in result["layers"]:
        assert row["accuracy"] > 0.9 > row["majority"] and row["selectivity"] > 0.05
