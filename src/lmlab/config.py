"""Model configs and the registry of named presets.

A `ModelConfig` fixes every architectural choice of a decoder-only transformer; the presets
below name the published shapes (GPT-2 124M, SmolLM2-135M) and tiny ones for tests and laptops.
An `EncoderConfig` does the same for a BERT-style encoder, with its own presets.
`lmlab train --model PRESET --n-layers 6 …` starts from a preset and overrides fields.
"""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from lmlab.config_checks import (
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_EPS,
    MAX_LAYERS,
    MAX_ROPE_BASE,
    MAX_SEED,
    MAX_VOCAB,
    MAX_WIDTH,
    at_least,
    at_most,
    check_causal_attention,
    check_types,
    fraction,
    positive,
)
from lmlab.errors import LmlabError

MAX_PARAMETERS = 10**11  # ~400 GB of float32 weights: far past anything lmlab trains or loads


@dataclass(frozen=True, kw_only=True)
class AttentionSettings:
    """How attention mixes positions (`lmlab.modules.efficient_attention`): "full" is softmax over every key;
    the others are the efficient transformers' methods, with their sizes. Decoders and encoders both take it."""

    attention: Literal["full", "window", "bigbird", "lsh", "performer", "linformer", "nystrom"] = dataclasses.field(
        default="full", metadata={"help": "how attention mixes positions: full (softmax over every key) or an efficient "
                                          "method (linformer and nystrom: encoders only)"})
    attention_window: int = dataclasses.field(default=128, metadata={
        "help": "window: keys this near a query; bigbird: its block size; lsh: its chunk size (default 128)"})
    attention_globals: int = dataclasses.field(default=1, metadata={
        "help": "window, bigbird: the first tokens, which every query sees (default 1)"})
    attention_random: int = dataclasses.field(default=2, metadata={
        "help": "bigbird: random key blocks per query block (default 2)"})
    attention_hashes: int = dataclasses.field(default=4, metadata={"help": "lsh: hashing rounds (default 4)"})
    attention_rank: int = dataclasses.field(default=64, metadata={
        "help": "performer: random features; linformer: projected length; nystrom: landmarks (default 64)"})

    def check_attention(self) -> None:
        at_least(self, 1, "attention_window", "attention_hashes", "attention_rank")
        at_least(self, 0, "attention_globals", "attention_random")
        at_most(self, MAX_CONTEXT, "attention_window", "attention_globals", "attention_rank")
        at_most(self, 64, "attention_hashes", "attention_random")


ATTENTION_FIELDS = frozenset(f.name for f in dataclasses.fields(AttentionSettings))


@dataclass(frozen=True)
class ModelConfig(AttentionSettings):
    family: str  # the family (`lmlab list --families`): its name decides how the model is read, saved and trained
    vocab_size: int  # tokens in the vocabulary (a trained tokenizer sets it)
    context_length: int  # the most tokens the model attends over
    n_layers: int  # transformer blocks
    n_heads: int  # attention heads per block
    d_model: int  # width of the residual stream
    d_ff: int  # hidden width of each feed-forward layer
    n_kv_heads: int | None = None  # None = n_heads (multi-head); 1 = multi-query
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"  # the normalisation layer
    norm_eps: float = 1e-5  # the epsilon inside each norm
    norm_placement: Literal["pre", "post", "sandwich", "output"] = dataclasses.field(default="pre", metadata={
        "help": "where the norms sit: before each sublayer (pre: GPT-2, Llama), after the residual add (post: the "
                "original Transformer), before and after each sublayer inside the residual (sandwich: Gemma 2/3), or "
                "on each sublayer's output only (output: OLMo 2)"})
    ffn: Literal["gelu", "swiglu", "geglu"] = dataclasses.field(default="gelu", metadata={
        "help": "the feed-forward layer: a GELU MLP, SwiGLU's gated one (Llama), or the gated tanh-GELU (Gemma)"})
    positions: Literal["learned", "sinusoidal", "rope"] = "learned"  # how token positions enter the model
    rope_base: float = 10000.0  # the base of rotary positions' frequencies
    bias: bool = True  # biases in the linear layers
    qkv_bias: bool = False  # biases on the query, key and value projections even without `bias` (Qwen2)
    qk_norm: Literal["none", "head", "all"] = dataclasses.field(default="none", metadata={
        "help": "RMSNorm on queries and keys before the rotation: each head's own (head: Qwen3, Gemma 3) or over "
                "all heads at once (all: OLMo 2)"})
    head_size: int | None = None  # each head's width (None: d_model / n_heads; Gemma and Qwen3 set their own)
    tie_embeddings: bool = True  # the LM head shares the token embedding's weights
    scale_embeddings: bool = False  # token embeddings are multiplied by sqrt(d_model) (Gemma)
    attention_scale: float | None = None  # scores are q.k times this (None: 1/sqrt(head size); Gemma: its own)
    attention_softcap: float | None = None  # scores pass through cap * tanh(score / cap) (Gemma 2)
    logit_softcap: float | None = None  # the final logits likewise (Gemma 2)
    sliding_window: int | None = None  # local layers attend to this many latest keys, their own included (Mistral)
    global_every: int = 0  # with a window, every this-many-th layer attends to all keys (Gemma 2: 2); 0: none do
    rope_local_base: float | None = None  # the RoPE base of the local layers (Gemma 3); None: rope_base
    rope_scaling: Literal["none", "linear", "llama3", "yarn"] = dataclasses.field(default="none", metadata={
        "help": "RoPE beyond its trained context: linear (positions / factor), llama3 (Llama 3.1's per-frequency "
                "blend) or yarn (NTK-by-parts with an attention temperature)"})
    rope_factor: float = 1.0  # how many times the trained context the scaled RoPE reaches
    rope_original_context: int | None = None  # llama3, yarn: the context the unscaled model was trained for
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths above original_context / this are scaled whole
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths below original_context / this are kept
    rope_beta_fast: float = 32.0  # yarn: rotations per context above which a frequency is kept
    rope_beta_slow: float = 1.0  # yarn: rotations per context below which a frequency is scaled whole
    rope_attention_factor: float | None = None  # yarn: cos and sin are multiplied by this (None: 0.1 ln(factor) + 1)
    dropout: float = 0.0  # dropout probability in training
    trained_context: int | None = None  # tokens per pre-training sequence (None: context_length); perplexity's window

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "vocab_size", "context_length", "n_layers", "n_heads", "d_model", "d_ff", "n_kv_heads",
                 "trained_context", "head_size", "sliding_window", "rope_original_context")
        at_least(self, 0, "global_every")
        self.check_attention()
        at_most(self, MAX_VOCAB, "vocab_size")
        at_most(self, MAX_CONTEXT, "context_length", "sliding_window", "rope_original_context")
        at_most(self, self.context_length, "trained_context")
        at_most(self, MAX_LAYERS, "n_layers", "global_every")
        at_most(self, MAX_WIDTH, "d_model", "d_ff", "head_size")
        positive(self, "norm_eps", "rope_base", "rope_local_base", "attention_scale",
                 "attention_softcap", "logit_softcap", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                 "rope_beta_fast", "rope_beta_slow", "rope_attention_factor")
        at_most(self, MAX_EPS, "norm_eps")
        at_most(self, MAX_ROPE_BASE, "rope_base", "rope_local_base")
        fraction(self, "dropout")
        if self.head_size is None and self.d_model % self.n_heads:
            raise LmlabError(f"--d-model {self.d_model} is not divisible by --n-heads {self.n_heads}; "
                             "pick a d_model that is a multiple of n_heads, or set --head-size")
        self._check_windows()
        self._check_rope_scaling()
        check_causal_attention(self.attention)
        if self.n_heads % (self.n_kv_heads or self.n_heads):
            raise LmlabError(f"--n-heads {self.n_heads} is not a multiple of --n-kv-heads {self.n_kv_heads}")
        if self.positions == "rope" and self.head_dim % 2:
            raise LmlabError(f"rotary positions need an even head size, but this model's is {self.head_dim}; pick "
                             "other --d-model, --n-heads or --head-size")
        attention = 4 * self.d_model * self.n_heads * self.head_dim
        check_parameters(self.n_layers * (attention + 3 * self.d_model * self.d_ff)
                         + (self.vocab_size + self.context_length) * self.d_model)

    def _check_windows(self) -> None:
        """A window's settings only with a window, and local layers only with rotary or no positions of their own."""
        if self.sliding_window is None:
            given = [f"--{name.replace('_', '-')}" for name in ("global_every", "rope_local_base")
                     if getattr(self, name) not in (0, None)]
            if given:
                raise LmlabError(f"{', '.join(given)} apply to a model with local layers; set --sliding-window too")
        elif self.attention != "full":
            raise LmlabError(f"--sliding-window is a band of full attention; it does not combine with --attention "
                             f"{self.attention} (whose own window is --attention-window)")

    def _check_rope_scaling(self) -> None:
        """Scaling settings only with rotary positions, and llama3 / yarn with the context they scale from."""
        if self.rope_scaling == "none":
            return
        if self.positions != "rope":
            raise LmlabError(f"--rope-scaling {self.rope_scaling} scales rotary positions; this model's positions "
                             f"are {self.positions}")
        if self.rope_scaling in ("llama3", "yarn") and self.rope_original_context is None:
            raise LmlabError(f"--rope-scaling {self.rope_scaling} needs --rope-original-context, the context the "
                             "unscaled model was trained for")
        if self.rope_scaling == "llama3" and not self.rope_low_freq_factor < self.rope_high_freq_factor:
            raise LmlabError(f"--rope-low-freq-factor {self.rope_low_freq_factor} must be below "
                             f"--rope-high-freq-factor {self.rope_high_freq_factor}")

    @property
    def head_dim(self) -> int:
        """Each attention head's width: `head_size`, or d_model / n_heads."""
        return self.head_size or self.d_model // self.n_heads

    def layer_window(self, layer: int) -> int | None:
        """The keys layer `layer` attends to (its window), or None for all of them (a global layer)."""
        if self.sliding_window is None or (self.global_every and (layer + 1) % self.global_every == 0):
            return None
        return self.sliding_window

    def replace(self, **changes) -> "ModelConfig":
        """A copy with some fields changed (the CLI's overrides); unknown fields are an error."""
        return checked_replace(self, "model", changes)


def check_parameters(count: int) -> None:
    """Refuse a shape of about `count` weights when that is more than any machine lmlab runs on holds."""
    if count > MAX_PARAMETERS:
        raise LmlabError(f"these settings make a model of about {count:.1e} weights, more than lmlab supports "
                         f"({MAX_PARAMETERS:.0e}); lower --n-layers, --d-model, --d-ff or --vocab-size")


def _gpt2(**shape) -> ModelConfig:
    return ModelConfig(family="gpt2", norm="layernorm", ffn="gelu", positions="learned", bias=True,
                       tie_embeddings=True, **shape)


def _llama(**shape) -> ModelConfig:
    shape.setdefault("norm_eps", 1e-5)
    return ModelConfig(family="llama", norm="rmsnorm", ffn="swiglu", positions="rope", bias=False, **shape)


def llama_like(family: str, **shape) -> ModelConfig:
    """A preset of a family that is a diff of Llama: Llama's parts, the family's settings in `shape`."""
    return dataclasses.replace(_llama(**shape), family=family)


PRESETS: dict[str, ModelConfig] = {
    "gpt2-tiny": _gpt2(vocab_size=4096, context_length=256, n_layers=4, n_heads=4, d_model=128, d_ff=512),
    "gpt2-small": _gpt2(vocab_size=8192, context_length=256, n_layers=6, n_heads=6, d_model=384, d_ff=1536),
    "gpt2": _gpt2(vocab_size=50257, context_length=1024, n_layers=12, n_heads=12, d_model=768, d_ff=3072),
    "llama-tiny": _llama(vocab_size=4096, context_length=256, n_layers=4, n_heads=4, n_kv_heads=2,
                         d_model=128, d_ff=352, tie_embeddings=True),
    "llama-small": _llama(vocab_size=8192, context_length=256, n_layers=6, n_heads=6, n_kv_heads=2,
                          d_model=384, d_ff=1024, tie_embeddings=False),
    "smollm2-135m": _llama(vocab_size=49152, context_length=8192, n_layers=30, n_heads=9, n_kv_heads=3,
                           d_model=576, d_ff=1536, rope_base=100000.0, tie_embeddings=True),
}


@dataclass(frozen=True)
class EncoderConfig(AttentionSettings):
    """The shape of a BERT-style encoder: post-norm blocks, learned positions, token types, GELU.

    The family picks the variant: "bert"; "roberta" (positions numbered from pad_token_id + 1, as
    fairseq did); "albert" (factorised embeddings of `embedding_size` projected to d_model, and one
    block's weights shared by all n_layers); "electra" (the discriminator; factorised embeddings when
    `embedding_size` differs from d_model, and a generator `generator_divisor` times narrower);
    "deberta" (DeBERTa-v2/v3: disentangled attention over relative positions in log buckets, absolute
    positions at the input only with `position_biased_input`, else in the enhanced mask decoder; its
    RTD generator is `generator_divisor` times shallower, as wide).
    """

    vocab_size: int
    context_length: int  # the number of learned positions
    n_layers: int
    n_heads: int
    d_model: int
    d_ff: int
    type_vocab_size: int = 2  # segments: sentence A / sentence B
    layer_norm_eps: float = 1e-12
    pooler: bool = True  # a Linear + tanh over the [CLS] state, as in BERT's next-sentence head
    dropout: float = 0.0
    family: Literal["bert", "roberta", "albert", "electra", "deberta"] = "bert"
    embedding_size: int | None = None  # None = d_model; ALBERT/ELECTRA embed in E < d_model, then project
    activation: Literal["gelu", "gelu_new"] = "gelu"  # gelu_new = GELU's tanh approximation (ALBERT)
    pad_token_id: int = 0  # RoBERTa numbers real tokens' positions from pad_token_id + 1
    generator_divisor: int = 4  # ELECTRA: the generator's d_model, d_ff and n_heads are the discriminator's / this
    # (DeBERTa: its n_layers)
    position_biased_input: bool = True  # absolute positions added to the input embeddings (DeBERTa-v3: False)
    position_buckets: int = 0  # DeBERTa: relative offsets in this many log buckets per side (0: one per offset)
    max_relative_positions: int | None = None  # DeBERTa: the farthest offset told apart (None: context_length)
    pos_att_type: Literal["c2p|p2c", "c2p", "p2c"] = "c2p|p2c"  # DeBERTa: the position terms of attention
    share_att_key: bool = False  # DeBERTa: position keys and queries through the content projections
    norm_rel_ebd: Literal["none", "layer_norm"] = "none"  # DeBERTa: LayerNorm on the relative position rows

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "vocab_size", "context_length", "n_layers", "n_heads", "d_model", "d_ff", "embedding_size",
                 "generator_divisor", "max_relative_positions")
        at_least(self, 0, "pad_token_id", "type_vocab_size", "position_buckets")
        at_most(self, MAX_VOCAB, "vocab_size", "type_vocab_size")
        at_most(self, MAX_CONTEXT, "context_length", "position_buckets", "max_relative_positions")
        at_most(self, MAX_LAYERS, "n_layers")
        at_most(self, MAX_WIDTH, "d_model", "d_ff", "embedding_size")
        positive(self, "layer_norm_eps")
        at_most(self, MAX_EPS, "layer_norm_eps")
        fraction(self, "dropout")
        if self.d_model % self.n_heads:
            raise LmlabError(f"--d-model {self.d_model} is not divisible by --n-heads {self.n_heads}; "
                             "pick a d_model that is a multiple of n_heads")
        if self.pad_token_id >= self.vocab_size:
            raise LmlabError(f"pad_token_id {self.pad_token_id} is outside the vocabulary of {self.vocab_size} tokens")
        self.check_attention()
        check_parameters(self.n_layers * (4 * self.d_model**2 + 2 * self.d_model * self.d_ff)
                         + (self.vocab_size + self.context_length) * self.d_model)
        if self.embedding_size is not None and self.family not in ("albert", "electra"):
            raise LmlabError(f"--embedding-size {self.embedding_size} applies to albert and electra only, "
                             f"not {self.family}; drop it (the embeddings are d_model wide)")
        if self.max_tokens < 1:
            raise LmlabError(f"--context-length {self.context_length} leaves no position for a token")
        self._check_deberta()

    def _check_deberta(self) -> None:
        """DeBERTa's settings only on DeBERTa, and a relative span its log buckets can cover."""
        if self.family != "deberta":
            changed = [f.name for f in dataclasses.fields(self) if f.name in DEBERTA_FIELDS
                       and getattr(self, f.name) != f.default]
            if changed:
                raise LmlabError(f"{', '.join(changed)} apply to deberta only, not {self.family}; drop them")
            if self.type_vocab_size < 1:
                raise LmlabError(f"--type-vocab-size 0 must be at least 1 for {self.family} (no token types is "
                                 "deberta's only)")
        elif self.attention != "full":
            raise LmlabError(f"--attention {self.attention} does not apply to deberta, whose disentangled attention "
                             "scores every key; drop it")
        elif self.position_buckets and self.position_buckets < 2:
            raise LmlabError(f"position_buckets {self.position_buckets} is too few; use 0 (no buckets) or at least 2")
        elif (self.position_buckets and self.context_length - 1 > self.position_buckets // 2
              and self.relative_distance <= self.position_buckets // 2 + 1):  # offsets past the exact buckets
            raise LmlabError(f"max_relative_positions {self.relative_distance} must exceed half of position_buckets "
                             f"({self.position_buckets}) + 1 for log buckets; raise it or lower position_buckets")

    @property
    def embedding_width(self) -> int:
        """The width of the token embeddings: embedding_size, or d_model when not factorised."""
        return self.embedding_size or self.d_model

    @property
    def relative_distance(self) -> int:
        """DeBERTa: the farthest query - key offset told apart (max_relative_positions, or context_length)."""
        return self.max_relative_positions or self.context_length

    @property
    def relative_span(self) -> int:
        """DeBERTa: the relative position rows per side (position_buckets, or one per offset)."""
        return self.position_buckets or self.relative_distance

    @property
    def max_tokens(self) -> int:
        """The longest input: the positions, less RoBERTa's first pad_token_id + 1 (never used by a token)."""
        return self.context_length - (self.pad_token_id + 1 if self.family == "roberta" else 0)

    def generator(self) -> "EncoderConfig":
        """ELECTRA's generator: the discriminator's shape made `generator_divisor` times narrower, on
        the same embeddings (whose width it keeps), with no pooler. DeBERTa-v3's keeps the width (its
        embeddings are shared gradient-disentangled) and is `generator_divisor` times shallower."""
        k = self.generator_divisor
        if self.family == "deberta":
            if self.n_layers % k:
                raise LmlabError(f"--generator-divisor {k} must divide n_layers ({self.n_layers}); pick another "
                                 "--generator-divisor")
            return self.replace(n_layers=self.n_layers // k, pooler=False, generator_divisor=1)
        if any(x % k for x in (self.d_model, self.d_ff, self.n_heads)):
            raise LmlabError(f"--generator-divisor {k} must divide d_model, d_ff and n_heads "
                             f"({self.d_model}, {self.d_ff}, {self.n_heads}); pick another --generator-divisor")
        return self.replace(d_model=self.d_model // k, d_ff=self.d_ff // k, n_heads=self.n_heads // k,
                            embedding_size=self.embedding_width, pooler=False, generator_divisor=1)

    def replace(self, **changes) -> "EncoderConfig":
        """A copy with some fields changed; unknown fields are an error."""
        return checked_replace(self, "encoder", changes)


DEBERTA_FIELDS = ("position_biased_input", "position_buckets", "max_relative_positions", "pos_att_type",
                  "share_att_key", "norm_rel_ebd")  # EncoderConfig's fields that apply to DeBERTa only


def _deberta_v3(**shape) -> EncoderConfig:
    """DeBERTa-v3's settings: no token types or input positions, log buckets (256 unless given), shared keys,
    normed rows."""
    shape.setdefault("position_buckets", 256)
    return EncoderConfig(family="deberta", context_length=512, type_vocab_size=0, layer_norm_eps=1e-7, pooler=False,
                         position_biased_input=False, share_att_key=True, norm_rel_ebd="layer_norm",
                         generator_divisor=2, **shape)


ENCODER_PRESETS: dict[str, EncoderConfig] = {
    "bert-tiny": EncoderConfig(vocab_size=30522, context_length=512, n_layers=2, n_heads=2, d_model=128, d_ff=512),
    "minilm-l6": EncoderConfig(vocab_size=30522, context_length=512, n_layers=6, n_heads=12, d_model=384, d_ff=1536),
    "roberta-tiny": EncoderConfig(family="roberta", vocab_size=30522, context_length=514, n_layers=2, n_heads=2,
                                  d_model=128, d_ff=512, type_vocab_size=1, layer_norm_eps=1e-5, pooler=False),
    "roberta-base": EncoderConfig(family="roberta", vocab_size=50265, context_length=514, n_layers=12, n_heads=12,
                                  d_model=768, d_ff=3072, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1),
    "albert-tiny": EncoderConfig(family="albert", vocab_size=30000, context_length=512, n_layers=4, n_heads=2,
                                 d_model=128, d_ff=512, embedding_size=64, activation="gelu_new"),
    "albert-base-v2": EncoderConfig(family="albert", vocab_size=30000, context_length=512, n_layers=12, n_heads=12,
                                    d_model=768, d_ff=3072, embedding_size=128, activation="gelu_new"),
    "electra-tiny": EncoderConfig(family="electra", vocab_size=30522, context_length=512, n_layers=2, n_heads=2,
                                  d_model=128, d_ff=512, embedding_size=64, pooler=False, generator_divisor=2),
    "electra-small": EncoderConfig(family="electra", vocab_size=30522, context_length=512, n_layers=12, n_heads=4,
                                   d_model=256, d_ff=1024, embedding_size=128, pooler=False),
    "deberta-tiny": _deberta_v3(vocab_size=30522, n_layers=2, n_heads=2, d_model=128, d_ff=512, position_buckets=32),
    "deberta-v3-small": _deberta_v3(vocab_size=128100, n_layers=6, n_heads=12, d_model=768, d_ff=3072),
    "deberta-v3-base": _deberta_v3(vocab_size=128100, n_layers=12, n_heads=12, d_model=768, d_ff=3072),
}


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its learning-rate schedule. Each recipe's config holds one (`cfg.optim`), with
    defaults that suit it; on the command line its fields are flags of their own (`--lr`, `--beta2`)."""

    lr: float = 6e-4  # the peak learning rate, reached after warmup
    warmup_steps: int = 100  # steps of linear warmup to lr
    warmup_ratio: float | None = None  # share of max_steps to warm up over; replaces warmup_steps when set
    schedule: Literal["cosine", "linear"] = "cosine"  # the decay after warmup
    min_lr_ratio: float = 0.1  # the learning rate at max_steps, as a share of lr
    weight_decay: float = 0.1  # decoupled, on linear-layer matrices only
    beta1: float = 0.9  # AdamW's first-moment decay
    beta2: float = 0.95  # AdamW's second-moment decay
    grad_clip: float = 1.0  # the gradient's global norm is clipped to this

    def __post_init__(self):
        check_types(self)
        at_least(self, 0, "warmup_steps", "weight_decay")
        positive(self, "lr", "grad_clip")
        fraction(self, "min_lr_ratio", upper_included=True)
        fraction(self, "beta1")
        fraction(self, "beta2")
        if self.warmup_ratio is not None:
            fraction(self, "warmup_ratio")

    def replace(self, **changes) -> "OptimConfig":
        """A copy with some settings changed. Warmup is set one way: new warmup steps replace a
        warmup ratio this config had (a recipe whose default warms up over a share of the run), and
        changing both at once is an error."""
        if "warmup_steps" in changes:
            if changes.get("warmup_ratio") is not None:
                raise LmlabError("--warmup-steps and --warmup-ratio both set the warmup; pass one of them")
            changes.setdefault("warmup_ratio", None)
        return dataclasses.replace(self, **changes)

    def warmup(self, max_steps: int) -> int:
        """Warmup steps of a run of `max_steps`."""
        return self.warmup_steps if self.warmup_ratio is None else round(self.warmup_ratio * max_steps)


@dataclass(frozen=True)
class LoopConfig:
    """The training loop's settings (`lmlab.training.loop`): how long a run trains, in what pieces, how
    often it evaluates, logs and saves, and its seed. Each recipe's config holds one (`cfg.loop`), with
    defaults that suit it; on the command line its fields are flags of their own (`--max-steps`). A
    recipe that counts its own steps leaves max_steps None and sets it (`finetune_encoder`: its epochs')."""

    max_steps: int | None = 1000  # optimizer steps of the whole run
    batch_size: int = 16  # examples per optimizer step, over all processes and micro-batches
    grad_accum: int = 1  # micro-batches per optimizer step and process
    bf16: bool = False  # autocast the forward pass (and evaluation) to bfloat16
    eval_every: int = 200  # steps between evaluations
    checkpoint_every: int = 200  # steps between checkpoints
    keep_checkpoints: int = 3  # newest checkpoints kept
    log_every: int = 10  # steps between metrics.jsonl rows
    seed: int = 0  # weights, data order and every random draw
    fsdp: bool = dataclasses.field(default=False, metadata={"help": (
        "shard weights, gradients and AdamW state over the processes (FSDP2; under torchrun, or resumable in one "
        "process)")})

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "max_steps", "batch_size", "grad_accum", "eval_every", "checkpoint_every",
                 "keep_checkpoints", "log_every")
        at_least(self, 0, "seed")
        at_most(self, MAX_BATCH, "batch_size")
        at_most(self, MAX_SEED, "seed")
        if self.batch_size % self.grad_accum:
            raise LmlabError(f"--batch-size {self.batch_size} is not divisible by --grad-accum {self.grad_accum}")

    def replace(self, **changes) -> "LoopConfig":
        """A copy with some settings changed; unknown settings are an error."""
        return checked_replace(self, "loop", changes)


LOOP_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LoopConfig)  # every LoopConfig setting's default
                 if f.default is not dataclasses.MISSING}


@dataclass(frozen=True)
class TrainConfig:
    """Everything about a pre-training run except the model's shape and the data's location."""

    loop: LoopConfig = LoopConfig()  # a batch of token blocks
    block_size: int | None = None  # tokens per training sequence; None = the model's context length
    optim: OptimConfig = OptimConfig()
    val_fraction: float = 0.05  # share of the blocks held out for validation
    eval_batches: int = 10  # held-out batches per validation
    compile: bool = False  # torch.compile the model: 2-3x for Llama on a GPU, ~1.1x on a CPU after a minute
    max_memory: str | None = dataclasses.field(default=None, metadata={"help": (
        "SIZE: refuse to start when the estimated memory per process exceeds it (8GiB, 512MiB)")})

    def __post_init__(self):
        check_types(self)
        at_least(self, 1, "block_size", "eval_batches")
        at_most(self, MAX_CONTEXT, "block_size")
        fraction(self, "val_fraction")

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


def checked_replace(config, kind: str, changes: dict):
    """`dataclasses.replace(config, **changes)`, with a one-line error naming any unknown `kind` setting."""
    unknown = set(changes) - {f.name for f in dataclasses.fields(config)}
    if unknown:
        raise LmlabError(f"unknown {kind} setting(s) {sorted(unknown)}; valid: "
                         f"{[f.name for f in dataclasses.fields(config)]}")
    return dataclasses.replace(config, **changes)


def config_to_dict(cfg: ModelConfig) -> dict:
    return dataclasses.asdict(cfg)


def config_from_dict(d: dict) -> ModelConfig:
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in d.items() if k in names})
