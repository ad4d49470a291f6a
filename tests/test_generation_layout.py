"""Decoding lays out the weights for the batch size: the values, the tokens and a model in training
stay as they were; only the memory layout of the wide linear weights changes, and changes back."""

import torch

from lmlab.config import preset
from lmlab.generation import GenerationConfig, generate, generate_batch
from lmlab.generation.layout import arrange_for_decoding
from lmlab.models.decoder import build_decoder


def tiny_llama():
    torch.manual_seed(0)
    return build_decoder(preset("llama-tiny", vocab_size=64, context_length=48, n_layers=2)).eval()


def wide_weights(model):
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight.size(0) > m.weight.size(1)]


def test_one_row_makes_wide_weights_column_major_and_more_rows_undo_it():
    model = tiny_llama()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    arrange_for_decoding(model, rows=1)
    assert all(w.t().is_contiguous() and not w.is_contiguous() for w in wide_weights(model))
    assert all(m.weight.is_contiguous() for m in model.modules()
               if isinstance(m, torch.nn.Linear) and m.weight.size(0) <= m.weight.size(1))
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())
    arrange_for_decoding(model, rows=4)
    assert all(p.is_contiguous() for p in model.parameters())


def test_layout_changes_no_token_and_leaves_weights_trainable():
    model, reference = tiny_llama(), tiny_llama()
    config = GenerationConfig(max_new_tokens=10)
    prompts = [[5, 9, 2], [7, 1]]
    expected = [g.token_ids for g in generate_batch(reference, prompts, config)]
    assert generate(model, prompts[0], 10) == expected[0]  # one row: column-major
    assert [g.token_ids for g in generate_batch(model, prompts, config)] == expected  # two rows: back
    generate(model, prompts[1], 10)
    model.train()
    model(torch.tensor([prompts[0]])).sum().backward()  # weights made while decoding must take gradients
    assert all(p.grad is not None for p in wide_weights(model))


def test_model_in_training_keeps_its_layout():
    model = tiny_llama().train()
    arrange_for_decoding(model, rows=1)
    assert all(p.is_contiguous() for p in model.parameters())
