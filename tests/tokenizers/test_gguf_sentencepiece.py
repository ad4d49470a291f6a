"""A GGUF SentencePiece vocabulary (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral, Gemma, Phi-3) gives
the ids sentencepiece gives with the model it came from: byte fallback, runs of spaces, digits, the prefix
space or (Gemma) none; in a file llama.cpp's own converter wrote from a Llama directory, the ids
transformers' tokenizer gives for that directory and llama.cpp's own tokenizer gives for the file."""

import json
import shutil

import pytest

from llama_cpp_converter import convert_hf_to_gguf, extracted_converter
from lmlab.errors import LmlabError
from lmlab.models.llama.gguf_file import read_gguf
from lmlab.tokenizers.gguf import tokenizer_from_gguf
from lmlab.tokenizers.text import TextTokenizer
from sentencepiece_models import COMPATIBILITY, HELD_OUT, spm, trained

sentencepiece_model_pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")

pytestmark = pytest.mark.parity


def gguf_metadata(model_file, add_space_prefix: bool | None = None) -> dict:
    """The tokenizer metadata llama.cpp's converter writes for the SentencePiece model in `model_file`: its
    pieces, scores and types as the file holds them, and the trainer's special ids."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(model_file.read_bytes())
    trainer = proto.trainer_spec
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": [p.piece for p in proto.pieces],
            "tokenizer.ggml.scores": [p.score for p in proto.pieces],
            "tokenizer.ggml.token_type": [p.type for p in proto.pieces],
            "tokenizer.ggml.bos_token_id": trainer.bos_id, "tokenizer.ggml.eos_token_id": trainer.eos_id,
            "tokenizer.ggml.unknown_token_id": trainer.unk_id}
    return meta | ({} if add_space_prefix is None else {"tokenizer.ggml.add_space_prefix": add_space_prefix})


@pytest.mark.parametrize("prefix", [None, False])
def test_a_gguf_sentencepiece_vocabulary_gives_sentencepieces_ids(tmp_path, prefix):
    model = trained(tmp_path, "llama", add_dummy_prefix=prefix is not False)
    reference = spm.SentencePieceProcessor(model_file=str(model))
    ours = tokenizer_from_gguf(gguf_metadata(model, prefix))
    assert (ours.bos_id, ours.eos_id, ours.stop_ids) == (1, 2, (2,))
    for text in HELD_OUT + COMPATIBILITY:
        assert ours.encode(text) == reference.encode(text), text
        assert ours.decode(ours.encode(text)) == reference.decode(reference.encode(text)), text


def test_gemmas_user_defined_end_of_turn_is_a_stop_and_one_token(tmp_path):
    model = trained(tmp_path, "llama", add_dummy_prefix=False, user_defined_symbols=["<start_of_turn>",
                                                                                   "<end_of_turn>"])
    reference = spm.SentencePieceProcessor(model_file=str(model))
    ours = tokenizer_from_gguf(gguf_metadata(model, add_space_prefix=False))
    end = reference.piece_to_id("<end_of_turn>")
    assert ours.stop_ids == (2, end)
    text = "<start_of_turn>user\nHello 12 ☃<end_of_turn>\n"
    assert ours.encode(text) == reference.encode(text)


@pytest.mark.parametrize("newline_pieces", [False, True])
def test_a_gguf_sentencepiece_vocabulary_cached_as_tables_loads_back(tmp_path, newline_pieces):
    """lmlab's GGUF caches keep a BPE as its tables where they can hold it; Gemma's newline pieces they cannot,
    so that vocabulary is kept as tokenizer.json."""
    meta = gguf_metadata(trained(tmp_path, "llama"))
    if newline_pieces:
        tokens = meta["tokenizer.ggml.tokens"]
        meta["tokenizer.ggml.tokens"] = tokens[:-2] + ["\n", "\n\n"]
    ours = tokenizer_from_gguf(meta)
    (tmp_path / "cache").mkdir()
    ours.save(tmp_path / "cache", tables=True)
    assert (tmp_path / "cache" / "tokenizer.json").is_file() == newline_pieces
    again = TextTokenizer.from_dir(tmp_path / "cache")
    for text in HELD_OUT + COMPATIBILITY + ["a\n\n\nb"]:
        assert again.encode(text) == ours.encode(text), text


def test_a_malformed_sentencepiece_vocabulary_is_one_line(tmp_path):
    meta = gguf_metadata(trained(tmp_path, "llama"))
    with pytest.raises(LmlabError, match=r"tokenizer\.ggml\.scores holds 3 scores for 500 tokens"):
        tokenizer_from_gguf(meta | {"tokenizer.ggml.scores": [0.0, 1.0, 2.0]})
    with pytest.raises(LmlabError, match="scores' is not a list of float"):
        tokenizer_from_gguf(meta | {"tokenizer.ggml.scores": None})
    with pytest.raises(LmlabError, match="add_space_prefix is not true or false"):
        tokenizer_from_gguf(meta | {"tokenizer.ggml.add_space_prefix": "yes"})
    with pytest.raises(LmlabError, match="type 'bert' is not supported; lmlab reads .*'gpt2'.*'llama'"):
        tokenizer_from_gguf(meta | {"tokenizer.ggml.model": "bert"})


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(a GGUF file llama.cpp's own converter wrote, the tiny random Llama directory it wrote it from, whose
    tokenizer is a trained tokenizer.model and no tokenizer.json)."""
    transformers = pytest.importorskip("transformers")
    tmp_path = tmp_path_factory.mktemp("converted")
    converter = extracted_converter(tmp_path / "llama.cpp")
    hf_dir = tmp_path / "llama"
    config = transformers.LlamaConfig(vocab_size=500, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    transformers.LlamaForCausalLM(config).save_pretrained(hf_dir)
    shutil.copy(trained(tmp_path, "llama"), hf_dir / "tokenizer.model")
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "legacy": False}))
    return convert_hf_to_gguf(converter, hf_dir, tmp_path / "llama.gguf"), hf_dir


@pytest.mark.slow
def test_a_gguf_written_by_llama_cpps_converter_gives_transformers_ids(converted):
    """Texts that start with a space are compared with sentencepiece: transformers' LlamaTokenizer built from
    tokenizer.model leaves out the prefix space there (see test_sentencepiece_dirs.py), llama.cpp does not."""
    transformers = pytest.importorskip("transformers")
    gguf, hf_dir = converted
    metadata = read_gguf(gguf).metadata
    assert metadata["tokenizer.ggml.model"] == "llama"
    ours = tokenizer_from_gguf(metadata)
    theirs = transformers.AutoTokenizer.from_pretrained(hf_dir)
    sentencepiece = spm.SentencePieceProcessor(model_file=str(hf_dir / "tokenizer.model"))
    for text in HELD_OUT + COMPATIBILITY:
        expected = sentencepiece.encode(text) if text[:1].isspace() else theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text


@pytest.mark.slow
def test_a_gguf_written_by_llama_cpps_converter_gives_llama_cpps_ids(converted):
    """Special tokens inside the text too: llama.cpp puts the prefix space after each, and so does lmlab."""
    llama_cpp = pytest.importorskip("llama_cpp")
    gguf, _ = converted
    reference = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    ours = tokenizer_from_gguf(read_gguf(gguf).metadata)
    for text in HELD_OUT + COMPATIBILITY + ["a</s>b <s> c", "x<unk>y"]:
        assert ours.encode(text) == reference.tokenize(text.encode(), add_bos=False, special=True), text
