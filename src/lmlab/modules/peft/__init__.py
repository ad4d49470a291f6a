"""Parameter-efficient fine-tuning: freeze a trained model, train a few added parameters.

    apply_peft(model, "lora", rank=8)        # or "adapter", "prefix", "prompt", "none"
    print(describe(model))                   # trainable 0.3M of 135.1M (0.22%)
    optimizer = AdamW(trainable_parameters(model))
    with adapters_disabled(model): ...       # the frozen base model (e.g. DPO's reference)

Adapter files (`save_peft`, `load_peft`, `base_fingerprint`) are in `lmlab.models.peft_files`: a
building block knows nothing of files.

Each method is a drop-in wrapper that can be switched off: lora.py (low-rank updates of linear
layers), adapters.py (bottleneck MLPs after each sublayer), prefix.py (trained keys/values in
every layer), prompt.py (trained input embeddings).
"""

from lmlab.modules.peft.adapters import AdaptedSublayer, Bottleneck, apply_adapters
from lmlab.modules.peft.core import PeftModule, adapters_disabled, freeze_base, peft_parameters
from lmlab.modules.peft.lora import LoRALinear, apply_lora, linear_layers, merge_lora, unmerge_lora
from lmlab.modules.peft.methods import METHODS, applied_method, apply_peft, peft_method
from lmlab.modules.peft.params import count_parameters, describe, trainable_parameters
from lmlab.modules.peft.prefix import PrefixAttention, apply_prefix
from lmlab.modules.peft.prompt import PromptAttention, PromptTuning, apply_prompt_tuning

__all__ = [
    "METHODS", "AdaptedSublayer", "Bottleneck", "LoRALinear", "PeftModule", "PrefixAttention", "PromptAttention",
    "PromptTuning", "adapters_disabled", "apply_adapters", "applied_method", "apply_lora", "apply_peft", "apply_prefix",
    "apply_prompt_tuning", "count_parameters", "describe", "freeze_base", "linear_layers",
    "merge_lora", "peft_method", "peft_parameters", "trainable_parameters",
    "unmerge_lora",
]
