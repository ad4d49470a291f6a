"""`lmlab export`: a LoRA run merged into a GGUF file lmlab reads back with the run's logits, its adapter alone as
llama.cpp's --lora file (llama-cpp-python applies it with lmlab's logits), an HF directory, the adapter in the
PEFT format, an Ollama Modelfile; what cannot be exported is one line and writes nothing."""

import json

import pytest
import torch

import lmlab
from conftest import lmlab as run_lmlab
from conftest import one_line_error
from gguf_files import CHATML, IDS, TEXTS
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.models.decoder import build_decoder
from lmlab.models.peft_files import base_fingerprint, load_peft, save_peft
from lmlab.models.presets import preset
from lmlab.models.tuned_files import save_model_dir
from lmlab.modules.peft import apply_lora
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.text import TextTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")
LORA = {"rank": 2, "alpha": 6.0, "targets": ["qkv", "down"]}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """A tiny random Llama (odd shapes: 3 heads of 16, one key/value head) with a chat tokenizer, as an HF directory."""
    backend = train_bpe(TEXTS * 20, 300)
    ids = special_token_ids(backend)
    tokenizer = TextTokenizer(backend, ids["bos"], ids["eos"], ids["pad"], (ids["eos"],), CHATML)
    torch.manual_seed(0)
    model = build_decoder(preset("llama-tiny", vocab_size=300, context_length=64, n_layers=2, n_heads=3,
                                 n_kv_heads=1, d_model=48, d_ff=80, tie_embeddings=False)).eval()
    return save_model_dir(model, tokenizer, tmp_path_factory.mktemp("base") / "llama")


def tuned(base_dir):
    """The base with the run's LoRA (its B random, so it changes the logits)."""
    model, _ = lmlab.load(base_dir)
    torch.manual_seed(1)  # A's draw
    apply_lora(model, **LORA)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def lora_run(base_dir, tmp_path_factory):
    """A run directory as a LoRA fine-tuning run without a merged model leaves it: adapter/ and run.json."""
    out = tmp_path_factory.mktemp("runs") / "sft"
    model = tuned(base_dir)
    save_peft(model, out / "adapter", "lora", LORA, base_fingerprint(model))
    (out / "run.json").write_text(json.dumps({"recipe": "sft", "base_model": str(base_dir), "peft_method": "lora",
                                              "peft_settings": LORA, "base_fingerprint": base_fingerprint(model)}))
    return out


def logits(model):
    with torch.no_grad():
        return model(IDS % 300)


def test_a_lora_run_exports_merged_as_gguf_with_a_modelfile(base_dir, lora_run, tmp_path, capsys):
    out = tmp_path / "sft.gguf"
    assert run_lmlab("export", "--model", lora_run, "--to", "gguf", "--dtype", "f32", "--out", out,
                     "--modelfile") == 0
    read, tokenizer = lmlab.load(out)
    torch.testing.assert_close(logits(read), logits(tuned(base_dir)), atol=1e-5, rtol=0)
    assert tokenizer.chat_template == CHATML
    modelfile = (tmp_path / "Modelfile").read_text()
    assert modelfile.startswith("FROM ./sft.gguf\nTEMPLATE \"\"\"{{ range .Messages }}")
    assert '{{ else if eq .Role "user" }}<|bos|>user\n{{ .Content }}<|eos|>\n' in modelfile
    assert modelfile.endswith('{{ end }}{{ end }}<|bos|>assistant\n"""\nPARAMETER stop "<|eos|>"\n')
    assert "GGUF (f32" in capsys.readouterr().out


@pytest.mark.parity
def test_the_lora_adapter_runs_in_llama_cpp_on_the_base_gguf(base_dir, lora_run, tmp_path):
    base, adapter = tmp_path / "base.gguf", tmp_path / "lora.gguf"
    assert run_lmlab("export", "--model", base_dir, "--to", "gguf", "--dtype", "f32", "--out", base) == 0
    assert run_lmlab("export", "--model", lora_run, "--to", "gguf", "--lora-adapter", "--out", adapter) == 0
    llama_cpp = llama_cpp_module()
    f32 = llama_cpp.GGML_TYPE_F32
    reference = llama_cpp.Llama(str(base), lora_path=str(adapter), n_ctx=64, logits_all=True, verbose=False,
                                n_threads=1, type_k=f32, type_v=f32)
    prompt = (IDS[0] % 300).tolist()
    reference.eval(prompt)
    theirs = torch.from_numpy(reference.scores[:len(prompt)].copy())
    reference.close()
    torch.testing.assert_close(theirs, logits(tuned(base_dir))[0], atol=1e-4, rtol=0)


@pytest.mark.parity
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft's call
def test_peft_loads_the_exported_adapter_with_lmlabs_logits(base_dir, lora_run, tmp_path):
    peft, transformers = pytest.importorskip("peft"), pytest.importorskip("transformers")
    assert run_lmlab("export", "--model", lora_run, "--to", "peft", "--out", tmp_path / "peft") == 0
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager")
    reference = peft.PeftModel.from_pretrained(base, tmp_path / "peft").eval()
    with torch.no_grad():
        theirs = reference(IDS % 300).logits
    torch.testing.assert_close(theirs, logits(tuned(base_dir)), atol=1e-4, rtol=0)


def test_hf_and_peft_exports_give_the_runs_logits(base_dir, lora_run, tmp_path):
    assert run_lmlab("export", "--model", lora_run, "--to", "hf", "--out", tmp_path / "hf") == 0
    torch.testing.assert_close(logits(lmlab.load(tmp_path / "hf")[0]), logits(tuned(base_dir)), atol=1e-5, rtol=0)
    assert run_lmlab("export", "--model", lora_run, "--to", "peft", "--out", tmp_path / "peft") == 0
    assert json.loads((tmp_path / "peft" / "adapter_config.json").read_text())["peft_type"] == "LORA"
    adapted = load_peft(lmlab.load(base_dir)[0], tmp_path / "peft").eval()
    torch.testing.assert_close(logits(adapted), logits(tuned(base_dir)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("args, fragments", [
    (["--to", "gguf"], ["a gpt2 model has no GGUF architecture lmlab writes", "--to hf"]),
    (["--to", "peft"], ["holds no adapter"]),
    (["--to", "hf", "--dtype", "f16"], ["--dtype is a setting of --to gguf"]),
])
def test_what_cannot_be_exported_is_one_line_and_nothing_is_written(decoder_dir, tmp_path, capsys, args, fragments):
    assert run_lmlab("export", "--model", decoder_dir, "--out", tmp_path / "out", *args) == 2
    one_line_error(capsys, *fragments)
    assert not list(tmp_path.iterdir())


def test_lmlabs_quantized_weights_are_refused(base_dir, tmp_path, capsys):
    assert run_lmlab("quantize", "--model", base_dir, "--to", "int8", "--out", tmp_path / "int8") == 0
    capsys.readouterr()
    assert run_lmlab("export", "--model", tmp_path / "int8", "--to", "gguf", "--out", tmp_path / "q.gguf") == 2
    one_line_error(capsys, "int8 / int4 weights", "--dtype q8_0")
    assert not (tmp_path / "q.gguf").exists()


def test_an_out_directory_lmlab_did_not_write_is_refused(base_dir, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert run_lmlab("export", "--model", base_dir, "--to", "hf", "--out", tmp_path / "mine") == 2
    one_line_error(capsys, "--out")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
