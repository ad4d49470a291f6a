"""Encoder-decoder generation: the cached loop gives the tokens of re-running the whole model, a padded
batch gives what each source gets alone, beam search finds the best sequence, n-grams never repeat,
seeds reproduce, and bad input is one clear line."""

import itertools

import pytest
import torch

from lmlab.errors import LmlabError
from lmlab.generation import GenerationConfig
from lmlab.generation.beam import beam_steps
from lmlab.generation.encoder_decoder import generate_encoder_decoder
from lmlab.generation.history import History
from lmlab.models.decoder import build_decoder
from lmlab.models.encoder_decoder.build import build_encoder_decoder
from lmlab.models.presets import preset

FAMILIES = ["transformer-tiny", "t5-tiny", "bart-tiny"]


def tiny(name: str, vocab_size: int = 40):
    """A small random model whose weights are large enough to give varied, confident outputs (the
    shared embedding smaller, or its tied logits make every model repeat its last token)."""
    torch.manual_seed(0)
    cfg = preset(name, vocab_size=vocab_size, d_model=32, d_ff=64, max_source_length=16,
                                 max_target_length=12)
    model = build_encoder_decoder(cfg).eval()
    torch.manual_seed(0)  # the weights below do not depend on how the builder initialises
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
        model.shared.weight /= cfg.d_model ** 0.5
    return model


def sources():
    """Three sources of lengths 7, 4 and 6, right-padded to (3, 7), and their mask."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 40, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 6:] = 0
    return ids, mask


def eos_of(model, ids, mask):
    """A stop token that greedy decoding of some source first produces at its 3rd step or later
    (so stopping mid-way is tested)."""
    free = generate_encoder_decoder(model, ids, mask, GenerationConfig(max_new_tokens=8, eos_id=-1))
    return next(t for out in free for i, t in enumerate(out) if i >= 2 and t not in out[:i])


@torch.no_grad()
def naive_logits(model, ids, mask, prefixes: torch.Tensor) -> torch.Tensor:
    """The last position's logits (R, V) from the full teacher-forced pass: no caches at all."""
    return model(ids, mask, prefixes)[:, -1].float()


def naive_greedy(model, ids, mask, n: int, eos: int) -> list[list[int]]:
    """Re-run the whole model for every new token of every source, one source at a time."""
    outputs = []
    for row in range(ids.size(0)):
        src = ids[row:row + 1, :int(mask[row].sum())]
        prefix = [model.config.decoder_start_id]
        while len(prefix) <= n:
            token = naive_logits(model, src, None, torch.tensor([prefix])).argmax().item()
            if token == eos:
                break
            prefix.append(token)
        outputs.append(prefix[1:])
    return outputs


def naive_beam(model, ids, mask, config: GenerationConfig, n: int):
    """Beam search through the same beam rules, each step re-running the full model on every prefix."""
    K = config.num_beams
    ids, mask = ids.repeat_interleave(K, 0), mask.repeat_interleave(K, 0)
    prefixes = torch.full((ids.size(0), 1), model.config.decoder_start_id)
    state = {"prefixes": prefixes}

    def advance(new_token, rows):
        state["prefixes"] = torch.cat([state["prefixes"][rows], new_token[:, None]], dim=1)
        return naive_logits(model, ids, mask, state["prefixes"])

    logits = naive_logits(model, ids, mask, prefixes)
    return beam_steps(logits, advance, History(prefixes, None, logits.size(-1), config), config, K, n)


@pytest.mark.parametrize("name", FAMILIES)
def test_cached_greedy_gives_the_tokens_of_rerunning_the_full_model(name):
    model = tiny(name)
    ids, mask = sources()
    eos = eos_of(model, ids, mask)
    expected = naive_greedy(model, ids, mask, 9, eos)
    assert any(0 < len(out) < 9 for out in expected)  # a stop token was produced and cut
    assert generate_encoder_decoder(model, ids, mask, GenerationConfig(max_new_tokens=9, eos_id=eos)) == expected


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("settings", [dict(num_beams=3), dict(num_beams=4, length_penalty=2.0, early_stopping=True),
                                      dict(num_beams=2, no_repeat_ngram_size=2)])
def test_cached_beam_search_gives_the_tokens_of_rerunning_the_full_model(name, settings):
    model = tiny(name)
    ids, mask = sources()
    config = GenerationConfig(max_new_tokens=8, eos_id=eos_of(model, ids, mask), **settings)
    expected = [g.token_ids for g in naive_beam(model, ids, mask, config, 8)]
    assert generate_encoder_decoder(model, ids, mask, config) == expected


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("beams", [1, 3])
def test_a_padded_batch_gives_what_each_source_gets_alone(name, beams):
    model = tiny(name)
    ids, mask = sources()
    config = GenerationConfig(max_new_tokens=8, num_beams=beams, eos_id=eos_of(model, ids, mask))
    alone = [generate_encoder_decoder(model, ids[i:i + 1, :int(mask[i].sum())], None, config)[0] for i in range(3)]
    assert generate_encoder_decoder(model, ids, mask, config) == alone


def test_beam_search_with_one_beam_is_greedy():
    model = tiny("t5-tiny")
    ids, mask = sources()
    eos = eos_of(model, ids, mask)
    one_beam = GenerationConfig(max_new_tokens=8, eos_id=eos, early_stopping=True)  # K=1: the first end wins
    expected = generate_encoder_decoder(model, ids, mask, GenerationConfig(max_new_tokens=8, eos_id=eos))
    assert [g.token_ids for g in naive_beam(model, ids, mask, one_beam, 8)] == expected


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.5])
def test_beam_search_finds_the_best_sequence_of_an_exhaustive_search(length_penalty):
    model = tiny("bart-tiny", vocab_size=4)  # tokens 0..3, 2 = </s>
    ids, mask = torch.tensor([[3, 0, 3, 3, 0]]), None
    n, eos = 3, model.config.eos_id
    candidates = [seq[:seq.index(eos) + 1] if eos in seq else seq for seq in itertools.product(range(4), repeat=n)]

    def score(seq) -> float:
        prefix = torch.tensor([[model.config.decoder_start_id, *seq[:-1]]])
        with torch.no_grad():
            logprobs = model(ids, mask, prefix)[0].log_softmax(-1)
        return logprobs.gather(1, torch.tensor(seq)[:, None]).sum().item() / len(seq) ** length_penalty

    best = max(set(candidates), key=score)
    config = GenerationConfig(max_new_tokens=n, num_beams=64, length_penalty=length_penalty)  # 64 = 4**3: all kept
    expected = list(best[:-1] if best[-1] == eos else best)
    assert generate_encoder_decoder(model, ids, mask, config) == [expected]
    greedy = generate_encoder_decoder(model, ids, mask, GenerationConfig(max_new_tokens=n))[0]
    assert score(tuple(greedy) + ((eos,) if len(greedy) < n else ())) <= score(best) + 1e-6


@pytest.mark.parametrize("beams", [1, 3])
def test_no_repeat_ngram_size_2_never_repeats_a_bigram(beams):
    model = tiny("t5-tiny")
    ids, mask = sources()
    start = model.config.decoder_start_id
    for config in (GenerationConfig(max_new_tokens=11, num_beams=beams, eos_id=-1),
                   GenerationConfig(max_new_tokens=11, num_beams=beams, eos_id=-1, no_repeat_ngram_size=2)):
        outputs = [[start, *out] for out in generate_encoder_decoder(model, ids, mask, config)]
        repeats = [len(out) - 1 - len(set(zip(out, out[1:]))) for out in outputs]
        if config.no_repeat_ngram_size:
            assert repeats == [0, 0, 0]
        else:
            assert any(repeats)  # without the rule this model does repeat, so the check above can fail


def test_sampling_with_a_seed_is_reproducible_and_seeds_differ():
    model = tiny("bart-tiny")
    ids, mask = sources()

    def sample(seed):
        config = GenerationConfig(max_new_tokens=10, temperature=2.0, top_k=20, top_p=0.95, seed=seed, eos_id=-1)
        return generate_encoder_decoder(model, ids, mask, config)

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_bad_input_is_one_clear_line():
    model = tiny("t5-tiny")
    ids, mask = sources()
    config = GenerationConfig(max_new_tokens=4)
    decoder_only = build_decoder(preset("gpt2-tiny", vocab_size=40, n_layers=1, d_model=32, n_heads=2, d_ff=64))
    cases = [
        (lambda: generate_encoder_decoder(decoder_only, ids, mask, config), "needs an encoder-decoder model"),
        (lambda: generate_encoder_decoder(model, ids, mask[:, :5], config), "attention_mask has shape"),
        (lambda: generate_encoder_decoder(model, ids, mask * 0, config), "source 0 has no real token"),
        (lambda: generate_encoder_decoder(model, ids[0], None, config), "input_ids must be a non-empty"),
        (lambda: generate_encoder_decoder(model, torch.ones(1, 17, dtype=torch.long), None, config), "at most 16"),
        (lambda: GenerationConfig(no_repeat_ngram_size=-2), "--no-repeat-ngram-size -2 must be at least 0"),
    ]
    for call, message in cases:
        with pytest.raises(LmlabError, match=message) as error:
            call()
        assert "\n" not in str(error.value)


def test_outputs_stop_at_the_model_s_longest_target():
    model = tiny("transformer-tiny")
    ids, mask = sources()
    outputs = generate_encoder_decoder(model, ids, mask, GenerationConfig(max_new_tokens=50, eos_id=-1))
    assert [len(out) for out in outputs] == [model.config.max_target_length] * 3


HF_SETTINGS = {
    "greedy": dict(),
    "greedy-no-repeat-trigram": dict(no_repeat_ngram_size=3),
    "beams": dict(num_beams=3),
    "beams-long-early": dict(num_beams=4, length_penalty=2.0, early_stopping=True),
    "beams-short-no-repeat-bigram": dict(num_beams=3, length_penalty=-0.5, no_repeat_ngram_size=2),
}


def hf_bart_and_ours():
    """A tiny random HF BART and the lmlab model holding its weights (a name map local to this test)."""
    transformers = pytest.importorskip("transformers")
    cfg = preset("bart-tiny", vocab_size=40, d_model=32, d_ff=64, n_heads=4, max_source_length=16,
                                 max_target_length=12, tie_embeddings=False)  # tied, random BART repeats itself
    torch.manual_seed(0)
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=40, max_position_embeddings=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0,
        forced_eos_token_id=None, tie_word_embeddings=False)).eval()
    with torch.no_grad():  # as in `tiny`: weights that give varied outputs
        for p in hf.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
        hf.model.shared.weight /= cfg.d_model ** 0.5
        for stack in (hf.model.encoder, hf.model.decoder):  # untied from the head, HF also unties these
            stack.embed_tokens.weight.copy_(hf.model.shared.weight)
        hf.final_logits_bias.normal_()
    h = hf.state_dict()
    ours = {"shared.weight": h["model.shared.weight"], "lm_head.weight": h["lm_head.weight"],
            "logits_bias": h["final_logits_bias"][0]}
    for stack in ("encoder", "decoder"):
        hf_names = {"embeddings.norm": "layernorm_embedding"}
        for i in range(2):
            block, hf_block = f"blocks.{i}", f"layers.{i}"
            self_attention = "attention" if stack == "encoder" else "self_attention"
            hf_names.update({f"{block}.{self_attention}.out": f"{hf_block}.self_attn.out_proj",
                             f"{block}.feed_forward.up": f"{hf_block}.fc1", f"{block}.feed_forward.down": f"{hf_block}.fc2",
                             f"{block}.norm1": f"{hf_block}.self_attn_layer_norm"})
            if stack == "encoder":
                hf_names[f"{block}.norm2"] = f"{hf_block}.final_layer_norm"
            else:
                hf_names.update({f"{block}.cross_attention.q": f"{hf_block}.encoder_attn.q_proj",
                                 f"{block}.cross_attention.out": f"{hf_block}.encoder_attn.out_proj",
                                 f"{block}.norm2": f"{hf_block}.encoder_attn_layer_norm",
                                 f"{block}.norm3": f"{hf_block}.final_layer_norm"})
            for kind in ("weight", "bias"):
                qkv = [h[f"model.{stack}.{hf_block}.self_attn.{p}_proj.{kind}"] for p in "qkv"]
                ours[f"{stack}.{block}.{self_attention}.qkv.{kind}"] = torch.cat(qkv)
                if stack == "decoder":
                    kv = [h[f"model.{stack}.{hf_block}.encoder_attn.{p}_proj.{kind}"] for p in "kv"]
                    ours[f"{stack}.{block}.cross_attention.kv.{kind}"] = torch.cat(kv)
        for name, hf_name in hf_names.items():
            for kind in ("weight", "bias"):
                ours[f"{stack}.{name}.{kind}"] = h[f"model.{stack}.{hf_name}.{kind}"]
        ours[f"{stack}.embeddings.token_embedding.weight"] = h["model.shared.weight"]
        rows = getattr(cfg, f"max_{'source' if stack == 'encoder' else 'target'}_length")
        ours[f"{stack}.embeddings.positions.table.weight"] = h[f"model.{stack}.embed_positions.weight"][2:2 + rows]
    model = build_encoder_decoder(cfg).eval()
    model.load_state_dict(ours)
    return hf, model


@pytest.mark.parity
@pytest.mark.parametrize("setting", HF_SETTINGS)
def test_greedy_and_beam_search_match_hf_bart_generate(setting):
    hf, model = hf_bart_and_ours()
    ids, mask = sources()
    ids = ids.masked_fill(mask == 0, model.config.pad_id)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, ids[:, :5]), hf(input_ids=ids, attention_mask=mask,
                                                                     decoder_input_ids=ids[:, :5]).logits,
                                   atol=1e-4, rtol=1e-4)
    eos = eos_of(model, ids, mask)

    def hf_generate(eos_id):
        with torch.no_grad():
            out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=9, do_sample=False, eos_token_id=eos_id,
                              pad_token_id=model.config.pad_id, **HF_SETTINGS[setting])[:, 1:].tolist()
        return [row[:row.index(eos_id)] if eos_id in row else row for row in out]

    expected = hf_generate(eos)
    assert any(len(row) < 9 for row in expected)  # some row did stop
    config = GenerationConfig(max_new_tokens=9, eos_id=eos, **HF_SETTINGS[setting])
    assert generate_encoder_decoder(model, ids, mask, config) == expected
