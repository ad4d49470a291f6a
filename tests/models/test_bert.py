"""The BERT encoder: same weights in lmlab and HF `BertModel` give the same hidden states and pooled
output, both directions; a saved HF BERT directory loads with its tokenizer; pooling and masks."""

import pytest
import torch

from encoder_parity import real_diff
from lmlab.errors import LmlabError
from lmlab.models.bert import convert
from lmlab.models.bert.build import build_encoder
from lmlab.models.load import load, load_encoder
from lmlab.models.presets import preset
from lmlab.modules.pooling import mean_pooled_embedding
from lmlab.tokenizers.wordpiece import encode_batch, wordpiece_from_vocab

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=100, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "##s",
         "ran", ",", ".", "!", "un", "##believ", "##able", "cafe"]


def hf_bert(cfg):
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**convert.config_to_hf(cfg))).eval()
    with torch.no_grad():  # HF zero-initialises biases and sets norms to one; make every weight count
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def hf_bert_and_ours(cfg):
    """A random HF BertModel and an lmlab encoder holding its weights."""
    reference = hf_bert(cfg)
    ours = build_encoder(cfg).eval()
    ours.load_state_dict(convert.from_hf(reference.state_dict(), cfg))
    return reference, ours


def padded_batch(vocab_size: int):
    """Three sequences, the last two right-padded, the second a sentence pair (token types 0 then 1)."""
    ids = torch.randint(1, vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[1, 5:9] = 1
    return ids, mask, types


@pytest.mark.parity
def test_hf_weights_in_lmlab_give_same_hidden_states_and_pooled_output():
    cfg = preset("bert-tiny", **TINY)
    reference, ours = hf_bert_and_ours(cfg)
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        hidden = ours(ids, mask, types)
        pooled = ours.pooled(ids, mask, types)
    assert real_diff(hidden, expected.last_hidden_state, mask) <= 1e-5
    assert (pooled - expected.pooler_output).abs().max().item() <= 1e-5
    assert not hidden[mask == 0].any()  # the padding is skipped, not computed


@pytest.mark.parity
def test_without_a_mask_every_token_sees_both_sides_as_in_hf():
    cfg = preset("bert-tiny", **TINY)
    reference, ours = hf_bert_and_ours(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ours(ids) - reference(ids).last_hidden_state).abs().max().item() <= 1e-5


@pytest.mark.parity
def test_lmlab_weights_load_strictly_in_hf_and_give_same_outputs():
    cfg = preset("bert-tiny", **TINY)
    torch.manual_seed(3)
    ours = build_encoder(cfg).eval()
    reference = transformers.BertModel(transformers.BertConfig(**convert.config_to_hf(cfg))).eval()
    reference.load_state_dict(convert.to_hf(ours.state_dict(), cfg), strict=True)
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        assert real_diff(ours(ids, mask, types), expected.last_hidden_state, mask) <= 1e-5
        assert (ours.pooled(ids, mask, types) - expected.pooler_output).abs().max().item() <= 1e-5


def test_names_round_trip_through_hf():
    cfg = preset("bert-tiny", **TINY)
    state = build_encoder(cfg).state_dict()
    back = convert.from_hf(convert.to_hf(state, cfg), cfg)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


def test_padding_does_not_change_the_real_tokens():
    cfg = preset("bert-tiny", **TINY)
    model = build_encoder(cfg).eval()
    ids = torch.randint(1, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(4))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 3])
    with torch.no_grad():
        alone, batched = model(ids), model(padded, mask)
    assert (alone - batched[:, :6]).abs().max().item() <= 1e-5
    assert torch.allclose(mean_pooled_embedding(alone), mean_pooled_embedding(batched, mask), atol=1e-6)


def test_a_padded_batch_gives_each_row_the_outputs_and_gradients_it_gets_alone():
    """The batch runs unpadded (real tokens packed); each row alone has no padding (the cheap path)."""
    cfg = preset("bert-tiny", **TINY)
    model = build_encoder(cfg).eval()
    ids, mask, types = padded_batch(cfg.vocab_size)
    target = torch.randn(*ids.shape, cfg.d_model, generator=torch.Generator().manual_seed(5))
    hidden = model(ids, mask, types)
    (hidden * target)[mask.bool()].sum().backward()
    batched = {name: p.grad for name, p in model.named_parameters() if name.startswith(("embeddings", "blocks"))}
    model.zero_grad()
    for row in range(ids.size(0)):
        n = int(mask[row].sum())
        alone = model(ids[row:row + 1, :n], None, types[row:row + 1, :n])  # (1, n, C)
        torch.testing.assert_close(alone[0], hidden[row, :n].detach(), atol=1e-5, rtol=1e-5)
        (alone[0] * target[row, :n]).sum().backward()  # gradients add up over the rows
    for name, grad in batched.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4, msg=name)


def test_mean_pooled_embedding_averages_real_tokens_and_has_unit_length():
    hidden = torch.tensor([[[3.0, 0.0], [1.0, 2.0], [100.0, 100.0]]])  # (1, 3, 2), last token padding
    embedding = mean_pooled_embedding(hidden, torch.tensor([[1, 1, 0]]))
    assert torch.allclose(embedding, torch.tensor([[2.0, 1.0]]) / 5 ** 0.5)


def test_encoder_without_pooler_says_so():
    model = build_encoder(preset("bert-tiny", **TINY, pooler=False))
    with pytest.raises(LmlabError, match="no pooler"):
        model.pooled(torch.zeros(1, 3, dtype=torch.long))


def test_unknown_encoder_setting_is_a_clear_error():
    with pytest.raises(LmlabError, match="unknown encoder setting"):
        preset("bert-tiny", n_kv_heads=1)


@pytest.mark.parity
@pytest.mark.parametrize("lowercase", [True, False])
def test_tokenizer_from_vocab_txt_matches_hf_bert_tokenizer(tmp_path, lowercase):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB + ["The", "Cat"]) + "\n")
    ours = wordpiece_from_vocab(tmp_path / "vocab.txt", lowercase=lowercase)
    reference = transformers.BertTokenizer(vocab=str(tmp_path / "vocab.txt"), do_lower_case=lowercase)
    for text in ["The cat sat on the mat.", "Dogs ran, unbelievable!", "Café [MASK] zebra", "  a  dog "]:
        assert ours.encode(text).ids == reference(text)["input_ids"], text
    pair = ours.encode("the cat", "a dog")
    assert pair.ids == reference("the cat", "a dog")["input_ids"]
    assert pair.type_ids == reference("the cat", "a dog")["token_type_ids"]


def test_saved_hf_bert_directory_loads_with_its_vocab_and_matches_hf(tmp_path):
    cfg = preset("bert-tiny", **TINY | {"vocab_size": len(VOCAB)})
    reference = hf_bert(cfg)
    reference.save_pretrained(tmp_path / "bert")
    (tmp_path / "bert" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    model, tokenizer = load_encoder(tmp_path / "bert")
    assert model.config == cfg
    ids, mask, types = encode_batch(tokenizer, ["the cat sat on the mat .", "a dog ran !"])
    assert ids.shape == (2, 9) and mask[1].tolist() == [1] * 6 + [0] * 3
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert real_diff(model(ids, mask, types), expected, mask) <= 1e-5
    with pytest.raises(LmlabError, match="load_encoder"):
        load(tmp_path / "bert")
