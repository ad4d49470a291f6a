"""A SentencePiece model file gives the ids `sentencepiece` itself gives, for unigram and BPE models with byte
fallback on and off, over held-out text; a damaged or foreign file is one line."""

import random

import pytest
from sentencepiece import sentencepiece_model_pb2  # noqa: E402 (sentencepiece_models skips without it)

from lmlab.errors import LmlabError
from lmlab.tokenizers import sentencepiece_file, sentencepiece_pipeline
from lmlab.tokenizers.sentencepiece_file import read_model_file
from lmlab.tokenizers.sentencepiece_pipeline import sentencepiece_tokenizer
from sentencepiece_models import COMPATIBILITY, HELD_OUT, SETTINGS, spm, trained


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("spm")
    return {name: trained(directory, name) for name in SETTINGS}


@pytest.mark.parity
@pytest.mark.parametrize("name", list(SETTINGS))
def test_ids_and_text_are_sentencepieces(models, name):
    reference = spm.SentencePieceProcessor(model_file=str(models[name]))
    ours = sentencepiece_tokenizer(read_model_file(models[name]).model, name)
    assert ours.get_vocab_size() == reference.get_piece_size()
    for text in HELD_OUT + COMPATIBILITY:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == reference.encode(text), (name, text)
        if reference.unk_id() not in ids:  # sentencepiece spells an unknown piece " ⁇ ", transformers drops it
            assert ours.decode(ids) == reference.decode(ids), (name, text)


def test_the_trainers_special_ids_are_read(models):
    assert read_model_file(models["t5"]).special_ids == {"unk": 2, "bos": None, "eos": 1, "pad": 0}
    assert read_model_file(models["llama"]).special_ids == {"unk": 0, "bos": 1, "eos": 2, "pad": None}


def test_a_file_that_is_not_a_model_is_one_line(tmp_path, models):
    damaged = tmp_path / "tokenizer.model"
    damaged.write_bytes(models["t5"].read_bytes()[:1000])
    with pytest.raises(LmlabError, match="is not a SentencePiece model"):
        read_model_file(damaged)
    damaged.write_bytes(b"\xff" * 100)
    with pytest.raises(LmlabError, match="is not a SentencePiece model"):
        read_model_file(damaged)


def test_a_file_too_large_is_refused_before_it_is_read(models, monkeypatch):
    monkeypatch.setattr(sentencepiece_file, "MAX_MODEL_BYTES", 1000)
    with pytest.raises(LmlabError, match="more than the 1,000 lmlab reads"):
        read_model_file(models["t5"])


@pytest.mark.parametrize("kind", ["word", "char"])
def test_word_and_character_models_are_refused(tmp_path, kind):
    with pytest.raises(LmlabError, match=f"of type {3 if kind == 'word' else 4} .* reads unigram and BPE"):
        read_model_file(trained(tmp_path, "t5", model_type=kind, vocab_size=200))


@pytest.mark.parametrize("spec, field", [("trainer_spec", "treat_whitespace_as_suffix"),
                                         ("normalizer_spec", "escape_whitespaces")])
def test_spaces_kept_or_put_after_words_are_refused(models, tmp_path, spec, field):
    def flip(proto):
        setattr(getattr(proto, spec), field, not getattr(getattr(proto, spec), field))
    with pytest.raises(LmlabError, match="puts the space after each word or keeps it a space"):
        read_model_file(edited(models, tmp_path, flip))

def edited(models, tmp_path, edit):
    """The T5-style model with `edit` applied to its message, written as tmp_path/spiece.model."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(models["t5"].read_bytes())
    edit(proto)
    (tmp_path / "spiece.model").write_bytes(proto.SerializeToString())
    return tmp_path / "spiece.model"


@pytest.mark.parametrize("edit, message", [
    (lambda p: setattr(p.pieces[10], "piece", p.pieces[11].piece), "holds a piece twice"),
    (lambda p: setattr(p.pieces[10], "piece", ""), r"a piece \(id 10\) is empty"),
    (lambda p: setattr(p.pieces[10], "piece", "x" * 1025), r"a piece \(id 10\) .* longer than 1024"),
    (lambda p: setattr(p.pieces[10], "score", float("nan")), r"a piece \(id 10\) .* no known type or score"),
    (lambda p: setattr(p.pieces[10], "type", 2), "exactly one unknown piece, this one has 2"),
])
def test_a_model_with_bad_pieces_is_one_line(models, tmp_path, edit, message):
    with pytest.raises(LmlabError, match=message):
        path = edited(models, tmp_path, edit)
        sentencepiece_tokenizer(read_model_file(path).model, str(path))


def test_a_bpe_model_whose_merges_would_take_too_long_is_refused(models, monkeypatch):
    model = read_model_file(models["llama"]).model
    monkeypatch.setattr(sentencepiece_pipeline, "MAX_MERGE_WORK", 1000)
    with pytest.raises(LmlabError, match="too long in all to find its merges in bounded time"):
        sentencepiece_tokenizer(model, "llama")


@pytest.mark.parametrize("name", ["t5", "llama"])
def test_damaged_model_files_load_or_are_one_line(models, tmp_path, name):
    """Bytes changed at random places (seeded): each file is read and encodes, or is one LmlabError line."""
    data, rng = models[name].read_bytes(), random.Random(0)
    for trial in range(40):
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 4, 32])):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        path = tmp_path / f"{trial}.model"
        path.write_bytes(bytes(damaged[:rng.choice([len(damaged), rng.randrange(len(damaged))])]))
        try:
            sentencepiece_tokenizer(read_model_file(path).model, str(path)).encode(HELD_OUT[2] + HELD_OUT[3])
        except LmlabError as error:
            assert "\n" not in str(error)
