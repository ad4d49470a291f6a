"""What the commands of every family share: the flag vocabulary (`vocabulary`), a config dataclass as
flags (`config_flags`), `--dtype` (`model_dtype`) and the rule that a command never writes what it reads
(`output_paths`)."""
