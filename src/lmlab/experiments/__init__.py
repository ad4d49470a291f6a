"""Experiments: questions answered by running several recipes and comparing them (does pre-training help a
small encoder-decoder? how fast do an RNN's gradients vanish?). They sit above the recipes they run."""
