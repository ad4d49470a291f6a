"""Config checks shared by the window and recurrent LMs, so both refuse bad shapes with the same line."""

from lmlab.config_checks import MAX_CONTEXT, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, at_least, at_most, check_types, fraction
from lmlab.errors import LmlabError


def check_lm_shape(cfg, positive: tuple[str, ...]) -> None:
    """The fields named in `positive` are >= 1 (and the sizes among them not absurd), dropout is in [0, 1),
    and tied embeddings fit (hidden == d_model)."""
    check_types(cfg)
    at_least(cfg, 1, *positive)
    at_most(cfg, MAX_VOCAB, "vocab_size")
    at_most(cfg, MAX_CONTEXT, *[name for name in ("context_length", "window") if name in positive])
    at_most(cfg, MAX_LAYERS, *[name for name in ("n_layers",) if name in positive])
    at_most(cfg, MAX_WIDTH, "d_model", "hidden")
    fraction(cfg, "dropout")
    if cfg.tie_embeddings and cfg.hidden != cfg.d_model:
        raise LmlabError(f"tied embeddings need hidden == d_model, got hidden={cfg.hidden} and "
                         f"d_model={cfg.d_model}; set both to the same size or drop --tie-embeddings")
