"""DeBERTa: disentangled attention over log-bucketed relative positions. Same weights in lmlab and HF give
the same hidden states (`DebertaV2Model`), MLM logits (`DebertaV2ForMaskedLM`) and classifier logits and
gradients (`DebertaV2ForSequenceClassification`) on odd shapes and every option lmlab builds, both
directions; the enhanced mask decoder is HF's own last layer run on absolute-position queries; the RTD
model shares its token table gradient-disentangled and its two saved halves load in lmlab and HF."""

import pytest
import torch

from encoder_parity import max_diff, padded_batch, randomized, real_diff
from lmlab.errors import LmlabError
from lmlab.heads.sequence_classification import SequenceClassifier
from lmlab.heads.task_model import EncoderWithHead
from lmlab.models.deberta import convert
from lmlab.models.encoder_files import save_electra_dirs, save_hf_encoder_dir, save_pretraining_dir
from lmlab.models.encoders import build
from lmlab.models.load import load_encoder
from lmlab.models.masked_lm import load_masked_lm
from lmlab.models.presets import preset
from lmlab.models.pretraining import (
    EncoderForPreTraining,
    build_electra_for_pretraining,
    build_for_pretraining,
    mlm_head,
)
from lmlab.models.pretraining_names import electra_from_hf, electra_to_hf, pretraining_to_hf
from lmlab.modules.relative_position import log_buckets

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

ODD = dict(vocab_size=97, context_length=40, n_layers=3, n_heads=3, d_model=36, d_ff=52)  # head_dim 12
OPTIONS = {  # every setting HF's DeBERTa-v2 has that lmlab builds; the preset is v3's (shared keys, normed rows)
    "v3": {},
    "no buckets": dict(position_buckets=0),
    "log buckets in reach": dict(position_buckets=6, max_relative_positions=9),
    "clamped distance": dict(position_buckets=0, max_relative_positions=4),
    "own position keys, c2p": dict(share_att_key=False, pos_att_type="c2p"),
    "own position keys, p2c": dict(share_att_key=False, pos_att_type="p2c", position_buckets=6),
    "own position keys, both": dict(share_att_key=False, norm_rel_ebd="none"),
    "v2: input positions and types": dict(position_biased_input=True, type_vocab_size=2, norm_rel_ebd="none",
                                          share_att_key=False, position_buckets=0),
}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def config(**options):
    return preset("deberta-tiny", **ODD | options)


def hf_config(cfg, **extra):
    return transformers.DebertaV2Config(**convert.config_to_hf(cfg) | extra)


def batch(cfg):
    """Three rows of 12, the last two right-padded (to 9 and 4), the second a pair when the model has types."""
    return padded_batch(cfg.vocab_size, types=cfg.type_vocab_size > 0)


def hf_state(model) -> dict:
    """An HF model's tensors without the `deberta.` prefix (the pooler and heads keep their names)."""
    return {k.removeprefix(convert.BASE_PREFIX): v for k, v in model.state_dict().items()}


def test_log_buckets_keep_near_offsets_and_grow_log_wide():
    offsets = torch.arange(-40, 41)
    buckets = log_buckets(offsets, 8, 40)  # mid 4: exact within 4, then log-spaced out to 40
    assert torch.equal(buckets[36:45], torch.arange(-4, 5))
    assert torch.equal(buckets, -buckets.flip(0)) and buckets.abs().max() == 8
    assert (buckets[41:].diff() >= 0).all() and len(set(buckets[45:].tolist())) < len(offsets[45:])


@pytest.mark.parity
@pytest.mark.parametrize("name", OPTIONS)
def test_hf_weights_in_lmlab_give_the_same_hidden_states(name):
    cfg = config(**OPTIONS[name])
    reference = randomized(transformers.DebertaV2Model(hf_config(cfg)))
    ours = build(cfg).eval()
    ours.load_state_dict(convert.from_hf(hf_state(reference), cfg))
    ids, mask, types = batch(cfg)
    odd = torch.randint(1, cfg.vocab_size, (2, 13), generator=torch.Generator().manual_seed(3))  # no padding
    with torch.no_grad():
        hidden = ours(ids, mask, types)
        assert real_diff(hidden, reference(ids, attention_mask=mask, token_type_ids=types).last_hidden_state,
                         mask) <= 1e-5
        assert max_diff(ours(odd), reference(odd).last_hidden_state) <= 1e-5
    assert not hidden[mask == 0].any()


@pytest.mark.parity
@pytest.mark.parametrize("name", ["v3", "own position keys, both", "v2: input positions and types"])
def test_lmlab_weights_load_strictly_in_hf_and_round_trip(name):
    cfg = config(**OPTIONS[name])
    torch.manual_seed(2)
    ours = build(cfg).eval()
    reference = transformers.DebertaV2Model(hf_config(cfg)).eval()
    reference.load_state_dict(convert.to_hf(ours.state_dict(), cfg), strict=True)
    ids, mask, types = batch(cfg)
    with torch.no_grad():
        assert real_diff(ours(ids, mask, types), reference(ids, attention_mask=mask, token_type_ids=types)
                         .last_hidden_state, mask) <= 1e-5
    state = ours.state_dict()
    back = convert.from_hf(convert.to_hf(state, cfg), cfg)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    assert convert.config_from_hf(convert.config_to_hf(cfg)).replace(
        pooler=cfg.pooler, generator_divisor=cfg.generator_divisor) == cfg  # the two HF has no field for


@pytest.mark.parity
@pytest.mark.parametrize("name", ["own position keys, both", "v2: input positions and types", "v3"])
def test_masked_lm_logits_match_hf_without_a_mask_decoder(name):
    """HF's DebertaV2ForMaskedLM has no enhanced mask decoder: a file without its table loads without one."""
    cfg = config(**OPTIONS[name])
    reference = randomized(transformers.DebertaV2ForMaskedLM(hf_config(cfg)))
    ours = EncoderForPreTraining(build(cfg), mlm_head(cfg)).eval()
    hf = reference.state_dict()
    ours.load_state_dict({"encoder." + k: v for k, v in convert.from_hf(hf_state(reference), cfg).items()}
                         | {"mlm." + k: hf[name] for k, name in convert.MLM_HEAD.items()})
    ids, mask, types = batch(cfg)
    with torch.no_grad():
        logits = ours.mlm_logits(ours(ids, mask, types))
        assert real_diff(logits, reference(ids, attention_mask=mask, token_type_ids=types).logits, mask) <= 1e-5


@pytest.mark.parity
def test_the_enhanced_mask_decoder_is_hfs_last_layer_on_absolute_position_queries():
    """Microsoft's EMD: the states before the last layer are keys and values, their sum with the absolute
    positions the first queries, and the last layer runs twice; HF's layers take such queries."""
    cfg = config(position_buckets=6, max_relative_positions=9)
    torch.manual_seed(4)
    ours = build_for_pretraining(cfg, sentence_pair=False).eval()
    reference = transformers.DebertaV2ForMaskedLM(hf_config(cfg)).eval()
    state = pretraining_to_hf(ours)
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not missing and unexpected == [convert.MASK_DECODER["positions.table.weight"]]
    ids, mask, types = batch(cfg)
    with torch.no_grad():
        out = reference.deberta(ids, attention_mask=mask, output_hidden_states=True)
        encoder = reference.deberta.encoder
        keys = out.hidden_states[-2]
        queries = keys + state[convert.MASK_DECODER["positions.table.weight"]][:ids.size(1)]
        relative = encoder.get_rel_pos(keys)
        for _ in range(2):
            queries, _ = encoder.layer[-1](keys, encoder.get_attention_mask(mask), query_states=queries,
                                           relative_pos=relative, rel_embeddings=encoder.get_rel_embedding())
        expected = reference.lm_predictions(queries, reference.deberta.embeddings.word_embeddings)
        assert real_diff(ours.mlm_logits(ours(ids, mask, types)), expected, mask) <= 1e-5
        plain = reference(ids, attention_mask=mask).logits  # HF's head alone reads the last layer
        assert real_diff(ours.mlm_logits(ours.encoder(ids, mask)), plain, mask) <= 1e-5
        assert real_diff(ours.mlm_logits(ours(ids, mask)), plain, mask) > 1e-3


@pytest.mark.parity
@pytest.mark.parametrize("name", ["v3", "own position keys, p2c", "v2: input positions and types"])
def test_sequence_classifier_gives_hfs_logits_and_gradients(name):
    cfg = config(**OPTIONS[name], pooler=True)
    reference = randomized(transformers.DebertaV2ForSequenceClassification(hf_config(cfg, num_labels=3))).train()
    ours = EncoderWithHead(build(cfg), SequenceClassifier(cfg.d_model, 3, dropout=0.0)).train()
    hf = hf_state(reference)
    ours.encoder.load_state_dict(convert.from_hf(hf, cfg))
    ours.head.load_state_dict({"classifier.weight": hf["classifier.weight"], "classifier.bias": hf["classifier.bias"]})
    ids, mask, types = batch(cfg)
    labels = torch.tensor([0, 2, 1])
    expected = reference(ids, attention_mask=mask, token_type_ids=types, labels=labels)
    logits = ours(ids, mask, types)
    assert max_diff(logits, expected.logits) <= 1e-5
    expected.loss.backward()
    torch.nn.functional.cross_entropy(logits, labels).backward()
    assert max_diff(ours.head.classifier.weight.grad, reference.classifier.weight.grad) <= 1e-5
    assert max_diff(ours.head.classifier.bias.grad, reference.classifier.bias.grad) <= 1e-5
    grads = convert.from_hf({k.removeprefix(convert.BASE_PREFIX): p.grad for k, p in reference.named_parameters()},
                            cfg)
    for name_, p in ours.encoder.named_parameters():
        torch.testing.assert_close(p.grad, grads[name_], rtol=1e-4, atol=1e-5, msg=lambda m, name_=name_: f"{name_}: {m}")


@pytest.mark.parity
def test_saved_directories_load_in_lmlab_and_hf_alike(tmp_path):
    cfg = config()
    torch.manual_seed(6)
    model = build_for_pretraining(cfg, sentence_pair=False).eval()
    save_pretraining_dir(model, tmp_path / "mlm")
    (tmp_path / "mlm" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    masked, _ = load_masked_lm(tmp_path / "mlm")
    encoder, _ = load_encoder(tmp_path / "mlm")
    reference = transformers.DebertaV2Model.from_pretrained(tmp_path / "mlm").eval()
    ids, mask, types = batch(cfg)
    with torch.no_grad():
        assert max_diff(masked.mlm_logits(masked(ids, mask)), model.mlm_logits(model(ids, mask))) == 0
        assert real_diff(reference(ids, attention_mask=mask).last_hidden_state, encoder(ids, mask), mask) <= 1e-5
    assert masked.mask_decoder is not None and encoder.config.replace(generator_divisor=cfg.generator_divisor) == cfg
    save_hf_encoder_dir(build(cfg.replace(pooler=True)), tmp_path / "bare")
    (tmp_path / "bare" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    assert load_encoder(tmp_path / "bare")[0].pooler is not None


def test_rtd_discriminator_reads_the_generators_table_without_sending_it_gradient():
    cfg = config(generator_divisor=3)
    model = build_electra_for_pretraining(cfg)
    assert model.generator.config.n_layers == 1 and model.generator.config.d_model == cfg.d_model  # 3x shallower
    table = model.discriminator.embeddings.token
    assert table.shared is model.generator.embeddings.token and not table.bias.any()
    ids, mask, types = batch(cfg)
    model.rtd_logits(ids, mask).sum().backward()
    assert model.generator.embeddings.token.weight.grad is None and table.bias.grad.abs().sum() > 0
    model.generator_logits(model.generator_states(ids, mask)).sum().backward()
    assert model.generator.embeddings.token.weight.grad.abs().sum() > 0


@pytest.mark.parity
def test_rtd_halves_save_load_and_convert_back(tmp_path):
    cfg = config(generator_divisor=3)
    torch.manual_seed(7)
    model = build_electra_for_pretraining(cfg).eval()
    with torch.no_grad():
        model.discriminator.embeddings.token.bias.normal_(0, 0.02)  # as after training
    save_electra_dirs(model, tmp_path / "model", tmp_path / "generator")
    for d in ("model", "generator"):
        (tmp_path / d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ids, mask, types = batch(cfg)
    discriminator, _ = load_encoder(tmp_path / "model")
    generator, _ = load_masked_lm(tmp_path / "generator")
    hf_generator = transformers.DebertaV2ForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    back = build_electra_for_pretraining(cfg).eval()
    back.load_state_dict(electra_from_hf(*electra_to_hf(model), cfg))
    with torch.no_grad():
        assert max_diff(discriminator(ids, mask), model.discriminator(ids, mask)) <= 1e-6
        assert max_diff(generator.mlm_logits(generator(ids, mask)),
                        model.generator_logits(model.generator_states(ids, mask))) <= 1e-6
        assert real_diff(hf_generator.deberta(ids, attention_mask=mask).last_hidden_state,
                         model.generator(ids, mask), mask) <= 1e-5
        assert max_diff(back.rtd_logits(ids, mask), model.rtd_logits(ids, mask)) <= 1e-5


@pytest.mark.parametrize("hf, fragment", [
    (dict(conv_kernel_size=3), "conv_kernel_size=3"),
    (dict(embedding_size=16), "embedding_size=16"),
    (dict(relative_attention=False), "relative_attention"),
    (dict(pos_att_type=["p2p"]), "pos_att_type"),
    (dict(hidden_act="relu"), "hidden_act='relu'"),
])
def test_options_lmlab_does_not_build_are_refused_in_one_line(hf, fragment):
    with pytest.raises(LmlabError, match=fragment) as error:
        convert.config_from_hf(convert.config_to_hf(config()) | hf)
    assert "\n" not in str(error.value)


def test_deberta_settings_are_checked():
    with pytest.raises(LmlabError, match="apply to deberta only"):
        preset("bert-tiny", share_att_key=True)
    with pytest.raises(LmlabError, match="--attention linformer does not apply to deberta"):
        config(attention="linformer")
    with pytest.raises(LmlabError, match="must exceed half of position_buckets"):
        config(position_buckets=32, max_relative_positions=10)
    assert preset("deberta-tiny", context_length=16).relative_span == 32  # no offset reaches the log buckets


def test_presets_are_the_published_v3_shapes():
    for name, layers in (("deberta-v3-small", 6), ("deberta-v3-base", 12)):
        cfg = preset(name)
        assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.vocab_size) == (layers, 768, 12, 3072, 128100)
        assert (cfg.position_buckets, cfg.relative_span, cfg.type_vocab_size, cfg.position_biased_input,
                cfg.share_att_key, cfg.norm_rel_ebd) == (256, 256, 0, False, True, "layer_norm")
    with torch.device("meta"):
        model = build(preset("deberta-v3-base"))
    assert model.relative.table.weight.shape == (512, 768)
