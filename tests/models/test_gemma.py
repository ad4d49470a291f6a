"""Gemma 2 and Gemma 3 (text) beyond the shared parity tests (test_parity_families.py): directories that
transformers itself saved (Gemma 3's RoPE per layer type) and the older config keys load with the same
config and logits; what neither transformers class computes is refused in one line; and a Gemma
trained by lmlab is saved in a form transformers computes the same."""

import json
import re

import pytest
import torch

import lmlab
from conftest import lmlab as cli
from hf_models import FAMILY_PRESET, FAMILY_TINY, hf_model
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.errors import LmlabError
from lmlab.models.decoder_files import load_hf_dir, read_hf_config, save_hf_dir
from lmlab.models.presets import preset
from lmlab.models.registry import build, family

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity


def tiny(name: str):
    return preset(FAMILY_PRESET[name], **FAMILY_TINY[name])


@pytest.mark.parametrize("name", ["gemma2", "gemma2-untied", "gemma3", "gemma3-linear-rope"])
def test_a_directory_transformers_saved_loads_with_its_config_and_logits(name, tmp_path):
    cfg = tiny(name)
    reference = hf_model(cfg)
    reference.save_pretrained(tmp_path)  # transformers 5's keys: Gemma 3's rope_parameters per layer type
    assert "lmlab" not in json.loads((tmp_path / "config.json").read_text())
    assert read_hf_config(tmp_path) == cfg
    ids = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (load_hf_dir(tmp_path)(ids) - reference(ids).logits).abs().max().item() <= 1e-4


def test_a_bfloat16_directory_loads_as_transformers_computes_it_in_float32(tmp_path):
    cfg = tiny("gemma3")
    reference = hf_model(cfg)
    with torch.no_grad():  # norm weights w far from 0, where 1 + w rounded to bf16 loses most of w
        for name, p in reference.named_parameters():
            p.mul_(3 if "norm" in name else 1)
    reference.to(torch.bfloat16).save_pretrained(tmp_path)  # as Gemma is published
    upcast = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32,
                                                               attn_implementation="eager")
    ids = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert (load_hf_dir(tmp_path)(ids) - upcast.eval()(ids).logits).abs().max().item() <= 1e-4


def test_gemma3s_older_keys_read_as_transformers_reads_them():
    old = {"model_type": "gemma3_text", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 40,
           "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "max_position_embeddings": 64, "sliding_window": 8, "sliding_window_pattern": 3,
           "rope_theta": 50000.0, "rope_local_base_freq": 500.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    cfg = family("gemma3_text").config_from_hf(old)
    assert [cfg.layer_window(i) for i in range(6)] == [8, 8, None, 8, 8, None]
    assert (cfg.rope_base, cfg.rope_local_base, cfg.rope_scaling, cfg.rope_factor) == (50000.0, 500.0, "linear", 8.0)
    assert (cfg.attention_scale, cfg.scale_embeddings, cfg.logit_softcap) == (256 ** -0.5, True, None)
    new = transformers.Gemma3TextConfig(**{k: v for k, v in old.items() if k != "model_type"}).to_dict()
    assert set(new["rope_parameters"]) == {"full_attention", "sliding_attention"}
    assert family("gemma3_text").config_from_hf(new) == cfg
    defaults = {k: v for k, v in old.items() if not k.startswith(("rope", "sliding_window_"))}
    cfg = family("gemma3_text").config_from_hf(defaults)  # transformers' defaults: 1e6 and 1e4, every sixth global
    assert (cfg.rope_base, cfg.rope_local_base, cfg.global_every) == (1e6, 1e4, 6)


def test_gemma2_without_layer_types_alternates_local_and_global_layers_from_the_first_and_takes_hfs_defaults():
    hf = {"model_type": "gemma2", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 3,
          "num_attention_heads": 8, "max_position_embeddings": 64, "sliding_window": 8}
    cfg = family("gemma2").config_from_hf(hf)
    assert [cfg.layer_window(i) for i in range(3)] == [8, None, 8]
    assert (cfg.n_kv_heads, cfg.head_dim, cfg.attention_softcap, cfg.logit_softcap, cfg.tie_embeddings) == (
        4, 256, 50.0, 30.0, True)  # transformers' defaults
    assert family("gemma2").config_from_hf(hf | {"final_logit_softcapping": None}).logit_softcap is None


GEMMA2 = {"model_type": "gemma2", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 40,
          "num_hidden_layers": 4, "num_attention_heads": 4, "head_dim": 8, "max_position_embeddings": 64}
GEMMA3 = GEMMA2 | {"model_type": "gemma3_text"}
LOCAL, GLOBAL = "sliding_attention", "full_attention"


@pytest.mark.parametrize("hf,message", [
    (GEMMA2 | {"hidden_activation": "gelu"}, "hidden_activation='gelu', but lmlab's gemma2 computes"),
    (GEMMA2 | {"attention_bias": True}, "attention_bias=True"),
    (GEMMA3 | {"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
    (GEMMA2 | {"layer_types": [GLOBAL, LOCAL, LOCAL, GLOBAL]}, "makes layer 1 'sliding_attention', off the pattern"),
    (GEMMA3 | {"layer_types": [LOCAL, GLOBAL]}, "for each of the 4 layers"),
    (GEMMA2 | {"sliding_window": None}, "sliding_window is null"),
    (GEMMA2 | {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "RoPE scaling 'dynamic' is not supported"),
    (GEMMA3 | {"rope_parameters": {LOCAL: {"rope_type": "linear", "factor": 2.0}, GLOBAL: {}}},
     "scales the RoPE of the sliding_attention layers"),
    (GEMMA3 | {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "rope_parameters must map"),
    ({"model_type": "gemma3", "text_config": GEMMA3}, "image-text model"),
], ids=["activation", "attention-bias", "bidirectional", "layer-pattern", "layer-count", "no-window",
        "rope-type", "scaled-local-rope", "flat-rope-parameters", "multimodal"])
def test_what_transformers_computes_otherwise_is_refused_in_one_line(hf, message, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(LmlabError, match=re.escape(message)) as refused:
        read_hf_config(tmp_path)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name,changes,flag", [
    ("gemma2-tiny", dict(attention_scale=0.07), "--attention-scale 0.07"),  # not query_pre_attn_scalar ** -0.5
    ("gemma2-tiny", dict(qk_norm="head"), "--qk-norm head"),
    ("gemma3-tiny", dict(attention_softcap=50.0), "--attention-softcap 50.0"),
    ("gemma2-tiny", dict(norm_placement="pre"), "--norm-placement pre"),
])
def test_a_config_transformers_would_compute_otherwise_is_not_saved(name, changes, flag, tmp_path):
    model = build(preset(name).replace(**changes))
    with pytest.raises(LmlabError, match=re.escape(flag)):
        save_hf_dir(model, tmp_path / "model")
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("name,changes", [
    ("gemma2-tiny", dict(d_model=96)),  # the embedding scale follows d_model
    ("gemma2-tiny", dict(attention_scale=None)),  # 1 / sqrt(head size): query_pre_attn_scalar = head size
    ("gemma3-tiny", dict(rope_local_base=None)),  # the local layers share the global base
])
def test_a_config_transformers_computes_the_same_saves_and_loads_back(name, changes, tmp_path):
    model = build(preset(name).replace(**changes)).eval()
    save_hf_dir(model, tmp_path / "model")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "model", attn_implementation="eager")
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (reloaded.eval()(ids).logits - model(ids)).abs().max().item() <= 1e-4


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", ["gemma2-tiny", "gemma3-tiny"])
def test_a_gemma_trained_by_lmlab_is_saved_as_transformers_computes_it(name, corpus_file, tmp_path):
    train = TrainConfig(loop=LoopConfig(max_steps=2, batch_size=4, eval_every=2, checkpoint_every=2, log_every=1),
                        block_size=16, optim=OptimConfig(lr=1e-2, warmup_steps=1), eval_batches=1)
    cfg = preset(name, vocab_size=300, context_length=32)
    result = lmlab.train(cfg, train, str(corpus_file), tmp_path / "run", show_progress=False)
    model = load_hf_dir(result.model_dir)
    assert any((p - 1).abs().max() > 1e-3 for n, p in model.named_parameters() if "norm" in n)  # (1 + w) trained
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(result.model_dir, attn_implementation="eager")
    ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (reloaded.eval()(ids).logits - model(ids)).abs().max().item() <= 1e-4
    save_hf_dir(model, tmp_path / "again")
    assert load_hf_dir(tmp_path / "again").config == model.config == cfg.replace(trained_context=16)


def test_lmlab_list_shows_both_families_with_the_model_type_they_save(capsys):
    assert cli("list", "--families") == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["gemma2"].split()[:3] == ["gemma2", "decoder", "gemma2"] and "gemma-2-2b" in rows["gemma2"]
    assert rows["gemma3"].split()[:3] == ["gemma3", "decoder", "gemma3_text"] and "gemma-3-1b" in rows["gemma3"]
