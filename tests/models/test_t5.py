"""T5: same weights in lmlab and HF `T5ForConditionalGeneration` give the same encoder states and
logits, in both directions and when decoding one token at a time with caches; the published
t5-small and t5-v1_1-small configs read as lmlab's presets."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from encoder_parity import max_diff, randomized
from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.encoder_decoder.config import ENCODER_DECODER_PRESETS
from lmlab.models.presets import preset
from lmlab.models.t5 import convert

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-5  # fp32, relative to the largest value compared (logits reach ~25; HF's GELU is a formula,
# PyTorch's a fused kernel, and their rounding differs by a few ulps of that size)


def close(ours: torch.Tensor, expected: torch.Tensor) -> bool:
    return max_diff(ours, expected) <= TOLERANCE * max(1.0, expected.abs().max().item())
# tiny HF configs: few buckets and a short max_distance, so 12-token inputs reach the log-spaced
# and the saturated buckets
V1_0 = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=10, feed_forward_proj="relu",
            tie_word_embeddings=True)
V1_1 = dict(vocab_size=64, d_model=32, d_kv=12, d_ff=40, num_layers=3, num_decoder_layers=2, num_heads=3,
            relative_attention_num_buckets=16, relative_attention_max_distance=12, feed_forward_proj="gated-gelu",
            tie_word_embeddings=False)  # 3 heads * 12 = 36 != d_model
VARIANTS = {"v1_0-relu-tied": V1_0, "v1_1-gated-gelu-untied": V1_1}


def hf_t5(config: dict) -> nn.Module:
    """A T5ForConditionalGeneration whose every weight is random (an untied head its own tensor)."""
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**config, dropout_rate=0.0))
    if not config["tie_word_embeddings"] and model.lm_head.weight is model.shared.weight:
        model.lm_head.weight = nn.Parameter(model.shared.weight.detach().clone())  # transformers 5 ties on build
    return randomized(model)


def hf_t5_and_ours(fields: dict):
    """A random HF T5, our config read from its config, and an lmlab T5 holding its weights."""
    reference = hf_t5(fields)
    cfg = convert.config_from_hf(reference.config.to_dict())
    ours = build_encoder_decoder(cfg).eval()
    ours.load_state_dict(convert.from_hf(reference.state_dict(), cfg), strict=True)
    return reference, cfg, ours


def encoder_decoder_batch(vocab_size: int):
    """Sources (3, 12) with two right-padded rows, targets (3, 7) with one right-padded row."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(2, vocab_size, (3, 12), generator=g)
    src_mask = torch.ones_like(src)
    src_mask[1, 9:] = 0
    src_mask[2, 4:] = 0
    src[src_mask == 0] = 0
    tgt = torch.randint(2, vocab_size, (3, 7), generator=g)
    tgt[:, 0] = 0  # T5 starts decoding from pad
    tgt_mask = torch.ones_like(tgt)
    tgt_mask[2, 5:] = 0
    return src, src_mask, tgt, tgt_mask


@pytest.mark.parity
@pytest.mark.parametrize("variant", VARIANTS)
def test_hf_t5_weights_in_lmlab_give_the_same_encoder_states_and_logits(variant):
    reference, cfg, ours = hf_t5_and_ours(VARIANTS[variant])
    src, src_mask, tgt, tgt_mask = encoder_decoder_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                             decoder_attention_mask=tgt_mask)
        memory = ours.encode(src, src_mask)
        logits = ours.decode(tgt, memory, src_mask, tgt_mask)
        unmasked = ours(src, None, tgt)
        expected_unmasked = reference(input_ids=src, decoder_input_ids=tgt).logits
    real_src = src_mask.bool()  # lmlab's encoder skips padding (zeros there); HF's fills it with values nothing reads
    assert close(memory[real_src], expected.encoder_last_hidden_state[real_src])
    real = tgt_mask.bool()  # a padded target position predicts nothing; HF and lmlab mask it differently
    assert close(logits[real], expected.logits[real])
    assert close(unmasked, expected_unmasked)


@pytest.mark.parity
@pytest.mark.parametrize("variant", VARIANTS)
def test_lmlab_t5_exported_with_to_hf_loads_strictly_in_hf_and_gives_the_same_logits(variant):
    fields = VARIANTS[variant]
    cfg = convert.config_from_hf(fields)
    torch.manual_seed(3)
    ours = randomized(build_encoder_decoder(cfg))  # noise on the norms too, which start at one
    reference = transformers.T5ForConditionalGeneration(transformers.T5Config(**convert.config_to_hf(cfg))).eval()
    if not cfg.tie_embeddings and reference.lm_head.weight is reference.shared.weight:
        reference.lm_head.weight = nn.Parameter(reference.shared.weight.detach().clone())
    reference.load_state_dict(convert.to_hf(ours.state_dict(), cfg), strict=True)
    src, src_mask, tgt, tgt_mask = encoder_decoder_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                             decoder_attention_mask=tgt_mask).logits
        logits = ours(src, src_mask, tgt, tgt_mask)
    real = tgt_mask.bool()
    assert close(logits[real], expected[real])


@pytest.mark.parametrize("variant", VARIANTS)
def test_to_hf_then_from_hf_gives_back_every_tensor(variant):
    cfg = convert.config_from_hf(VARIANTS[variant])
    state = build_encoder_decoder(cfg).state_dict()
    back = convert.from_hf(convert.to_hf(state, cfg), cfg)
    assert back.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(back[name], tensor), name


@pytest.mark.parity
@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_one_token_at_a_time_equals_hf_past_key_values(variant):
    reference, cfg, ours = hf_t5_and_ours(VARIANTS[variant])
    src, src_mask, tgt, _ = encoder_decoder_batch(cfg.vocab_size)
    with torch.no_grad():
        memory_kv = ours.memory_kv(ours.encode(src, src_mask))  # encoded and projected once
        cache = ours.new_cache(src.size(0), max_len=tgt.size(1))
        steps = [ours.decode(tgt[:, i:i + 1], memory_kv, src_mask, kv_cache=cache) for i in range(tgt.size(1))]
        encoder_outputs = reference.get_encoder()(input_ids=src, attention_mask=src_mask)
        past, expected = None, []
        for i in range(tgt.size(1)):
            out = reference(encoder_outputs=encoder_outputs, attention_mask=src_mask,
                            decoder_input_ids=tgt[:, i:i + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            expected.append(out.logits)
    assert close(torch.cat(steps, 1), torch.cat(expected, 1))


def write_hf_directory(state: dict, cfg, path) -> None:
    """config.json + model.safetensors as transformers writes them: one name per tensor (the tied
    copies of the shared embedding left out)."""
    path.mkdir()
    hf_state, seen = {}, set()
    for name, tensor in convert.to_hf(state, cfg).items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            hf_state[name] = tensor.contiguous()
    save_file(hf_state, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps(convert.config_to_hf(cfg)))


@pytest.mark.parity
@pytest.mark.parametrize("variant", VARIANTS)
def test_an_hf_directory_goes_through_transformers_from_pretrained_and_save_pretrained_unchanged(variant, tmp_path):
    cfg = convert.config_from_hf(VARIANTS[variant])
    torch.manual_seed(3)
    ours = randomized(build_encoder_decoder(cfg))
    write_hf_directory(ours.state_dict(), cfg, tmp_path / "ours")
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "ours").eval()
    reference.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    back = convert.from_hf(load_file(tmp_path / "saved" / "model.safetensors"), convert.config_from_hf(saved))
    for name, tensor in ours.state_dict().items():
        assert torch.equal(back[name], tensor), name
    src, src_mask, tgt, tgt_mask = encoder_decoder_batch(cfg.vocab_size)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                             decoder_attention_mask=tgt_mask).logits
        logits = ours(src, src_mask, tgt, tgt_mask)
    real = tgt_mask.bool()
    assert close(logits[real], expected[real])


# config.json of the published checkpoints (the fields they set; the others take T5Config's defaults)
T5_SMALL = {"architectures": ["T5WithLMHeadModel"], "model_type": "t5", "d_ff": 2048, "d_kv": 64, "d_model": 512,
            "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1, "initializer_factor": 1.0,
            "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "n_positions": 512, "num_heads": 8,
            "num_layers": 6, "pad_token_id": 0, "relative_attention_num_buckets": 32, "vocab_size": 32128}
T5_V1_1_SMALL = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 1024, "d_kv": 64,
                 "d_model": 512, "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1,
                 "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0, "is_encoder_decoder": True,
                 "layer_norm_epsilon": 1e-06, "num_decoder_layers": 8, "num_heads": 6, "num_layers": 8,
                 "pad_token_id": 0, "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
                 "vocab_size": 32128}


@pytest.mark.parametrize("name, published", [("t5-small", T5_SMALL), ("t5-v1_1-small", T5_V1_1_SMALL)])
def test_published_t5_configs_read_as_the_presets(name, published):
    preset = ENCODER_DECODER_PRESETS[name]
    assert convert.config_from_hf(published).replace(dropout=preset.dropout) == preset
    assert convert.config_from_hf(convert.config_to_hf(preset)) == preset


def test_a_transformers_5_config_of_t5_v1_1_reads_as_untied():
    written = transformers.T5Config(**V1_1).to_dict()  # transformers 5: tie_word_embeddings true, no rescale
    assert not convert.config_from_hf(written).tie_embeddings


def test_a_config_hf_t5_cannot_express_is_one_clear_error():
    with pytest.raises(LmlabError, match="norm='layernorm' cannot be saved as HF T5"):
        convert.config_to_hf(preset("t5-tiny", norm="layernorm"))
    with pytest.raises(LmlabError, match="activation='gelu' with gated_ffn=True"):
        convert.config_to_hf(preset("t5-tiny", activation="gelu", gated_ffn=True))
    with pytest.raises(LmlabError, match="feed_forward_proj 'gated-mish'"):
        convert.config_from_hf(V1_0 | {"feed_forward_proj": "gated-mish"})


def test_a_tied_config_with_a_different_lm_head_is_one_clear_error():
    cfg = convert.config_from_hf(V1_0)
    hf_state = convert.to_hf(build_encoder_decoder(cfg).state_dict(), cfg)
    hf_state["lm_head.weight"] = hf_state["lm_head.weight"] + 1
    with pytest.raises(LmlabError, match="lm_head differs from its shared embedding"):
        convert.from_hf(hf_state, cfg)
