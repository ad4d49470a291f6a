"""Position information: learned and sinusoidal tables added to token embeddings, and rotary
embeddings (RoPE) that rotate queries and keys by an angle proportional to their position."""

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import Literal

import torch
from torch import nn

from lmlab.modules.rope_scaling import RopeScaling, scaled_frequencies


class LearnedPositions(nn.Module):
    """A trained vector per position (GPT-2, BERT)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (B, T) or (T,) int -> (…, T, d_model)."""
        return self.table(positions)


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0,
                     layout: Literal["interleaved", "halves"] = "interleaved") -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)); (max_len, d_model).

    layout "halves" puts the same sines in the first half of the columns and the cosines in the
    second (PE[p, i], PE[p, ceil(d/2) + i]), as Marian does. Built on the CPU even inside a
    `torch.device("meta")` block, so a model built on meta for fast loading still has its tables
    (they are computed, not stored in checkpoints)."""
    pos = torch.arange(max_len, dtype=torch.float32, device="cpu")[:, None]
    freq = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float32, device="cpu") / d_model)
    sin, cos = torch.sin(pos * freq), torch.cos(pos * freq[: d_model // 2])  # (max_len, ceil(d/2)), (…, d/2)
    if layout == "halves":
        return torch.cat([sin, cos], dim=1)
    table = torch.zeros(max_len, d_model, device="cpu")
    table[:, 0::2] = sin
    table[:, 1::2] = cos
    return table


class SinusoidalPositions(nn.Module):
    """The fixed sin/cos table of the original Transformer: no weights, any offset is a rotation."""

    def __init__(self, max_len: int, d_model: int, base: float = 10000.0,
                 layout: Literal["interleaved", "halves"] = "interleaved"):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, d_model, base, layout), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


_DEFERRED = contextvars.ContextVar("rotary_tables_deferred", default=False)


@contextlib.contextmanager
def deferred_rotary_tables() -> Iterator[None]:
    """Within the block, a RotaryEmbedding built leaves its cos / sin tables unmade (meta tensors of their
    shape) for the caller to fill, from a file or from `tables()`: a loader that memory-maps the tables
    (`gguf_file.mapped_tables`) then runs no trigonometry, whose code pages would stay resident."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


class RotaryEmbedding(nn.Module):
    """RoPE: pairs of query/key features are rotated by position * base^(-2i/head_dim), so the
    score q_m . k_n depends on m - n only. Pairs are (i, i + head_dim/2), as in Llama/HF. `scaling`
    changes the frequencies for a context beyond the trained one (`rope_scaling.py`)."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0, scaling: RopeScaling | None = None):
        super().__init__()
        self.head_dim, self.max_len, self.base, self.scaling = head_dim, max_len, base, scaling
        if _DEFERRED.get():
            cos = sin = torch.empty(max_len, head_dim, device="meta")
        else:
            cos, sin = self.tables()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (max_len, head_dim) fp32, on the CPU even under torch.device("meta") (see sinusoidal_table)."""
        inv_freq = 1.0 / self.base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32, device="cpu")
                                       / self.head_dim)
        attention = 1.0
        if self.scaling is not None:
            inv_freq, attention = scaled_frequencies(inv_freq, self.head_dim, self.base, self.scaling)
        angles = torch.arange(self.max_len, dtype=torch.float32, device="cpu")[:, None] * inv_freq  # (max_len, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (max_len, D)
        return angles.cos() * attention, angles.sin() * attention

    def table_key(self) -> str:
        """What `tables()` computes from, torch's version included: a file of tables made with another key is
        made again."""
        return (f"rotary head_dim={self.head_dim} max_len={self.max_len} base={self.base!r} "
                f"scaling={self.scaling!r} torch={torch.__version__}")

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, T) or (T,) -> cos, sin shaped to broadcast over (B, H, T, D)."""
        cos, sin = self.cos[positions], self.sin[positions]  # (…, T, D)
        if positions.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, D)
        return cos, sin


def apply_rotary(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate x (B, H, T, D) by the angles in `rope` = (cos, sin)."""
    cos, sin = rope
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)
