"""Helpers for the encoder-decoder parity tests (BART, Marian): a random HF model whose every
weight matters, a padded encoder-decoder batch, and the three checks each family must pass."""

import torch

from lmlab.models.encoder_decoder.build import build_encoder_decoder

TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def randomized(model):
    """`model` in eval mode with noise on every trained weight and a random `final_logits_bias` (HF
    zero-initialises biases and sets norms to one, which would hide a swapped bias or norm)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # Marian's sinusoidal tables are frozen parameters
                p.add_(torch.randn_like(p) * 0.05)
        if hasattr(model, "final_logits_bias"):  # BART and Marian; T5 has none
            model.final_logits_bias.normal_()
    return model.eval()


def lmlab_copy(reference, convert):
    """An lmlab model holding the weights of the HF `reference`, through `convert` (a converter module)."""
    cfg = convert.config_from_hf(reference.config.to_dict())
    ours = build_encoder_decoder(cfg).eval()
    ours.load_state_dict(convert.from_hf(reference.state_dict(), cfg))
    return ours


def encoder_decoder_batch(vocab_size: int, pad_id: int):
    """Sources (3, 9), the last two right-padded; decoder inputs (3, 6), the first two right-padded."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, vocab_size, (3, 9), generator=g)
    src_mask = torch.ones_like(src)
    src_mask[1, 6:] = 0
    src_mask[2, 3:] = 0
    src[src_mask == 0] = pad_id
    tgt = torch.randint(3, vocab_size, (3, 6), generator=g)
    tgt_mask = torch.ones_like(tgt)
    tgt_mask[0, 4:] = 0
    tgt_mask[1, 2:] = 0
    tgt[tgt_mask == 0] = pad_id
    return src, src_mask, tgt, tgt_mask


@torch.no_grad()
def encoder_and_logit_gaps(reference, ours, pad_id: int) -> tuple[float, float]:
    """The largest |HF - lmlab| of the encoder output (real source tokens) and of the logits (real
    target tokens), with padded sources and a decoder attention mask."""
    src, src_mask, tgt, tgt_mask = encoder_decoder_batch(ours.config.vocab_size, pad_id)
    expected = reference(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                         decoder_attention_mask=tgt_mask)
    memory = ours.encode(src, src_mask)
    logits = ours.decode(tgt, memory, src_mask, tgt_mask)
    real_src, real_tgt = src_mask.bool(), tgt_mask.bool()
    encoder_gap = (expected.encoder_last_hidden_state - memory)[real_src].abs().max().item()
    return encoder_gap, (expected.logits - logits)[real_tgt].abs().max().item()


@torch.no_grad()
def exported_logit_gap(ours, convert, hf_class, pad_id: int) -> float:
    """Load `convert.to_hf(ours)` strictly into a fresh `hf_class`; the largest logit gap to lmlab."""
    config = hf_class.config_class(**convert.config_to_hf(ours.config))
    reference = hf_class(config).eval()
    reference.load_state_dict(convert.to_hf(ours.state_dict(), ours.config), strict=True)
    src, src_mask, tgt, _ = encoder_decoder_batch(ours.config.vocab_size, pad_id)
    expected = reference(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt).logits
    return (expected - ours(src, src_mask, tgt)).abs().max().item()


@torch.no_grad()
def incremental_logit_gap(reference, ours, pad_id: int) -> float:
    """Decode one target token at a time: lmlab with memory_kv + KV cache, HF with past_key_values;
    the largest logit gap over all steps (padded sources)."""
    src, src_mask, tgt, _ = encoder_decoder_batch(ours.config.vocab_size, pad_id)
    encoder_outputs = reference.get_encoder()(input_ids=src, attention_mask=src_mask)
    memory_kv = ours.memory_kv(ours.encode(src, src_mask))
    cache = ours.new_cache(src.size(0))
    past, gap = None, 0.0
    for i in range(tgt.size(1)):
        step = tgt[:, i:i + 1]
        out = reference(attention_mask=src_mask, encoder_outputs=encoder_outputs, decoder_input_ids=step,
                        past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = ours.decode(step, memory_kv, src_mask, kv_cache=cache)  # (B, 1, V)
        gap = max(gap, (out.logits - logits).abs().max().item())
    return gap
