"""word2vec (Mikolov et al. 2013): skip-gram and CBOW with negative sampling, and the word vectors they give."""
