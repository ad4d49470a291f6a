"""Config checks shared by the window and recurrent LMs, so both refuse bad shapes with the same line."""

from lmlab.errors import LmlabError


def check_lm_shape(cfg, positive: tuple[str, ...]) -> None:
    """The fields named in `positive` are >= 1, dropout is in [0, 1), and tied embeddings fit (hidden == d_model)."""
    for name in positive:
        if getattr(cfg, name) < 1:
            raise LmlabError(f"{name}={getattr(cfg, name)} must be at least 1")
    if not 0 <= cfg.dropout < 1:
        raise LmlabError(f"dropout={cfg.dropout} must be in [0, 1)")
    if cfg.tie_embeddings and cfg.hidden != cfg.d_model:
        raise LmlabError(f"tied embeddings need hidden == d_model, got hidden={cfg.hidden} and "
                         f"d_model={cfg.d_model}; set both to the same size or drop --tie-embeddings")
