"""Words as character ids for the character CNN: the UTF-8 bytes of the word between a
begin-of-word and an end-of-word mark, padded to a fixed length. The sentence boundaries <s> and
</s> get a character of their own, so the model can tell them from any spelled word."""

import torch

BOW, EOW, PAD, BOS_CHAR, EOS_CHAR = 256, 257, 258, 259, 260
N_CHARS = 261
BOS, EOS = "<s>", "</s>"


def word_chars(word: str, max_chars: int) -> list[int]:
    """The `max_chars` character ids of one word (its bytes cut to fit between the marks)."""
    if word == BOS:
        body = [BOS_CHAR]
    elif word == EOS:
        body = [EOS_CHAR]
    else:
        body = list(word.encode("utf-8")[: max_chars - 2])
    ids = [BOW, *body, EOW]
    return ids + [PAD] * (max_chars - len(ids))


def char_ids(words: list[str], max_chars: int) -> torch.Tensor:
    """(T, max_chars) int64 character ids of a sequence of words."""
    return torch.tensor([word_chars(w, max_chars) for w in words], dtype=torch.long).reshape(-1, max_chars)
