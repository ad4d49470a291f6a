"""lmlab's own C++ kernels, compiled on first use (`build.py`)."""
