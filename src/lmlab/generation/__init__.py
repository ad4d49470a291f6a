"""Decoding: greedy, sampling, beam search, batches, streaming, stop rules (see generate.py)."""

from lmlab.generation.config import GenerationConfig
from lmlab.generation.generate import generate, generate_batch, stream_text
from lmlab.generation.output import Generation

__all__ = ["Generation", "GenerationConfig", "generate", "generate_batch", "stream_text"]
