"""`lmlab embed` and `lmlab similarity`: unit-length mean-pooled embeddings, the same in any batch,
and cosine ranking."""

import json

import pytest
import torch

from conftest import lmlab, one_line_error
from encoder_data import tiny_encoder_dir
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.models.load import load_encoder
from lmlab.modules.pooling import mean_pooled_embedding
from lmlab.tokenizers.wordpiece import encode_batch

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["the cat sat on a mat .", "paris", "anna lives in oslo with bob and the cat", "rome is in italy"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return tiny_encoder_dir(tmp_path_factory.mktemp("enc") / "tiny")


def test_embeddings_in_length_sorted_batches_equal_one_sentence_at_a_time(encoder_dir):
    encoder, tokenizer = load_encoder(encoder_dir)
    batched = sentence_embeddings(encoder, tokenizer, SENTENCES, batch_size=3)
    with torch.no_grad():
        alone = torch.cat([mean_pooled_embedding(encoder(*encode_batch(tokenizer, [s])[:2]))
                           for s in SENTENCES])
    assert (batched - alone).abs().max().item() <= 1e-5
    assert torch.allclose(batched.norm(dim=-1), torch.ones(len(SENTENCES)))


def test_embed_prints_one_unit_vector_per_sentence(encoder_dir, capsys):
    assert lmlab("embed", "--model", encoder_dir, "--text", *SENTENCES[:2]) == 0
    lines = capsys.readouterr().out.splitlines()
    vectors = torch.tensor([[float(x) for x in line.split()] for line in lines])
    assert vectors.shape == (2, 32)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(2), atol=1e-5)


def test_embed_json_carries_the_text(encoder_dir, tmp_path, capsys):
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES) + "\n\n")
    assert lmlab("embed", "--model", encoder_dir, "--data", tmp_path / "s.txt", "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == SENTENCES and len(rows[0]["embedding"]) == 32


def test_similarity_ranks_an_identical_sentence_first_and_keeps_the_top_k(encoder_dir, capsys):
    assert lmlab("similarity", "--model", encoder_dir, "--query", SENTENCES[2], "--text", *SENTENCES,
                 "--top", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    rank, cosine, text = lines[0].split(maxsplit=2)
    assert rank == "1" and float(cosine) == pytest.approx(1.0, abs=1e-4) and text == SENTENCES[2]
    assert float(lines[1].split()[1]) < float(cosine)


def test_a_missing_sentence_file_is_one_line(encoder_dir, tmp_path, capsys):
    assert lmlab("embed", "--model", encoder_dir, "--data", tmp_path / "none.txt") == 2
    one_line_error(capsys, "none.txt", "one sentence per line")


def test_an_empty_sentence_file_is_refused(encoder_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n\n")
    assert lmlab("similarity", "--model", encoder_dir, "--query", "x", "--data", tmp_path / "empty.txt") == 2
    one_line_error(capsys, "holds no sentences")


def test_an_unknown_model_is_one_line(tmp_path, capsys):
    assert lmlab("embed", "--model", tmp_path / "nothing", "--text", "hi") == 2
    one_line_error(capsys, "not found")
