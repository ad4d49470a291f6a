"""lmlab: build, train, inspect and use every family of language model, from n-grams to RLHF.

The front door for the common paths; each name is the library function a CLI command calls:

    import lmlab
    model, tokenizer = lmlab.load("smollm2-135m-instruct")
    ids = lmlab.generate(model, tokenizer.encode("Once upon a time"), max_new_tokens=20)
    train_cfg = lmlab.TrainConfig(loop=lmlab.LoopConfig(max_steps=300, batch_size=16))
    lmlab.train(lmlab.preset("llama-tiny"), train_cfg, "markov", "runs/m")

Names are imported on first use, so `import lmlab` stays cheap (no torch until a name needs it).
The deep imports (`lmlab.models.load.load`, `lmlab.recipes.sft.sft`, …) remain the same functions.
"""

import warnings
from importlib import import_module

__version__ = "0.1.0"

# name -> the module it lives in
_EXPORTS = {
    # models and their configs
    "load": "lmlab.models.load",
    "load_encoder": "lmlab.models.load",
    "load_encoder_decoder": "lmlab.models.encoder_decoder.files",
    "preset": "lmlab.models.presets",
    "TrainConfig": "lmlab.config",
    "LoopConfig": "lmlab.config",
    # generation
    "generate": "lmlab.generation.generate",
    "generate_batch": "lmlab.generation.generate",
    "stream_text": "lmlab.generation.generate",
    "GenerationConfig": "lmlab.generation.config",
    # training and post-training
    "train": "lmlab.api",
    "finetune_encoder": "lmlab.recipes.finetune_encoder",
    "PostTrainConfig": "lmlab.training.post_train_config",
    "sft": "lmlab.recipes.sft",
    "reward": "lmlab.recipes.reward",
    "ppo": "lmlab.recipes.ppo",
    "dpo": "lmlab.recipes.dpo",
    "kto": "lmlab.recipes.kto",
    "grpo": "lmlab.recipes.grpo",
    # evaluation and analysis
    "perplexity": "lmlab.eval.perplexity",
    "evaluate_fewshot": "lmlab.eval.fewshot",
    "attention_maps": "lmlab.inspect.attention",
    "logit_lens": "lmlab.inspect.logit_lens",
}

# old name -> its new name: still works for one release, with a DeprecationWarning
_RENAMED = {"FinetuneConfig": "PostTrainConfig"}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _RENAMED:
        warnings.warn(f"lmlab.{name} is deprecated; use lmlab.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return getattr(import_module(__name__), _RENAMED[name])
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmlab' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
