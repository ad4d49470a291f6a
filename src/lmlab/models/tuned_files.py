"""The files a fine-tuning run of a decoder leaves, written and read back: the whole model, or a PEFT
adapter (for LoRA also the model with it merged), and a reward model's scalar head beside them.

    out/model/                    a full model directory (no PEFT, or LoRA merged): `lmlab.load(out)` reads it
    out/adapter/                  the trained PEFT parameters (`models.peft_files`)
    out/run.json                  the run's settings; "base_model" names what the adapter belongs to
    out/reward_head.safetensors   a reward model's head (`lmlab reward`)
"""

import os
from pathlib import Path

from safetensors.torch import save_file

from lmlab.errors import LmlabError
from lmlab.heads.reward import RewardModel
from lmlab.io.atomic import atomic_path
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.head_files import read_head_state
from lmlab.models.load import load
from lmlab.models.peft_files import save_peft
from lmlab.modules.peft import merge_lora
from lmlab.modules.transformer import TransformerDecoder
from lmlab.tokenizers.text import TextTokenizer

REWARD_HEAD_FILE = "reward_head.safetensors"


def save_model_dir(model: TransformerDecoder, tokenizer: TextTokenizer, directory: Path) -> Path:
    """A Hugging Face layout model directory with the full tokenizer (chat template, stop tokens), atomically."""
    with atomic_path(directory) as tmp:
        save_hf_dir(model, tmp, tokenizer)
    return directory


def save_tuned(model: TransformerDecoder, tokenizer: TextTokenizer, out: Path, method: str, settings: dict,
               fingerprint: str, merge: bool = True, base_name: str | None = None) -> tuple[Path | None, Path | None]:
    """Save a fine-tuned `model` into run directory `out`; returns (model directory or None, adapter
    directory or None).

    Without PEFT (`method` "none"): the whole model, `out/model`. With PEFT: the adapter of `method`
    and `settings` for the base model of `fingerprint`, `out/adapter`, and with LoRA (when `merge`)
    also the model with the adapter merged into its weights, `out/model`, which `lmlab.load(out)`
    and `lmlab generate --model OUT` read. Merging changes `model` in place (it computes the same,
    at base-model speed). `base_name` (a path or hub name) is what peft's adapter_config.json names as the base.
    """
    if method == "none":
        return save_model_dir(model, tokenizer, out / "model"), None
    adapter_dir = save_peft(model, out / "adapter", method, settings, fingerprint, base_name)
    if not (merge and method == "lora"):
        return None, adapter_dir
    try:
        merge_lora(model)
    except LmlabError:  # LoRA on a weight tied to another (the LM head): the adapter alone is the result
        return None, adapter_dir
    return save_model_dir(model, tokenizer, out / "model"), adapter_dir


def load_tuned(out: str | os.PathLike, dtype: str | None = None) -> tuple[TransformerDecoder, TextTokenizer]:
    """The fine-tuned model saved in run directory `out`: its full or merged model when it has one (as
    `dtype`, `lmlab.load`'s), else the base model named in its run.json with the adapter loaded (PEFT
    modules stay in place; fp32 only, the adapter was trained on the fp32 base)."""
    out = Path(out)
    if not (out / "model" / "config.json").is_file() and not (out / "adapter").is_dir():
        raise LmlabError(f"'{out}' holds no finished fine-tuning run (no model/ or adapter/); finish it with --resume")
    return load(out, dtype)


def save_reward_head(reward_model: RewardModel, out: Path) -> Path:
    """Write the reward model's scalar head to out/reward_head.safetensors, atomically (its backbone
    is saved as any tuned model, `save_tuned`)."""
    with atomic_path(out / REWARD_HEAD_FILE) as tmp:
        save_file({name: p.detach().cpu().contiguous() for name, p in reward_model.head.state_dict().items()}, tmp)
    return out / REWARD_HEAD_FILE


def load_reward_model(out: str | os.PathLike) -> tuple[RewardModel, TextTokenizer]:
    """The reward model a `reward` run saved in `out` (its backbone, with the adapter when it has
    one, and its head), in eval mode, with the tokenizer it reads."""
    out = Path(out)
    if not (out / REWARD_HEAD_FILE).is_file():
        raise LmlabError(f"'{out}' holds no reward model ({REWARD_HEAD_FILE} is missing); pass the --out of a "
                         "finished `lmlab reward` run")
    backbone, tokenizer = load_tuned(out)
    reward_model = RewardModel(backbone)
    reward_model.head.load_state_dict(read_head_state(out / REWARD_HEAD_FILE, reward_model.head.state_dict(),
                                                      "pass the --out of the `lmlab reward` run that wrote it"))
    return reward_model.eval(), tokenizer
