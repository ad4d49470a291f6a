"""The n-gram CLI end to end (train, eval perplexity, generate, ARPA export/import) and its bad inputs:
one line, exit code 2, nothing written."""

import json
import math

import numpy as np
import pytest

from conftest import lmlab, one_line_error
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.load import load
from lmlab.tokenizers.bpe import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, corpus_file):
    out = tmp_path_factory.mktemp("tok")
    assert lmlab("tokenizer", "train", "--data", corpus_file, "--vocab-size", "300", "--out", out) == 0
    return out / "tokenizer.json"


@pytest.fixture(scope="module")
def kn_run(tmp_path_factory, corpus_file, tokenizer):
    out = tmp_path_factory.mktemp("runs") / "kn"
    assert lmlab("train", "--arch", "ngram", "--order", "4", "--smoothing", "kn", "--data", corpus_file,
                 "--tokenizer", tokenizer, "--block-size", "64", "--out", out) == 0
    return out


def test_train_prints_validation_perplexity_and_saves_a_loadable_model(kn_run, corpus_file, tokenizer, capsys):
    assert sorted(p.name for p in (kn_run / "model").iterdir()) == [".lmlab", "config.json", "ngram.npz", "tokenizer.json"]
    config = json.loads((kn_run / "model" / "config.json").read_text())
    assert (config["model_type"], config["order"], config["smoothing"]) == ("ngram", 4, "kn")
    model, _ = load(kn_run)
    assert model.config.context_length == 64


def test_eval_perplexity_equals_scoring_the_text_with_full_history(kn_run, corpus_file, capsys):
    capsys.readouterr()
    assert lmlab("eval", "perplexity", "--model", kn_run, "--data", corpus_file, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    model, tok = load(kn_run)
    ids = np.array([tok.encode(corpus_file.read_text())])
    nll = -model.token_log_probs(ids)[0, 1:].sum()
    assert result["tokens"] == ids.shape[1]
    assert result["nll_sum"] == pytest.approx(nll, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(nll / (ids.shape[1] - 1)), rel=1e-5)


def test_generate_continues_the_prompt_reproducibly_also_with_beams(kn_run, capsys):
    capsys.readouterr()
    args = ["generate", "--model", kn_run, "--prompt", "Zini", "--max-new-tokens", "12", "--seed", "3"]
    assert lmlab(*args) == 0
    first = capsys.readouterr().out
    assert first.startswith("Zini") and len(first) > len("Zini\n")
    assert lmlab(*args) == 0
    assert capsys.readouterr().out == first
    assert lmlab("generate", "--model", kn_run, "--prompt", "Zini", "--beams", "2", "--max-new-tokens", "12") == 0
    assert capsys.readouterr().out.startswith("Zini")


@pytest.mark.parametrize("smoothing", ["mkn", "addk", "mle"])
def test_every_normalized_smoothing_trains_and_evaluates(tmp_path, corpus_file, tokenizer, smoothing, capsys):
    assert lmlab("train", "--arch", "ngram", "--order", "2", "--smoothing", smoothing, "--data", corpus_file,
                 "--tokenizer", tokenizer, "--block-size", "64", "--out", tmp_path / "run") == 0
    assert "validation perplexity" in capsys.readouterr().out
    assert lmlab("eval", "perplexity", "--model", tmp_path / "run", "--data", corpus_file, "--json") == 0
    perplexity = json.loads(capsys.readouterr().out)["perplexity"]
    assert perplexity > 1 and not math.isnan(perplexity)  # mle: inf when the file holds an unseen bigram


def test_stupid_backoff_trains_generates_and_refuses_perplexity(tmp_path, corpus_file, tokenizer, capsys):
    assert lmlab("train", "--arch", "ngram", "--order", "3", "--smoothing", "stupid", "--data", corpus_file,
                 "--tokenizer", tokenizer, "--out", tmp_path / "run") == 0
    assert "none (stupid backoff scores are not probabilities)" in capsys.readouterr().out
    assert lmlab("generate", "--model", tmp_path / "run", "--prompt", "Zini", "--max-new-tokens", "5") == 0
    capsys.readouterr()
    assert lmlab("eval", "perplexity", "--model", tmp_path / "run", "--data", corpus_file) == 2
    one_line_error(capsys, "stupid backoff gives scores, not probabilities")


def test_arpa_export_then_import_scores_the_same(kn_run, tmp_path, corpus_file, capsys):
    assert lmlab("ngram", "export", "--model", kn_run, "--arpa", tmp_path / "kn.arpa") == 0
    assert lmlab("ngram", "import", "--arpa", tmp_path / "kn.arpa", "--tokenizer", kn_run / "model",
                 "--out", tmp_path / "back") == 0
    capsys.readouterr()
    results = []
    for model in (kn_run, tmp_path / "back"):
        assert lmlab("eval", "perplexity", "--model", model, "--data", corpus_file, "--json") == 0
        results.append(json.loads(capsys.readouterr().out)["nll_sum"])
    assert results[1] == pytest.approx(results[0], rel=1e-5)


def test_export_and_import_report_the_counts_the_header_states_and_round_trip(kn_run, tmp_path, capsys):
    capsys.readouterr()
    assert lmlab("ngram", "export", "--model", kn_run, "--arpa", tmp_path / "kn.arpa") == 0
    header = [line.split("=")[1] for line in (tmp_path / "kn.arpa").read_text().splitlines() if line.startswith("ngram ")]
    stated = ", ".join(f"{n} {k}-grams" for k, n in enumerate(header, 1))
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'kn.arpa'}: {stated}"  # BPE: + <unk> <s> </s>
    assert lmlab("ngram", "import", "--arpa", tmp_path / "kn.arpa", "--tokenizer", kn_run / "model",
                 "--out", tmp_path / "back") == 0
    assert f"({stated})" in capsys.readouterr().out
    assert lmlab("ngram", "export", "--model", tmp_path / "back", "--arpa", tmp_path / "again.arpa") == 0
    assert (tmp_path / "again.arpa").read_bytes() == (tmp_path / "kn.arpa").read_bytes()


def test_a_word_level_arpa_imports_without_a_tokenizer_and_generates(tmp_path, capsys):
    (tmp_path / "w.arpa").write_text("\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-1\t<unk>\n-99\t<s>\t-0.3\n"
                                     "-0.6\t</s>\n-0.5\tcat\t-0.2\n-0.5\tdog\t-0.2\n\n\\2-grams:\n-0.1\t<s> cat\n"
                                     "-0.1\tcat dog\n-0.1\tdog </s>\n\n\\end\\\n")
    assert lmlab("ngram", "import", "--arpa", tmp_path / "w.arpa", "--out", tmp_path / "words") == 0
    capsys.readouterr()
    assert lmlab("generate", "--model", tmp_path / "words", "--prompt", "cat", "--greedy", "--json") == 0
    assert json.loads(capsys.readouterr().out)["text"].split() == ["dog"]  # then </s> stops it


def test_corrupt_arpa_import_names_the_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "bad.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<unk>\nnot-a-number\tcat\n\\end\\\n")
    assert lmlab("ngram", "import", "--arpa", tmp_path / "bad.arpa", "--out", tmp_path / "out") == 2
    one_line_error(capsys, "bad.arpa:6:", "'not-a-number' is not a log10 probability")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, fragments", [
    (["--order", "0"], ["--order 0 must be at least 1"]),
    (["--n-heads", "2", "--lr", "0.1"], ["--n-heads, --lr do not apply to --arch ngram"]),
    (["--model", "gpt2-tiny"], ["--model does not apply to --arch ngram"]),
    (["--smoothing", "kn", "--add-k", "0.5"], ["--add-k is for --smoothing addk"]),
    (["--smoothing", "mkn", "--discount", "0.5"], ["a fixed discount is for --smoothing kn"]),
    (["--smoothing", "kn", "--discount", "2"], ["discount 2.0 must lie in (0, 1]"]),
    (["--order", "5", "--block-size", "6"], ["--block-size 6 is too short for order 5"]),
    (["--order", "1", "--block-size", "1"], ["--block-size 1 is too short for order 1", "at least 2 tokens"]),
])
def test_bad_ngram_train_flags_are_one_line_and_write_nothing(tmp_path, corpus_file, tokenizer, flags, fragments,
                                                              capsys):
    assert lmlab("train", "--arch", "ngram", "--data", corpus_file, "--tokenizer", tokenizer,
                 "--out", tmp_path / "run", *flags) == 2
    one_line_error(capsys, *fragments)
    assert not (tmp_path / "run").exists()


def test_vocab_size_zero_is_refused_not_read_as_the_default(tmp_path, corpus_file, capsys):
    assert lmlab("train", "--arch", "ngram", "--data", corpus_file, "--vocab-size", "0", "--out", tmp_path / "run") == 2
    one_line_error(capsys, "--vocab-size 0 must be at least 1")
    assert not (tmp_path / "run").exists()


def test_empty_data_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text(" \n")
    assert lmlab("train", "--arch", "ngram", "--data", tmp_path / "empty.txt", "--out", tmp_path / "run") == 2
    one_line_error(capsys, "empty.txt")
    assert not (tmp_path / "run").exists()


def test_export_refuses_a_transformer(tiny_gpt2, tokenizer, tmp_path, capsys):
    save_hf_dir(build_decoder(tiny_gpt2), tmp_path / "gpt2", load_tokenizer(tokenizer))
    assert lmlab("ngram", "export", "--model", tmp_path / "gpt2", "--arpa", tmp_path / "x.arpa") == 2
    one_line_error(capsys, "only n-gram models export to ARPA")
    assert not (tmp_path / "x.arpa").exists()
