"""Efficient attention cores: equal to full attention where the method reduces to it, closer to it as features,
landmarks and hash rounds grow, never looking at the future in a causal model, blind to padding, and (where a
method can decode step by step) the same logits from a KV cache as from a full pass."""

import math

import pytest
import torch

from lmlab.config_checks import check_causal_attention
from lmlab.errors import LmlabError
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_files import load_hf_encoder_dir, save_hf_encoder_dir
from lmlab.models.encoders import build
from lmlab.models.load import load_hf_dir
from lmlab.models.presets import preset
from lmlab.modules.efficient_attention import attention_core
from lmlab.modules.efficient_attention.linformer import LinformerAttention
from lmlab.modules.efficient_attention.lsh import SELF_SCORE, LSHAttention
from lmlab.modules.efficient_attention.masking import masked_softmax_attend
from lmlab.modules.efficient_attention.nystrom import NystromAttention
from lmlab.modules.efficient_attention.performer import PerformerAttention
from lmlab.modules.efficient_attention.sparse import SparseAttention
from lmlab.modules.kv_cache import KVCache

B, H, D = 2, 3, 16


def qkv(T: int, seed: int = 0, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) * scale for _ in range(3))


def full(q, k, v, causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx - exact).norm() / exact.norm())


@pytest.mark.parametrize("causal", [True, False])
def test_a_window_covering_the_sequence_is_full_attention(causal):
    q, k, v = qkv(50)
    out = SparseAttention(causal, window=50, n_global=2)(q, k, v)
    torch.testing.assert_close(out, full(q, k, v, causal))


@pytest.mark.parametrize("causal", [True, False])
def test_bigbird_with_every_block_drawn_is_full_attention(causal):
    q, k, v = qkv(80)
    out = SparseAttention(causal, window=16, n_global=3, random_blocks=5, block=16)(q, k, v)  # 5 blocks
    torch.testing.assert_close(out, full(q, k, v, causal))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("random_blocks", [0, 2])
def test_the_block_by_block_pass_is_exactly_its_pattern(causal, random_blocks):
    """Window 8 (or BigBird blocks of 8) over 61 tokens with 3 global ones and padding: the fast pass equals
    softmax over exactly the keys `allowed` names, and it is not full attention."""
    q, k, v = qkv(61)
    padding = torch.ones(B, 61, dtype=torch.bool)
    padding[0, :5] = padding[1, 40:] = False
    core = SparseAttention(causal, window=8, n_global=3, random_blocks=random_blocks, block=8, seed=4)
    positions = torch.arange(61)
    reference = masked_softmax_attend(q, k, v, core.allowed(positions, positions), padding)
    torch.testing.assert_close(core(q, k, v, padding), reference)
    assert relative_error(core(q, k, v), full(q, k, v, causal)) > 0.05
    if random_blocks:  # each query block draws its own random blocks
        assert len({tuple(row) for row in core.random_key_blocks(8, 8).tolist()}) > 2


def test_lsh_with_one_chunk_is_shared_key_attention_with_the_own_key_last():
    q, _, v = qkv(40)
    keys = q / q.norm(dim=-1, keepdim=True)
    scores = (q @ keys.transpose(-2, -1)) / math.sqrt(D)
    causal = torch.ones(40, 40, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    scores = scores.masked_fill(torch.eye(40, dtype=torch.bool), SELF_SCORE)
    expected = scores.softmax(-1) @ v
    torch.testing.assert_close(LSHAttention(True, D, bucket_size=64, n_hashes=3)(q, None, v), expected)


def test_more_hash_rounds_miss_less_of_the_attention():
    q, _, v = qkv(256, seed=1, scale=2.0)
    exact = LSHAttention(False, D, bucket_size=256, n_hashes=1)(q, None, v)  # one chunk: every key
    errors = [relative_error(LSHAttention(False, D, bucket_size=16, n_hashes=n)(q, None, v), exact)
              for n in (1, 4, 16)]
    assert errors[0] > errors[1] > errors[2]


def test_more_random_features_approximate_softmax_attention_better():
    q, k, v = qkv(128, seed=2, scale=0.5)
    for causal in (False, True):
        errors = [relative_error(PerformerAttention(causal, D, features=m, seed=3)(q, k, v), full(q, k, v, causal))
                  for m in (8, 64, 1024)]
        assert errors[0] > errors[1] > errors[2] and errors[2] < 0.1, (causal, errors)


def test_linformer_with_identity_projections_is_full_attention():
    q, k, v = qkv(24)
    core = LinformerAttention(max_len=32, rank=24).double()
    with torch.no_grad():
        core.E.copy_(torch.eye(24, 32))
        core.F.copy_(torch.eye(24, 32))
    torch.testing.assert_close(core(q, k, v), full(q, k, v, False))


def test_nystrom_with_a_landmark_per_token_is_full_attention_and_fewer_landmarks_approximate_it():
    q, k, v = qkv(64, seed=5, scale=0.5)
    exact = full(q, k, v, False)
    torch.testing.assert_close(NystromAttention(64, iterations=30)(q, k, v), exact, atol=1e-6, rtol=1e-5)
    errors = [relative_error(NystromAttention(m)(q, k, v), exact) for m in (4, 16, 32)]
    assert errors[0] > errors[1] > errors[2]


CORES = {
    "window": lambda causal: SparseAttention(causal, window=8, n_global=2),
    "bigbird": lambda causal: SparseAttention(causal, window=8, n_global=2, random_blocks=2, block=8),
    "lsh": lambda causal: LSHAttention(causal, D, bucket_size=8, n_hashes=2),
    "performer": lambda causal: PerformerAttention(causal, D, features=32),
    "linformer": lambda causal: LinformerAttention(max_len=64, rank=16).double(),
    "nystrom": lambda causal: NystromAttention(8),
}


@pytest.mark.parametrize("method", ["window", "bigbird", "lsh", "performer"])
def test_no_causal_core_reads_the_future(method):
    q, k, v = (t.requires_grad_() for t in qkv(48))
    out = CORES[method](True)(q, k, v)
    out[:, :, 20].sum().backward()
    for name, grad in (("q", q.grad), ("k", k.grad), ("v", v.grad)):
        if grad is not None:
            assert grad[:, :, 21:].abs().max() == 0, name
    assert q.grad[:, :, 20].abs().max() > 0


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("method", list(CORES))
def test_what_sits_at_padded_positions_changes_no_real_output(method, causal):
    if causal and method in ("linformer", "nystrom"):
        return
    q, k, v = qkv(48)
    padding = torch.ones(B, 48, dtype=torch.bool)
    padding[0, 30:] = padding[1, :7] = False  # right and left padding
    noise = qkv(48, seed=9, scale=10.0)
    changed = [torch.where(padding[:, None, :, None], t, n) for t, n in zip((q, k, v), noise)]
    core = CORES[method](causal)
    before, after = core(q, k, v, padding), core(*changed, padding)
    assert before.isfinite().all() and after.isfinite().all()
    real = padding[:, None, :, None].expand_as(before)
    torch.testing.assert_close(before[real], after[real])


def test_methods_without_a_causal_form_are_refused_in_one_line():
    for method in ("linformer", "nystrom"):
        with pytest.raises(LmlabError, match=f"--attention {method} .* no causal form"):
            check_causal_attention(method)
        with pytest.raises(LmlabError, match="no causal form"):
            preset("gpt2-tiny").replace(attention=method)


@pytest.mark.parametrize("method", ["window", "bigbird", "performer"])
def test_decoding_from_a_kv_cache_gives_the_full_pass_logits(method):
    cfg = preset("llama-tiny", vocab_size=64, context_length=64).replace(attention=method, attention_window=8,
                                                                         attention_rank=32)
    torch.manual_seed(0)
    model = build_decoder(cfg).double().eval()
    ids = torch.randint(64, (2, 40))
    with torch.no_grad():
        expected = model(ids)
        cache = KVCache(cfg.n_layers, 2, cfg.n_kv_heads, cfg.head_dim, 64, torch.float64)
        steps = [model(ids[:, :24], kv_cache=cache)] + [model(ids[:, t:t + 1], kv_cache=cache) for t in range(24, 40)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected)


def test_attention_maps_are_refused_in_one_line_for_an_efficient_method():
    model = build_decoder(preset("gpt2-tiny", vocab_size=64, context_length=64).replace(attention="window"))
    model.blocks[0].attention.need_weights = True
    with pytest.raises(LmlabError, match="never forms the attention map"):
        model(torch.randint(64, (1, 10)))


def test_lsh_refuses_kv_cache_decoding_in_one_line():
    cfg = preset("gpt2-tiny", vocab_size=64, context_length=64).replace(attention="lsh", attention_window=8)
    model = build_decoder(cfg).eval()
    cache = KVCache(cfg.n_layers, 1, cfg.n_heads, cfg.head_dim, 64)
    model(torch.randint(64, (1, 10)), kv_cache=cache)
    with pytest.raises(LmlabError, match="no step-by-step decoding"):
        model(torch.randint(64, (1, 1)), kv_cache=cache)


def test_the_attention_method_is_saved_with_the_model_and_transformers_cannot_mistake_it(tmp_path):
    cfg = preset("gpt2-tiny", vocab_size=64, context_length=64).replace(attention="bigbird", attention_window=8,
                                                                        attention_random=1)
    model = build_decoder(cfg).eval()
    save_hf_dir(model, tmp_path)
    loaded = load_hf_dir(tmp_path).eval()
    assert loaded.config == cfg and "model_type" not in (tmp_path / "config.json").read_text()
    ids = torch.randint(64, (1, 50))
    torch.testing.assert_close(loaded(ids), model(ids))
    assert attention_core(cfg, causal=True, layer=1).random_key_blocks(7, 7).tolist() == \
        loaded.blocks[1].attention.core.random_key_blocks(7, 7).tolist()


@pytest.mark.parametrize("method", ["linformer", "nystrom", "bigbird"])
def test_an_encoder_runs_each_sequence_unpadded_and_keeps_its_method_on_disk(tmp_path, method):
    cfg = preset("bert-tiny", vocab_size=100).replace(attention=method, attention_window=8, attention_rank=16)
    model = build(cfg).eval()
    ids = torch.randint(5, 100, (2, 40))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 25:] = 0
    batch = model(ids, attention_mask=mask)
    alone = model(ids[1:, :25])
    torch.testing.assert_close(batch[1, :25], alone[0], atol=1e-5, rtol=1e-5)  # padding changes nothing
    save_hf_encoder_dir(model, tmp_path)
    assert "model_type" not in (tmp_path / "config.json").read_text()  # transformers refuses, lmlab reads
    loaded = load_hf_encoder_dir(tmp_path)
    assert loaded.config == cfg
    torch.testing.assert_close(loaded(ids, attention_mask=mask), batch)
    loaded.blocks[0].attention.need_weights = True
    with pytest.raises(LmlabError, match="never forms the attention map"):
        loaded(ids, attention_mask=mask)
