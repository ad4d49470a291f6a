"""RoBERTa: BERT's network with fairseq's position numbering. Same weights in lmlab and HF
`RobertaModel` / `RobertaForMaskedLM` give the same hidden states and MLM logits (padded batches
included, where positions depend on the pad id), both directions; presets and limits."""

import pytest
import torch

from encoder_parity import max_diff, padded_batch, randomized, real_diff
from lmlab.errors import LmlabError
from lmlab.models.encoder_files import save_pretraining_dir
from lmlab.models.encoders import build
from lmlab.models.load import load, load_encoder
from lmlab.models.presets import preset
from lmlab.models.pretraining import build_for_pretraining
from lmlab.models.pretraining_names import pretraining_from_hf, pretraining_to_hf
from lmlab.models.roberta import convert
from lmlab.models.roberta.embeddings import roberta_positions

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=100, context_length=34, n_layers=2, n_heads=2, d_model=32, d_ff=64, pad_token_id=1,
            pooler=True)


def hf_config(cfg):
    return transformers.RobertaConfig(**convert.config_to_hf(cfg))


def test_positions_start_after_the_pad_id_and_padding_keeps_the_pad_id():
    ids = torch.tensor([[0, 5, 6, 2, 1, 1]])
    assert roberta_positions(ids, pad_token_id=1).tolist() == [[2, 3, 4, 5, 1, 1]]
    assert preset("roberta-base").max_tokens == 512 and preset("roberta-tiny").max_tokens == 513


@pytest.mark.parity
def test_hf_roberta_weights_give_the_same_hidden_states_and_pooled_output():
    cfg = preset("roberta-tiny", **TINY)
    reference = randomized(transformers.RobertaModel(hf_config(cfg)))
    ours = build(cfg).eval()
    ours.load_state_dict(convert.from_hf(reference.state_dict(), cfg))
    ids, mask, _ = padded_batch(cfg.vocab_size, pad_id=cfg.pad_token_id)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask)
        assert real_diff(ours(ids, mask), expected.last_hidden_state, mask) <= 1e-5
        assert max_diff(ours.pooled(ids, mask), expected.pooler_output) <= 1e-5


@pytest.mark.parity
def test_hf_roberta_for_masked_lm_gives_the_same_logits_both_ways():
    cfg = preset("roberta-tiny", **TINY | {"pooler": False})
    reference = randomized(transformers.RobertaForMaskedLM(hf_config(cfg)))
    ours = build_for_pretraining(cfg, sentence_pair=False).eval()
    ours.load_state_dict(pretraining_from_hf(reference.state_dict(), cfg, sentence_pair=False))
    ids, mask, _ = padded_batch(cfg.vocab_size, pad_id=cfg.pad_token_id)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask).logits
        assert real_diff(ours.mlm_logits(ours(ids, mask)), expected, mask) <= 1e-5
    fresh = transformers.RobertaForMaskedLM(hf_config(cfg)).eval()
    missing, unexpected = fresh.load_state_dict(pretraining_to_hf(ours), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.decoder.weight", "lm_head.decoder.bias"}
    with torch.no_grad():
        assert max_diff(fresh(ids, attention_mask=mask).logits, expected) <= 1e-5


@pytest.mark.parity
def test_saved_roberta_loads_in_transformers_and_with_load_encoder(tmp_path):
    cfg = preset("roberta-tiny", **TINY | {"pooler": False})
    torch.manual_seed(3)
    ours = build_for_pretraining(cfg, sentence_pair=False).eval()
    save_pretraining_dir(ours, tmp_path / "model")
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) + "\n")
    reference = transformers.RobertaForMaskedLM.from_pretrained(tmp_path / "model").eval()
    encoder, _ = load_encoder(tmp_path / "model")
    assert encoder.config == cfg
    ids, mask, _ = padded_batch(cfg.vocab_size, pad_id=cfg.pad_token_id)
    with torch.no_grad():
        hidden = ours(ids, mask)
        assert real_diff(ours.mlm_logits(hidden), reference(ids, attention_mask=mask).logits, mask) <= 1e-5
        assert max_diff(encoder(ids, mask), hidden) <= 1e-6
    with pytest.raises(LmlabError, match="ROBERTA encoder.*load_encoder"):
        load(tmp_path / "model")
