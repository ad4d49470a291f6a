"""A GGUF file's content key (the name of its converted cache) follows its bytes, not its name, and a memo of
keys already computed is only trusted while the file's stat is unchanged."""

import json
import os

from lmlab.io import gguf_layout
from lmlab.io.gguf_layout import content_key, file_identity, remember_content_key


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def remembered(path, memo):
    """The key of `path`, noted in `memo` as a load that succeeded notes it."""
    identity, key = file_identity(path), content_key(path, memo)
    remember_content_key(path, identity, key, memo)
    return key


def test_the_key_follows_the_content_not_the_name(tmp_path):
    data = os.urandom(3 << 20)
    a, b = write(tmp_path / "a.gguf", data), write(tmp_path / "b.gguf", data)
    assert content_key(a) == content_key(b)
    assert content_key(write(tmp_path / "c.gguf", data[:-1] + bytes([data[-1] ^ 1]))) != content_key(a)


def test_a_memo_skips_reading_an_unchanged_file_and_not_a_changed_one(tmp_path, monkeypatch):
    path, memo = write(tmp_path / "m.gguf", os.urandom(1 << 20)), tmp_path / "cache" / "keys.json"
    key = remembered(path, memo)
    hashed = []
    real = gguf_layout._hash_content
    monkeypatch.setattr(gguf_layout, "_hash_content", lambda *args: hashed.append(args) or real(*args))
    assert content_key(path, memo) == key and hashed == []  # remembered
    path.write_bytes(os.urandom(1 << 20))  # rewritten in place: same name and size, new ctime
    assert content_key(path, memo) != key and len(hashed) == 1


def test_reading_a_key_writes_nothing_and_a_changed_file_is_not_noted(tmp_path):
    path, memo = write(tmp_path / "m.gguf", os.urandom(1 << 16)), tmp_path / "keys.json"
    identity, key = file_identity(path), content_key(path, memo)
    assert not memo.exists()  # only a load that succeeded notes a key
    path.write_bytes(os.urandom(1 << 16))  # changed between hashing and noting
    remember_content_key(path, identity, key, memo)
    assert not memo.exists()


def test_a_damaged_or_unwritable_memo_is_ignored(tmp_path):
    path = write(tmp_path / "m.gguf", os.urandom(1 << 16))
    key = content_key(path)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert remembered(path, broken) == key
    assert json.loads(broken.read_text())[str(path.resolve())]["key"] == key  # replaced by a good one
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({str(path.resolve()): {"stat": "whatever", "key": "0" * 16}}))
    assert content_key(path, wrong) == key  # a stat that does not match is not trusted
    in_the_way = tmp_path / "dir.json"
    in_the_way.mkdir()
    (in_the_way / "x").write_text("not lmlab's")
    assert remembered(path, in_the_way) == key and (in_the_way / "x").exists()


def test_the_memo_keeps_a_bounded_number_of_files(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_layout, "MEMO_ENTRIES", 3)
    memo = tmp_path / "keys.json"
    for i in range(5):
        remembered(write(tmp_path / f"{i}.gguf", bytes([i]) * 100), memo)
    assert [os.path.basename(p) for p in json.loads(memo.read_text())] == ["2.gguf", "3.gguf", "4.gguf"]
