"""The one convention every objective, loss, head and batch shares about targets."""

IGNORE_INDEX = -100  # a target no loss counts (padding, prompt tokens, sub-tokens after a word's first): PyTorch's default
