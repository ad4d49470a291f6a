"""Every reader of data files streams its lines with a bound on each: a line too long to be text is
refused in seconds with one line naming file:line, the limit and how to raise it; bytes that are
not UTF-8 name the file and the line; data larger than memory is refused before it is read; a long
run without spaces no longer stalls tokenizer training."""

import json
import random
import re
import time

import pytest

from conftest import lmlab, one_line_error
from lmlab.data.chat_jsonl import read_chat_jsonl, read_preference_jsonl
from lmlab.data.pair_files import read_pairs
from lmlab.data.sources import read_texts
from lmlab.data.table_files import read_rows
from lmlab.errors import LmlabError
from lmlab.io import lines
from lmlab.models.ngram.arpa import read_arpa
from lmlab.tokenizers.bpe import LONGEST_WORD, train_bpe, training_words
from lmlab.tokenizers.wordpiece import train_wordpiece

CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
PREFERENCE = json.dumps({"prompt": "2 + 2?", "chosen": "4", "rejected": "5"})
# (reader, file name, a good first line, line 2 with `{}` where the long or bad text goes)
READERS = {
    "text": (read_texts, "corpus.txt", "hello world", "{}"),
    "jsonl text": (read_texts, "corpus.jsonl", json.dumps({"text": "hello"}), '{{"text": "{}"}}'),
    "chat": (read_chat_jsonl, "chats.jsonl", CHAT, '{{"messages": [{{"role": "user", "content": "{}"}}]}}'),
    "preference": (read_preference_jsonl, "prefs.jsonl", PREFERENCE,
                   '{{"prompt": "{}", "chosen": "a", "rejected": "b"}}'),
    "csv": (read_rows, "rows.csv", "text,label", "{},pos"),
    "table jsonl": (read_rows, "rows.jsonl", json.dumps({"text": "a", "label": "pos"}), '{{"text": "{}"}}'),
    "pairs": (read_pairs, "pairs.csv", "source,target", "{},x"),
    "arpa": (read_arpa, "lm.arpa", "\\data\\", "ngram 1={}"),
}


def write(path, first: str, second: str) -> None:
    path.write_bytes(first.encode() + b"\n" + second.encode("utf-8", "surrogateescape") + b"\nmore\n")


@pytest.mark.parametrize("kind", READERS)
def test_a_line_over_the_limit_is_one_line_naming_file_line_and_the_setting(tmp_path, monkeypatch, kind):
    read, name, first, second = READERS[kind]
    monkeypatch.setenv("LMLAB_MAX_LINE_MB", "1")
    write(tmp_path / name, first, second.format("word " * 2**18))  # 1.25 MB
    with pytest.raises(LmlabError, match=rf"{name}:2 is longer than 1 MB.*LMLAB_MAX_LINE_MB") as error:
        read(tmp_path / name)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", READERS)
def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path, kind):
    read, name, first, second = READERS[kind]
    write(tmp_path / name, first, second.format("caf\udce9"))  # a latin-1 é
    with pytest.raises(LmlabError, match=rf"{name}:2 is not UTF-8 text \(byte 0xe9 at column \d+\)"):
        read(tmp_path / name)


def test_raising_the_limit_reads_the_long_line(tmp_path, monkeypatch):
    write(tmp_path / "corpus.txt", "hello", "word " * 2**18)
    monkeypatch.setenv("LMLAB_MAX_LINE_MB", "2")
    assert read_texts(tmp_path / "corpus.txt") == [(tmp_path / "corpus.txt").read_text()]


@pytest.mark.parametrize("value", ["0", "-3", "lots", "nan"])
def test_a_bad_limit_setting_is_one_line(tmp_path, monkeypatch, value):
    (tmp_path / "corpus.txt").write_text("hello")
    monkeypatch.setenv("LMLAB_MAX_LINE_MB", value)
    with pytest.raises(LmlabError, match=f"LMLAB_MAX_LINE_MB='{value}' is not a number of megabytes"):
        read_texts(tmp_path / "corpus.txt")


def test_text_reads_as_before_with_universal_newlines(tmp_path):
    (tmp_path / "a.txt").write_bytes("one\r\ntwo\rthree\n\u2028four é".encode())
    assert read_texts(tmp_path / "a.txt") == ["one\ntwo\nthree\n\u2028four é"]


def test_a_directory_still_skips_files_that_are_not_utf8(tmp_path):
    (tmp_path / "good.txt").write_text("hello")
    (tmp_path / "blob").write_bytes(b"\xff\xfe\x00binary")
    assert read_texts(tmp_path) == ["hello"]


def test_data_larger_than_memory_is_refused_before_reading(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text("x" * 600)
    monkeypatch.setattr(lines, "physical_memory", lambda: 1000)
    monkeypatch.setattr(lines, "read_lines", None)  # reading it at all would fail differently
    for read, name in [(read_texts, "corpus.txt"), (read_chat_jsonl, "corpus.txt"), (read_rows, "corpus.csv")]:
        (tmp_path / name).write_text("x" * 600)
        with pytest.raises(LmlabError, match=f"'{tmp_path / name}' holds 0.0 GB, more than half of this machine's"):
            read(tmp_path / name)


def test_a_csv_field_longer_than_the_csv_module_default_reads(tmp_path):
    (tmp_path / "rows.csv").write_text("text,label\n" + "long " * 40_000 + ",pos\n")  # 200 kB, csv's default is 128 KiB
    assert read_rows(tmp_path / "rows.csv")[0][1]["text"] == "long " * 40_000


def test_a_line_separator_inside_a_json_string_is_not_a_line_break(tmp_path):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "a\u2028b", "label": "x"}, ensure_ascii=False) + "\n"
                                         + json.dumps({"text": "c", "label": "y"}) + "\n", encoding="utf-8")
    assert [(n, row["text"]) for n, row in read_rows(tmp_path / "rows.jsonl")] == [(1, "a\u2028b"), (2, "c")]


@pytest.mark.parametrize("line, reason", [("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                          ('{"n": ' + "9" * 5000 + "}", "Exceeds the limit (4300 digits)")])
def test_json_too_deep_or_long_for_python_is_one_line(tmp_path, line, reason):
    (tmp_path / "chats.jsonl").write_text(line + "\n")
    with pytest.raises(LmlabError, match=rf"chats.jsonl:1 is not valid JSON \({re.escape(reason)}"):
        read_chat_jsonl(tmp_path / "chats.jsonl")


@pytest.mark.parametrize("command", [["train", "--model", "gpt2-tiny", "--max-steps", "1"],
                                     ["sft", "--model", "gpt2-tiny", "--max-steps", "1"]])
def test_a_50_mb_line_is_refused_by_the_cli_in_seconds_and_writes_nothing(tmp_path, capsys, command):
    record = {"text": "word " * 10_000_000} if command[0] == "train" else {
        "messages": [{"role": "user", "content": "word " * 10_000_000}, {"role": "assistant", "content": "ok"}]}
    first = json.dumps({"text": "short"}) if command[0] == "train" else CHAT
    (tmp_path / "data.jsonl").write_text(first + "\n" + json.dumps(record) + "\n")
    start = time.perf_counter()
    assert lmlab(*command, "--data", tmp_path / "data.jsonl", "--out", tmp_path / "run", "--device", "cpu") == 2
    assert time.perf_counter() - start < 10
    one_line_error(capsys, "data.jsonl:2 is longer than 8 MB", "LMLAB_MAX_LINE_MB")
    assert not (tmp_path / "run").exists()


def test_training_words_cuts_only_runs_longer_than_a_word():
    text = "short words " + "x" * (2 * LONGEST_WORD + 5) + " end"
    [cut] = training_words([text])
    assert [len(w) for w in cut.split()] == [5, 5, LONGEST_WORD, LONGEST_WORD, 5, 3]
    assert next(training_words(["no long runs here " * 20])) == "no long runs here " * 20


@pytest.mark.parametrize("train", [train_bpe, train_wordpiece])
def test_a_long_run_without_spaces_trains_a_tokenizer_in_seconds(train):
    rng = random.Random(0)
    blob = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(400_000))  # took 37 s before, 2 MB hours
    start = time.perf_counter()
    train(["some ordinary text"] * 10 + [blob], 2000)
    assert time.perf_counter() - start < 15


JSON_READERS = [kind for kind in READERS if READERS[kind][1].endswith(".jsonl")] + ["pairs jsonl"]
READERS_AND_JSONL_PAIRS = READERS | {"pairs jsonl": (read_pairs, "pairs.jsonl", json.dumps({"source": "a",
                                                                                           "target": "b"}),
                                                     '{{"source": "{}", "target": "x"}}')}


@pytest.mark.parametrize("kind", JSON_READERS)
@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ude00\\ud83d"])
def test_a_lone_surrogate_escape_in_json_lines_names_file_and_line(tmp_path, kind, escape):
    read, name, first, second = READERS_AND_JSONL_PAIRS[kind]
    write(tmp_path / name, first, second.format(f"ba{escape}"))
    with pytest.raises(LmlabError, match=rf"{name}:2 holds a lone surrogate \(\\ud[8-f][0-9a-f]{{2}}\)") as error:
        read(tmp_path / name)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", JSON_READERS)
def test_a_surrogate_pair_escape_is_text(tmp_path, kind):
    read, name, first, second = READERS_AND_JSONL_PAIRS[kind]
    (tmp_path / name).write_text(first + "\n" + second.format("smile \\ud83d\\ude00") + "\n")
    assert "\U0001f600" in str(read(tmp_path / name))
