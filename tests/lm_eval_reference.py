"""lm-eval's own tasks run as the reference for lmlab's evaluations: a tiny random HF Llama that lm-eval's `hf`
model and lmlab both read, and one of lm-eval's installed task YAMLs pointed at a JSONL of our own."""

import json
from pathlib import Path

import pytest
import torch

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def write_bpe_tokenizer(directory: Path, texts: list[str], vocab_size: int) -> int:
    """A byte-level BPE trained on `texts`, with <|endoftext|> as bos and eos, saved in `directory` as HF saves
    a fast tokenizer; its vocab size."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                             show_progress=False))
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}))
    return tokenizer.get_vocab_size()


def write_hf_llama(directory: Path, texts: list[str], window: int) -> Path:
    """A tiny random HF Llama with a byte-level BPE trained on `texts` (<|endoftext|> as bos and eos), saved
    as HF saves it, with a `window`-token context."""
    transformers = pytest.importorskip("transformers")
    directory.mkdir()
    vocab = write_bpe_tokenizer(directory, texts, 600)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=window, bos_token_id=0, eos_token_id=0,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # large random weights: sentences with clearly different likelihoods
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(directory)
    return directory


def lm_eval_samples(monkeypatch, tmp_path: Path, model_dir: Path, tasks: dict[str, str], split: str,
                    rows: list[dict]) -> dict[str, list[dict]]:
    """Per task, lm-eval's logged samples (in document order) of its installed tasks `tasks` (our name -> the
    YAML's path under lm_eval/tasks/) run by its `hf` model on `model_dir`, their `split` read from `rows`."""
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(lm_eval.evaluator, "add_env_info", lambda results: None)  # pip and GPU queries: seconds
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name, installed in tasks.items():  # lm-eval's own task, its data our local file
        (folder / f"{name}.yaml").write_text(
            f"include: {Path(lm_eval.__file__).parent / 'tasks' / installed}\ntask: {name}\ndataset_path: json\n"
            f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    {split}: {data}\n")
    results = simple_evaluate(model="hf", model_args=f"pretrained={model_dir},dtype=float32,device=cpu",
                              tasks=list(tasks), task_manager=TaskManager(include_path=str(folder),
                                                                          include_defaults=False),
                              log_samples=True, bootstrap_iters=0)
    return {name: sorted(results["samples"][name], key=lambda s: s["doc_id"]) for name in tasks}
