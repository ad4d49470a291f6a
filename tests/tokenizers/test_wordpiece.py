"""WordPiece trained on our text: BERT's special tokens first, pairs with token types, the casing
and accent options, and a saved tokenizer.json that the encoder loader reads back."""

import pytest

from conftest import lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.tokenizers.wordpiece import SPECIAL_TOKENS, encode_batch, load_wordpiece, train_wordpiece

TEXTS = ["The café serves coffee and tea.", "Tea is served after the coffee.", "Résumés arrive daily."] * 20


def test_special_tokens_come_first_and_pairs_get_token_types():
    tokenizer = train_wordpiece(TEXTS, 120)
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    pair = tokenizer.encode("the coffee", "tea is served")
    assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2 and pair.tokens[-1] == "[SEP]"
    first_sep = pair.tokens.index("[SEP]")
    assert pair.type_ids == [0] * (first_sep + 1) + [1] * (len(pair.tokens) - first_sep - 1)
    assert tokenizer.encode("[MASK] coffee").tokens[1] == "[MASK]"  # one token, never split
    assert any(t.startswith("##") for t in tokenizer.encode("coffeeserves").tokens)  # continuation pieces


@pytest.mark.parametrize("cased, strip_accents, expected", [
    (False, None, "the cafe serves coffee"),  # uncased BERT: lower case, accents stripped
    (True, None, "The café serves coffee"),
    (False, False, "the café serves coffee"),
])
def test_casing_and_accent_options(cased, strip_accents, expected):
    tokenizer = train_wordpiece(TEXTS, 200, lowercase=not cased, strip_accents=strip_accents)
    assert tokenizer.normalizer.normalize_str("The café serves coffee") == expected


def test_cli_trains_a_wordpiece_that_the_encoder_loader_reads(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("\n".join(TEXTS))
    assert lmlab("tokenizer", "train", "--kind", "wordpiece", "--data", tmp_path / "corpus.txt", "--vocab-size", "100",
                 "--out", tmp_path / "tok") == 0
    assert "WordPiece" in capsys.readouterr().out
    tokenizer = load_wordpiece(tmp_path / "tok", max_length=16)
    ids, mask, types = encode_batch(tokenizer, ["the coffee", "tea is served after the coffee"])
    assert ids.shape == mask.shape == types.shape and ids[0, 0] == 2 and mask[0].sum() < mask[1].sum()


def test_too_small_a_vocabulary_is_refused():
    with pytest.raises(LmlabError, match="too small"):
        train_wordpiece(TEXTS, 5)


def test_cli_refuses_a_too_small_vocabulary_in_one_line(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("\n".join(TEXTS))
    assert lmlab("tokenizer", "train", "--kind", "wordpiece", "--data", tmp_path / "corpus.txt", "--vocab-size", "5",
                 "--out", tmp_path / "tok") == 2
    one_line_error(capsys, "too small for WordPiece")
    assert not (tmp_path / "tok").exists()
