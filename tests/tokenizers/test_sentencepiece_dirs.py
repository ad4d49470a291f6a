"""T5, DeBERTa-v3 and Llama-2-style directories that ship a SentencePiece model and no tokenizer.json give the
ids transformers' tokenizers give for the same directory: the model's pieces, T5's sentinels, the special
tokens tokenizer_config.json names (DeBERTa-v3's [MASK], added after the pieces), held-out text."""

import json
import shutil

import pytest

from lmlab.errors import LmlabError
from lmlab.models.encoder_decoder.files import load_encoder_decoder
from lmlab.tokenizers.text import TextTokenizer
from lmlab.tokenizers.wordpiece import load_wordpiece
from sentencepiece_models import COMPATIBILITY, HELD_OUT, spm, trained

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.parity
SENTINEL_TEXTS = ["a <extra_id_0> b<extra_id_1>c <extra_id_99>", "</s> x<pad>y"]


def directory(tmp_path, name: str, file: str, config: dict | None = None, tokenizer_config: dict | None = None):
    """A model directory holding the model trained as SETTINGS[name] as `file`, and the json files given."""
    path = tmp_path / name
    path.mkdir()
    shutil.copy(trained(tmp_path, name), path / file)
    for json_file, content in (("config.json", config), ("tokenizer_config.json", tokenizer_config)):
        if content is not None:
            (path / json_file).write_text(json.dumps(content))
    return path


def reference(path):
    return transformers.AutoTokenizer.from_pretrained(path)


def assert_same_ids(ours: TextTokenizer, theirs, texts):
    for text in texts:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text


@pytest.mark.parametrize("tokenizer_config", [None, {"tokenizer_class": "T5Tokenizer", "extra_ids": 7}])
def test_t5_directory_gives_transformers_ids(tmp_path, tokenizer_config):
    path = directory(tmp_path, "t5", "spiece.model", {"model_type": "t5"}, tokenizer_config)
    ours, theirs = TextTokenizer.from_dir(path), reference(path)
    assert ours.vocab_size == len(theirs)
    assert (ours.eos_id, ours.pad_id, ours.bos_id) == (theirs.eos_token_id, theirs.pad_token_id, None)
    assert_same_ids(ours, theirs, HELD_OUT + COMPATIBILITY + SENTINEL_TEXTS)


def test_llama_directory_gives_transformers_ids(tmp_path):
    """Except where transformers' LlamaTokenizer, built from tokenizer.model, leaves out the space it puts before
    a text when the text starts with a space (its Metaspace step adds none to a text that starts with "▁");
    sentencepiece, llama.cpp and Llama 2's own tokenizer.json add it, and so does lmlab."""
    path = directory(tmp_path, "llama", "tokenizer.model", {"model_type": "llama"},
                     {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "legacy": False})
    ours, theirs = TextTokenizer.from_dir(path), reference(path)
    assert (ours.vocab_size, ours.bos_id, ours.eos_id, ours.pad_id) == (len(theirs), 1, 2, None)
    assert_same_ids(ours, theirs, [text for text in HELD_OUT + COMPATIBILITY if not text[:1].isspace()])
    sentencepiece = spm.SentencePieceProcessor(model_file=str(path / "tokenizer.model"))
    for text in [text for text in HELD_OUT if text[:1].isspace()]:
        assert ours.encode(text) == sentencepiece.encode(text), text


@pytest.mark.parametrize("mask_in_model", [True, False])
def test_deberta_v3_directory_gives_transformers_ids(tmp_path, mask_in_model):
    """The held-out text but for COMPATIBILITY: transformers 5's DebertaV2Tokenizer normalizes by NFC instead of
    the model's own NFKC table (full-width letters, ligatures), where lmlab does as sentencepiece does."""
    config = {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "mask_token": "[MASK]"}
    path = directory(tmp_path, "deberta", "spm.model", {"model_type": "deberta-v2"}, config)
    if mask_in_model:
        shutil.copy(trained(tmp_path, "deberta", user_defined_symbols=["[MASK]"]), path / "spm.model")
    ours, theirs = TextTokenizer.from_dir(path), reference(path)
    assert ours.vocab_size == len(theirs)
    assert ours.backend.token_to_id("[MASK]") == theirs.mask_token_id
    assert_same_ids(ours, theirs, HELD_OUT + ["x [MASK] y"])
    encoder = load_wordpiece(path, 512)
    encoder.no_padding()
    for text in HELD_OUT:
        assert encoder.encode(text).ids == theirs(text)["input_ids"], text
    assert encoder.encode("one", "two").type_ids == theirs("one", "two")["token_type_ids"]


def test_an_albert_spiece_model_is_refused_for_encoders(tmp_path):
    path = directory(tmp_path, "t5", "spiece.model", {"model_type": "albert"})
    with pytest.raises(LmlabError, match="reads for deberta-v2 encoders only, not albert; save the tokenizer"):
        load_wordpiece(path, 512)


def test_a_config_token_of_the_wrong_kind_is_one_line(tmp_path):
    path = directory(tmp_path, "t5", "spiece.model", None, {"tokenizer_class": "T5Tokenizer", "extra_ids": "many"})
    with pytest.raises(LmlabError, match="extra_ids must be a count"):
        TextTokenizer.from_dir(path)
    (path / "tokenizer_config.json").write_text(json.dumps({"additional_special_tokens": [["<x>"]]}))
    with pytest.raises(LmlabError, match="additional_special_tokens must be a token"):
        TextTokenizer.from_dir(path)


def test_a_t5_tokenizer_saved_as_tokenizer_json_loads_back(tmp_path):
    """Its normalization table (T5's NFKC map, hundreds of thousands of characters) is within the bound on
    precompiled_charsmap, not the one on other strings."""
    ours = TextTokenizer.from_dir(directory(tmp_path, "t5", "spiece.model", {"model_type": "t5"}))
    ours.save(tmp_path / "saved")
    again = TextTokenizer.from_dir(tmp_path / "saved")
    for text in HELD_OUT + COMPATIBILITY + SENTINEL_TEXTS:
        assert again.encode(text) == ours.encode(text), text


def test_a_t5_checkpoint_with_only_spiece_model_loads_with_its_tokenizer(tmp_path):
    path = directory(tmp_path, "t5", "spiece.model")
    config = transformers.T5Config(vocab_size=600, d_model=8, d_ff=16, d_kv=4, num_layers=1, num_heads=2)
    transformers.T5ForConditionalGeneration(config).save_pretrained(path)
    _, tokenizer = load_encoder_decoder(path)
    theirs = reference(path)
    for text in HELD_OUT + SENTINEL_TEXTS:
        assert tokenizer.encode(text, add_special_tokens=False).ids == theirs.encode(text, add_special_tokens=False)


def test_deberta_v3_as_published_names_its_tokens_in_special_tokens_map(tmp_path):
    """DeBERTa-v3's own directory: tokenizer_config.json without a class, the tokens in special_tokens_map.json."""
    path = directory(tmp_path, "deberta", "spm.model", {"model_type": "deberta-v2"},
                     {"do_lower_case": False, "vocab_type": "spm"})
    (path / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]", "sep_token": "[SEP]",
         "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}))
    ours, theirs = TextTokenizer.from_dir(path), reference(path)
    assert (ours.vocab_size, ours.backend.token_to_id("[MASK]")) == (len(theirs), theirs.mask_token_id)
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (theirs.bos_token_id, theirs.eos_token_id, theirs.pad_token_id)
    assert_same_ids(ours, theirs, HELD_OUT + ["x [MASK] y"])
