"""ELMo (Peters et al. 2018): a character-CNN token encoder under a forward and a backward LSTM
language model, whose layers a downstream task mixes with learned scalar weights."""
