"""The post-training commands of a trained decoder: `lmlab sft`, `lmlab reward`, `lmlab dpo`, `lmlab kto`,
`lmlab ppo` and `lmlab grpo`, one module each, with the flags and the report they share in `common`."""
