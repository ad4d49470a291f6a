"""ALBERT: factorised embeddings and one block shared by every layer. Same weights in lmlab and HF
`AlbertModel` / `AlbertForPreTraining` give the same hidden states, MLM and sentence-order logits,
both directions; the parameter count does not grow with depth."""

import pytest
import torch

from encoder_parity import max_diff, padded_batch, randomized, real_diff
from lmlab.errors import LmlabError
from lmlab.models.albert import convert
from lmlab.models.encoder_files import save_pretraining_dir
from lmlab.models.encoders import build
from lmlab.models.load import load_encoder
from lmlab.models.presets import preset
from lmlab.models.pretraining import build_for_pretraining
from lmlab.models.pretraining_names import pretraining_from_hf, pretraining_to_hf

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=100, context_length=32, n_layers=3, n_heads=2, d_model=32, d_ff=64, embedding_size=16)


def hf_config(cfg):
    return transformers.AlbertConfig(**convert.config_to_hf(cfg))


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_layers_share_one_set_of_weights_and_embeddings_are_factorised():
    shallow, deep = build(preset("albert-tiny", **TINY | {"n_layers": 1})), build(
        preset("albert-tiny", **TINY | {"n_layers": 12}))
    assert n_params(shallow) == n_params(deep)
    assert deep.embeddings.token.weight.shape == (100, 16) and deep.embeddings.project.weight.shape == (32, 16)


@pytest.mark.parity
def test_hf_albert_weights_give_the_same_hidden_states_and_pooled_output():
    cfg = preset("albert-tiny", **TINY)
    reference = randomized(transformers.AlbertModel(hf_config(cfg)))
    ours = build(cfg).eval()
    ours.load_state_dict(convert.from_hf(reference.state_dict(), cfg))
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        assert real_diff(ours(ids, mask, types), expected.last_hidden_state, mask) <= 1e-5
        assert max_diff(ours.pooled(ids, mask, types), expected.pooler_output) <= 1e-5


@pytest.mark.parity
def test_albert_for_pretraining_gives_the_same_mlm_and_sop_logits_both_ways():
    cfg = preset("albert-tiny", **TINY)
    reference = randomized(transformers.AlbertForPreTraining(hf_config(cfg)))
    ours = build_for_pretraining(cfg, sentence_pair=True).eval()
    ours.load_state_dict(pretraining_from_hf(reference.state_dict(), cfg, sentence_pair=True))
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, token_type_ids=types)
        hidden = ours(ids, mask, types)
        assert real_diff(ours.mlm_logits(hidden), expected.prediction_logits, mask) <= 1e-5
        assert max_diff(ours.pair_logits(hidden), expected.sop_logits) <= 1e-5
    fresh = transformers.AlbertForPreTraining(hf_config(cfg)).eval()
    missing, unexpected = fresh.load_state_dict(pretraining_to_hf(ours), strict=False)
    assert not unexpected and set(missing) <= {"predictions.decoder.weight", "predictions.decoder.bias"}
    with torch.no_grad():
        assert max_diff(fresh(ids, attention_mask=mask, token_type_ids=types).prediction_logits,
                        expected.prediction_logits) <= 1e-5


@pytest.mark.parity
def test_saved_albert_loads_in_transformers_and_with_load_encoder(tmp_path):
    cfg = preset("albert-tiny", **TINY)
    torch.manual_seed(4)
    ours = build_for_pretraining(cfg, sentence_pair=True).eval()
    save_pretraining_dir(ours, tmp_path / "model")
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) + "\n")
    reference = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "model").eval()
    encoder, _ = load_encoder(tmp_path / "model")
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        hidden = ours(ids, mask, types)
        assert max_diff(ours.pair_logits(hidden),
                        reference(ids, attention_mask=mask, token_type_ids=types).sop_logits) <= 1e-5
        assert max_diff(encoder(ids, mask, types), hidden) <= 1e-6


def test_albert_with_several_layer_groups_is_refused():
    with pytest.raises(LmlabError, match="num_hidden_groups"):
        convert.config_from_hf(convert.config_to_hf(preset("albert-tiny")) | {"num_hidden_groups": 2})
