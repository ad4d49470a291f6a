"""Shared fixtures: an isolated lmlab cache, a tiny corpus, tiny configs."""

import os
from pathlib import Path

import pytest
import torch

from fuzz.record import merge_worker_reports
from lmlab.cli.main import main
from lmlab.config import LoopConfig, OptimConfig, TrainConfig
from lmlab.data.markov import markov_corpus
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from real_models import models_root


def pytest_configure(config):
    """Under pytest-xdist (pyproject's addopts run two workers) each worker takes its share of the cores
    for torch's threads: two workers of two threads each on two cores wait on each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


def pytest_sessionfinish(session):
    """The fuzz report of a run split over pytest-xdist workers is written once they have all finished."""
    if not hasattr(session.config, "workerinput"):
        merge_worker_reports()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache, so nothing leaks between tests or into ~/.cache; only its kernels/
    is the persistent cache's (a link), so the commands a test runs in a child process load the n-gram
    scorer and the other C++ kernels built once, instead of compiling them anew (30 s each under load)."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "kernels").symlink_to(shared_kernels(), target_is_directory=True)
    monkeypatch.setenv("LMLAB_CACHE", str(cache))


def shared_kernels() -> Path:
    """The persistent cache's kernels/ folder (built C++ libraries, keyed by their sources and this CPU)."""
    kernels = Path(models_root()) / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    return kernels


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread (and are not slowed by other busy cores); modules
    that need it say `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def built_classic_libraries():
    """The n-gram scorer and the word2vec trainer, built once into the persistent model cache and loaded for the
    whole session: many tests score n-grams or train word2vec, and each test's own cache would build them anew."""
    from lmlab.models.ngram.scoring import SCORER
    from lmlab.models.word2vec.compiled import TRAINER
    from lmlab.modules.kernels.build import compiled

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMLAB_CACHE", models_root())
        return compiled(SCORER), compiled(TRAINER)


@pytest.fixture(scope="session")
def built_kernels():
    """lmlab's quantized matmul kernels (torch.ops.lmlab_quant, or None without a compiler), built once into
    the persistent model cache: each test's own cache would build them anew (about a minute)."""
    from lmlab.modules.kernels.build import kernel_ops

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMLAB_CACHE", models_root())
        return kernel_ops()


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("\n".join(markov_corpus(300, seed=3)[0]))
    return path


TINY_MODEL = dict(vocab_size=300, context_length=32, n_layers=2, n_heads=2, d_model=32, d_ff=64)
TINY_MODEL_ARGS = ["--vocab-size", "300", "--context-length", "32", "--n-layers", "2", "--n-heads", "2",
                   "--d-model", "32", "--d-ff", "64"]


@pytest.fixture
def tiny_gpt2():
    return preset("gpt2-tiny", **TINY_MODEL)


@pytest.fixture
def tiny_train():
    return TrainConfig(loop=LoopConfig(max_steps=6, batch_size=4, eval_every=3, checkpoint_every=2, keep_checkpoints=2,
                                       log_every=1), block_size=16, optim=OptimConfig(lr=1e-3, warmup_steps=2))


def lmlab(*args) -> int:
    """Run the CLI in-process; returns its exit code."""
    return main([str(a) for a in args])


def one_line_error(capsys, *fragments) -> str:
    """The CLI's stderr is one `lmlab: error:` line, no traceback, containing every fragment."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lmlab: error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.fixture(scope="session")
def decoder_dir(tmp_path_factory):
    """A tiny GPT-2 with a BPE tokenizer trained on the Markov corpus, saved as an HF directory."""
    backend = train_bpe(markov_corpus(100, seed=3)[0], 300)
    torch.manual_seed(0)
    model = build_decoder(preset("gpt2-tiny", vocab_size=backend.get_vocab_size(), context_length=64, n_layers=2,
                                 d_model=32, n_heads=2, d_ff=64))
    return save_hf_dir(model, tmp_path_factory.mktemp("models") / "decoder", backend)
