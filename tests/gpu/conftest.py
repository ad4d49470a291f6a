"""The GPU tests' fixtures: the root conftest's, less the C++ libraries they never use."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def built_classic_libraries():
    """Not built here: no GPU test scores n-grams or trains word2vec, and on a fresh GPU machine building
    them would spend minutes of its lease. (Overrides the root conftest's session fixture of this name.)"""
