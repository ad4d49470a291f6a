"""The C++ kernels' build folder is keyed by everything that changes the binary: each distinct build is made
once and kept beside the others, so two environments sharing lmlab's cache reuse their own builds instead of
rebuilding in turn (issue 40 saw 6 rebuilds alternating between two builds)."""

import dataclasses

import pytest

from lmlab.modules.kernels import build


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LMLAB_CACHE", str(tmp_path))
    build._compiler.cache_clear()
    yield tmp_path / "kernels"
    build._compiler.cache_clear()


def test_the_same_build_reuses_its_folder(cache):
    assert build.build_dir(build.QUANTIZED) == build.build_dir(build.QUANTIZED)
    assert len(list(cache.iterdir())) == 1


def test_another_flag_or_compiler_gets_its_own_folder_beside_the_first(cache, monkeypatch):
    first = build.build_dir(build.QUANTIZED)
    other_flags = build.build_dir(dataclasses.replace(build.QUANTIZED, flags=(*build.FLAGS, "-DOTHER")))
    monkeypatch.setenv("CXX", "another-c++-compiler")
    build._compiler.cache_clear()
    other_compiler = build.build_dir(build.QUANTIZED)
    assert len({first, other_flags, other_compiler}) == 3
    assert all(folder.is_dir() for folder in (first, other_flags, other_compiler))  # kept side by side


def test_another_install_of_the_same_torch_gets_its_own_folder(cache, monkeypatch):
    first = build.build_key(build.QUANTIZED)
    monkeypatch.setattr("torch.utils.cpp_extension.include_paths", lambda *args: ["/another/env/torch/include"])
    assert build.build_key(build.QUANTIZED) != first
