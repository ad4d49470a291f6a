"""The encoder-decoder batch: the decoder reads the start id then the target shifted right, the labels are the
target (with eos when asked) and ignore padding, and the masks mark the real positions; padded rows
give the same loss as each row alone."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmlab.errors import LmlabError
from lmlab.losses.cross_entropy import cross_entropy
from lmlab.objectives.encoder_decoder_batch import encoder_decoder_batch
from lmlab.objectives.span_corruption import span_corruption
from lmlab.targets import IGNORE_INDEX

PAD, START, EOS = 0, 1, 2  # the pairs use ids from 3

rows = st.lists(st.integers(3, 50), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(rows, rows), min_size=1, max_size=6), st.booleans())
def test_decoder_reads_start_then_the_target_shifted_right_and_labels_ignore_padding(pairs, with_eos):
    batch = encoder_decoder_batch(pairs, PAD, START, EOS if with_eos else None)
    B = len(pairs)
    targets = [list(t) + ([EOS] if with_eos else []) for _, t in pairs]
    S, T = max(len(s) for s, _ in pairs), max(map(len, targets))
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (B, S)
    for key in ("decoder_input_ids", "labels", "decoder_attention_mask"):
        assert batch[key].shape == (B, T)
    for b, ((source, _), target) in enumerate(zip(pairs, targets)):
        n, m = len(source), len(target)
        assert batch["input_ids"][b].tolist() == source + [PAD] * (S - n)
        assert batch["attention_mask"][b].tolist() == [1] * n + [0] * (S - n)
        assert batch["labels"][b].tolist() == target + [IGNORE_INDEX] * (T - m)
        assert batch["decoder_input_ids"][b, :m].tolist() == [START] + target[:-1]
        assert (batch["decoder_input_ids"][b, m:] == PAD).all()
        assert batch["decoder_attention_mask"][b].tolist() == [1] * m + [0] * (T - m)
    assert ((batch["labels"] == IGNORE_INDEX) == (batch["decoder_attention_mask"] == 0)).all()


def test_padding_changes_no_row_loss():
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14, 15])]
    batch = encoder_decoder_batch(pairs, PAD, START, EOS)
    logits = torch.randn(2, batch["labels"].shape[1], 20, generator=torch.Generator().manual_seed(0))  # (B, T, V)
    together = cross_entropy(logits, batch["labels"], reduction="sum")
    alone = sum(cross_entropy(logits[b:b + 1, :len(t) + 1],
                              encoder_decoder_batch([pairs[b]], PAD, START, EOS)["labels"], reduction="sum")
                for b, (_, t) in enumerate(pairs))
    assert torch.allclose(together, alone)


def test_span_corruption_pairs_batch_with_eos_on_the_targets():
    sentinels = list(range(100, 110))
    rng = random.Random(0)
    pairs = [span_corruption(list(range(3, 3 + n)), sentinels, rng) for n in (20, 35)]
    batch = encoder_decoder_batch(pairs, PAD, START, EOS)
    for b, (_, target) in enumerate(pairs):
        labels = batch["labels"][b][batch["labels"][b] != IGNORE_INDEX].tolist()
        assert labels == target + [EOS] and labels[0] == sentinels[0]


def test_pairs_are_left_unchanged():
    pairs = [([5, 6], [7])]
    encoder_decoder_batch(pairs, PAD, START, EOS)
    assert pairs == [([5, 6], [7])]


@pytest.mark.parametrize("pairs, message", [([], "at least one"), ([([5], [])], "pair 0 has empty targets"),
                                            ([([5], [6]), ([], [6])], "pair 1 has empty inputs")])
def test_empty_batches_or_rows_are_a_clear_error(pairs, message):
    with pytest.raises(LmlabError, match=message):
        encoder_decoder_batch(pairs, PAD, START)


@pytest.mark.parity
def test_decoder_inputs_match_hugging_face_shift_on_every_labelled_position():
    bart = pytest.importorskip("transformers.models.bart.modeling_bart")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14, 15]), ([16, 17], [18])]
    batch = encoder_decoder_batch(pairs, PAD, START, EOS)
    labelled = batch["labels"] != IGNORE_INDEX  # HF also shifts eos into the first padded position; it is unread
    hf_bart = bart.shift_tokens_right(batch["labels"], PAD, START)
    assert torch.equal(batch["decoder_input_ids"][labelled], hf_bart[labelled])
    config = t5.T5Config(d_model=8, d_ff=16, num_layers=1, num_heads=1, d_kv=8, vocab_size=32,
                         decoder_start_token_id=START, pad_token_id=PAD)
    hf_t5 = t5.T5ForConditionalGeneration(config)._shift_right(batch["labels"])
    assert torch.equal(batch["decoder_input_ids"][labelled], hf_t5[labelled])
