"""BERT with its pre-training heads: same weights in lmlab and HF `BertForPreTraining` give the same
MLM and next-sentence logits (HF -> lmlab and lmlab -> HF, strict); the MLM decoder is the token
embedding matrix; the saved directory loads in transformers and in lmlab."""

import pytest
import torch

from encoder_parity import max_diff, padded_batch, randomized, real_diff
from lmlab.models.bert import convert
from lmlab.models.encoder_files import save_pretraining_dir
from lmlab.models.load import load_encoder
from lmlab.models.presets import preset
from lmlab.models.pretraining import build_for_pretraining
from lmlab.models.pretraining_names import pretraining_from_hf, pretraining_to_hf

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=100, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)


def hf_config(cfg):
    return transformers.BertConfig(**convert.config_to_hf(cfg))


@pytest.mark.parity
def test_hf_bert_for_pretraining_weights_give_the_same_mlm_and_nsp_logits():
    cfg = preset("bert-tiny", **TINY)
    reference = randomized(transformers.BertForPreTraining(hf_config(cfg)))
    ours = build_for_pretraining(cfg, sentence_pair=True).eval()
    ours.load_state_dict(pretraining_from_hf(reference.state_dict(), cfg, sentence_pair=True))
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        hidden = ours(ids, mask, types)
        assert real_diff(ours.mlm_logits(hidden), expected.prediction_logits, mask) <= 1e-5
        assert max_diff(ours.pair_logits(hidden), expected.seq_relationship_logits) <= 1e-5


@pytest.mark.parity
def test_lmlab_heads_load_strictly_in_hf_bert_for_masked_lm():
    cfg = preset("bert-tiny", **TINY, pooler=False)  # BertForMaskedLM has no pooler
    torch.manual_seed(1)
    ours = build_for_pretraining(cfg, sentence_pair=False).eval()
    reference = transformers.BertForMaskedLM(hf_config(cfg)).eval()
    missing, unexpected = reference.load_state_dict(pretraining_to_hf(ours), strict=False)
    assert not unexpected and set(missing) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types).logits
        assert real_diff(ours.mlm_logits(ours(ids, mask, types)), expected, mask) <= 1e-5


def test_mlm_decoder_is_the_token_embedding_matrix():
    model = build_for_pretraining(preset("bert-tiny", **TINY), sentence_pair=False)
    hidden = torch.randn(4, TINY["d_model"])
    logits = model.mlm_logits(hidden)
    logits.sum().backward()
    assert model.encoder.embeddings.token.weight.grad is not None  # the output layer trains the input table
    assert not any("decoder" in name for name, _ in model.named_parameters())


@pytest.mark.parity
def test_saved_pretraining_dir_loads_in_transformers_and_lmlab(tmp_path):
    cfg = preset("bert-tiny", **TINY)
    torch.manual_seed(2)
    ours = build_for_pretraining(cfg, sentence_pair=True).eval()
    save_pretraining_dir(ours, tmp_path / "model")
    reference = transformers.BertForPreTraining.from_pretrained(tmp_path / "model").eval()
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        hidden = ours(ids, mask, types)
        assert real_diff(ours.mlm_logits(hidden), expected.prediction_logits, mask) <= 1e-5
        assert max_diff(ours.pair_logits(hidden), expected.seq_relationship_logits) <= 1e-5
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(specials + [f"t{i}" for i in range(95)]) + "\n")
    encoder, _ = load_encoder(tmp_path / "model")
    with torch.no_grad():
        assert max_diff(encoder(ids, mask, types), hidden) <= 1e-6
