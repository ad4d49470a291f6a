"""ELECTRA: a narrow generator and a discriminator on one embedding table. Same weights in lmlab and
HF give the same discriminator logits (`ElectraForPreTraining`) and generator logits
(`ElectraForMaskedLM`), both directions; the generator really shares the embeddings."""

import pytest
import torch

from encoder_parity import max_diff, padded_batch, randomized, real_diff
from lmlab.models.electra import convert
from lmlab.models.encoder_files import save_electra_dirs
from lmlab.models.load import load_encoder
from lmlab.models.presets import preset
from lmlab.models.pretraining import build_electra_for_pretraining
from lmlab.models.pretraining_names import electra_from_hf, electra_to_hf

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=100, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64, embedding_size=8,
            generator_divisor=2)


def hf_config(cfg):
    return transformers.ElectraConfig(**convert.config_to_hf(cfg))


def hf_pair(cfg):
    """A random HF discriminator and a generator whose embeddings are the discriminator's (as trained)."""
    discriminator = randomized(transformers.ElectraForPreTraining(hf_config(cfg)))
    generator = randomized(transformers.ElectraForMaskedLM(hf_config(cfg.generator())))
    shared = {k: v for k, v in discriminator.electra.embeddings.state_dict().items()}
    generator.electra.embeddings.load_state_dict(shared)
    return discriminator, generator


def test_generator_is_narrower_and_shares_the_embedding_table():
    cfg = preset("electra-tiny", **TINY)
    model = build_electra_for_pretraining(cfg)
    assert model.generator.config.d_model == 16 and model.discriminator.config.d_model == 32
    assert model.generator.embeddings.token.weight is model.discriminator.embeddings.token.weight
    assert model.generator.embeddings.project.weight.shape == (16, 8)  # E = 8 -> the generator's 16


@pytest.mark.parity
def test_discriminator_and_generator_logits_match_hf():
    cfg = preset("electra-tiny", **TINY)
    discriminator, generator = hf_pair(cfg)
    ours = build_electra_for_pretraining(cfg).eval()
    ours.load_state_dict(electra_from_hf(discriminator.state_dict(), generator.state_dict(), cfg))
    ids, mask, types = padded_batch(cfg.vocab_size)
    with torch.no_grad():
        assert real_diff(ours.rtd_logits(ids, mask, types),
                         discriminator(ids, attention_mask=mask, token_type_ids=types).logits, mask) <= 1e-5
        assert real_diff(ours.generator_logits(ours.generator(ids, mask, types)),
                         generator(ids, attention_mask=mask, token_type_ids=types).logits, mask) <= 1e-5


@pytest.mark.parity
def test_lmlab_electra_loads_strictly_in_hf_and_saved_dirs_load(tmp_path):
    cfg = preset("electra-tiny", **TINY)
    torch.manual_seed(5)
    ours = build_electra_for_pretraining(cfg).eval()
    discriminator_state, generator_state = electra_to_hf(ours)
    discriminator = transformers.ElectraForPreTraining(hf_config(cfg)).eval()
    discriminator.load_state_dict(discriminator_state, strict=True)
    generator = transformers.ElectraForMaskedLM(hf_config(cfg.generator())).eval()
    missing, unexpected = generator.load_state_dict(generator_state, strict=False)
    assert not unexpected and set(missing) <= {"generator_lm_head.weight"}
    ids, mask, types = padded_batch(cfg.vocab_size)
    save_electra_dirs(ours, tmp_path / "model", tmp_path / "generator")
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) + "\n")
    loaded_generator = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    encoder, _ = load_encoder(tmp_path / "model")
    with torch.no_grad():
        expected = ours.rtd_logits(ids, mask, types)
        assert real_diff(discriminator(ids, attention_mask=mask, token_type_ids=types).logits, expected, mask) <= 1e-5
        assert real_diff(loaded_generator(ids, attention_mask=mask, token_type_ids=types).logits,
                         ours.generator_logits(ours.generator(ids, mask, types)), mask) <= 1e-5
        assert max_diff(encoder(ids, mask, types), ours.discriminator(ids, mask, types)) <= 1e-6


def test_electra_small_is_the_published_discriminator_shape():
    cfg = preset("electra-small")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.embedding_width) == (12, 256, 4, 1024, 128)
