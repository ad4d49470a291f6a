"""The BPE of encoder-decoders trained here: the family's special tokens first, then the objective's;
digits one token each."""

from lmlab.tokenizers.encoder_decoder_bpe import train_encoder_decoder_bpe

TEXTS = ["There were 3456 apples and 78 pears.", "Three thousand four hundred and fifty-six apples."] * 20


def test_family_special_tokens_take_the_first_ids_and_extra_ones_follow():
    t5 = train_encoder_decoder_bpe(TEXTS, 400, "t5", ("<extra_id_0>", "<extra_id_1>"))
    assert [t5.token_to_id(t) for t in ("<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>")] == [0, 1, 2, 3, 4]
    bart = train_encoder_decoder_bpe(TEXTS, 400, "bart", ("<mask>",))
    assert [bart.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert bart.encode("a <mask> b").tokens.count("<mask>") == 1


def test_every_digit_is_a_token_of_its_own_and_text_decodes_back():
    tok = train_encoder_decoder_bpe(TEXTS, 400, "transformer")
    encoded = tok.encode("There were 3456 apples")
    assert [t for t in encoded.tokens if any(c.isdigit() for c in t)] == ["3", "4", "5", "6"]
    assert tok.decode(encoded.ids) == "There were 3456 apples"
