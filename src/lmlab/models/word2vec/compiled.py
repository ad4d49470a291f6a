"""The C++ training loop of word2vec (`training.cpp`): one example at a time, as the original tool and gensim
train, compiled on first use; `recipes.word2vec` hands it one chunk of text at a time. Unlike the quantized
kernels, it need not round as torch does, so the compiler may fuse multiply-adds."""

from pathlib import Path

from lmlab.modules.kernels.build import FLAGS, Library

TRAINER = Library("lmlab_word2vec", (Path(__file__).with_name("training.cpp"),), "the word2vec trainer",
                  "word2vec trains in batches with torch (about 3x slower)",
                  flags=(*(flag for flag in FLAGS if not flag.startswith("-ffp-contract")), "-ffp-contract=fast"))
