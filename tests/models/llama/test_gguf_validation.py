"""A damaged or hostile GGUF file is refused with one line before it is used: tensor byte ranges,
metadata types and ranges, layer counts, the tokenizer, non-finite weights; and the conversion
cache is keyed on the file's content, never its name or mtime."""

import os
import struct

import gguf
import pytest
import torch

from conftest import lmlab, one_line_error
from gguf_files import IDS, TEXTS, logits, tiny_model, write_gguf
from lmlab.errors import LmlabError
from lmlab.models.llama import gguf_file as lmlab_gguf
from lmlab.models.load import load
from lmlab.tokenizers.bpe import train_bpe


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 20, vocab_size=300)


@pytest.fixture
def clean(tmp_path, tokenizer):
    return write_gguf(tmp_path / "m.gguf", tiny_model(tokenizer.get_vocab_size()), tokenizer)


def _value_offset(reader: gguf.GGUFReader, key: str) -> int:
    """The byte offset of the (scalar) value of metadata `key`."""
    field = reader.fields[key]
    return field.offset + sum(part.nbytes for part in field.parts[:-1])


def _tensor_info_offset(reader: gguf.GGUFReader, name: str) -> tuple[int, int]:
    """The byte offsets of tensor `name`'s type field and of its data-offset field."""
    field = next(t for t in reader.tensors if t.name == name).field
    type_at = field.offset + sum(part.nbytes for part in field.parts[:4])
    return type_at, type_at + 4


def mutant(path, edits: list[tuple[int, bytes]]):
    data = bytearray(path.read_bytes())
    for at, new in edits:
        data[at:at + len(new)] = new
    out = path.with_name("mutant.gguf")
    out.write_bytes(bytes(data))
    return out


def metadata_mutant(path, key, fmt, value):
    return mutant(path, [(_value_offset(gguf.GGUFReader(path), key), struct.pack(fmt, value))])


@pytest.mark.parametrize("key, fmt, value, fragment", [
    ("llama.attention.layer_norm_rms_epsilon", "<f", float("nan"), "layer_norm_rms_epsilon'=nan"),
    ("llama.attention.layer_norm_rms_epsilon", "<f", -1.0, "layer_norm_rms_epsilon'=-1.0"),
    ("llama.attention.layer_norm_rms_epsilon", "<f", 0.0, "layer_norm_rms_epsilon'=0.0"),
    ("llama.rope.freq_base", "<f", float("nan"), "freq_base'=nan"),
    ("llama.rope.freq_base", "<f", float("-inf"), "freq_base'=-inf"),
    ("llama.rope.freq_base", "<f", 0.0, "freq_base'=0.0"),
    ("llama.block_count", "<I", 10**6, "block_count=1000000"),
    ("llama.block_count", "<I", 1, "block_count=1 but the tensors hold layers 0-1"),
    ("llama.context_length", "<I", 2**32 - 1, "context_length=4294967295"),
    ("llama.context_length", "<I", 0, "context_length'=0"),
    ("llama.attention.head_count", "<I", 3, "do not divide"),
    ("llama.attention.head_count_kv", "<I", 3, "do not divide"),
    ("llama.feed_forward_length", "<I", 100, "gate_up.weight has shape (512, 64) but the config needs (200, 64)"),
    ("llama.embedding_length", "<I", 2**20,
     "'llama.rope.dimension_count'=16 differs from embedding_length / head_count = 262144"),
])
def test_bad_hyperparameter_is_refused(clean, key, fmt, value, fragment):
    with pytest.raises(LmlabError) as error:
        load(metadata_mutant(clean, key, fmt, value))
    assert fragment in str(error.value), error.value


@pytest.mark.parametrize("change", ["dtype F16", "dtype Q8_0", "offset of another tensor", "offset past the end",
                                    "offset shifted by one block"])
def test_tensor_whose_bytes_do_not_tile_the_file_is_refused(clean, change):
    reader = gguf.GGUFReader(clean)
    type_at, offset_at = _tensor_info_offset(reader, "blk.0.attn_q.weight")
    other = next(t for t in reader.tensors if t.name == "blk.1.ffn_up.weight").data_offset - reader.data_offset
    edit = {"dtype F16": (type_at, struct.pack("<I", gguf.GGMLQuantizationType.F16)),
            "dtype Q8_0": (type_at, struct.pack("<I", gguf.GGMLQuantizationType.Q8_0)),
            "offset of another tensor": (offset_at, struct.pack("<Q", other)),
            "offset past the end": (offset_at, struct.pack("<Q", 2**40)),
            "offset shifted by one block": (offset_at, struct.pack("<Q", other - 32))}[change]
    with pytest.raises(LmlabError, match="damaged|truncated|not a readable GGUF"):
        load(mutant(clean, [edit]))


def test_nan_weight_is_refused_naming_the_tensor(clean):
    reader = gguf.GGUFReader(clean)
    at = next(t for t in reader.tensors if t.name == "blk.1.ffn_down.weight").data_offset
    with pytest.raises(LmlabError, match="blk.1.ffn_down.weight holds NaN"):
        load(mutant(clean, [(at, struct.pack("<f", float("nan")))]))


def _tokenizer_mutant(tmp_path, tokenizer, **changes):
    """The tiny model's GGUF with some tokenizer metadata replaced."""
    model = tiny_model(tokenizer.get_vocab_size())
    path = tmp_path / "tok.gguf"
    original_add = gguf.GGUFWriter.add_token_merges
    with pytest.MonkeyPatch.context() as patch:
        if "merges" in changes:
            patch.setattr(gguf.GGUFWriter, "add_token_merges", lambda self, m: original_add(self, changes["merges"]))
        if "eos" in changes:
            patch.setattr(gguf.GGUFWriter, "add_eos_token_id", lambda self, i: self.add_uint32(
                "tokenizer.ggml.eos_token_id", changes["eos"]))
        return write_gguf(path, model, tokenizer)


@pytest.mark.parametrize("changes, fragment", [
    ({"merges": ["a"]}, "tokenizer.ggml.merges holds 'a'"),
    ({"merges": ["zz qq"]}, "tokenizer.ggml.merges holds 'zz qq'"),
    ({"eos": 10**6}, "eos_token_id=1000000"),
])
def test_malformed_tokenizer_is_one_line(tmp_path, tokenizer, capsys, changes, fragment):
    path = _tokenizer_mutant(tmp_path, tokenizer, **changes)
    assert lmlab("generate", "--model", path, "--prompt", "the cat", "--max-new-tokens", "2") == 2
    one_line_error(capsys, fragment)


def test_tokenizer_larger_than_the_embedding_is_refused(tmp_path, tokenizer):
    model = tiny_model(tokenizer.get_vocab_size() - 10)  # 10 token ids would have no embedding row
    with pytest.raises(LmlabError, match="tokenizer has 300 tokens but token_embd.weight only 290 rows"):
        load(write_gguf(tmp_path / "m.gguf", model, tokenizer))


def test_files_with_the_same_name_size_and_mtime_do_not_share_a_conversion(tmp_path, tokenizer):
    first, second = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    first.parent.mkdir(), second.parent.mkdir()
    write_gguf(first, tiny_model(tokenizer.get_vocab_size(), seed=0), tokenizer)
    write_gguf(second, tiny_model(tokenizer.get_vocab_size(), seed=1), tokenizer)
    stat = first.stat()
    os.utime(second, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert second.stat().st_size == stat.st_size and second.stat().st_mtime_ns == stat.st_mtime_ns
    loaded_first, _ = load(first)
    loaded_second, _ = load(second)
    expected = tiny_model(tokenizer.get_vocab_size(), seed=1)
    assert (logits(loaded_second, IDS) - logits(expected, IDS)).abs().max().item() <= 1e-5
    assert not torch.equal(logits(loaded_first, IDS), logits(loaded_second, IDS))
    assert lmlab_gguf.converted_dir(first) != lmlab_gguf.converted_dir(second)


def test_a_refused_file_leaves_no_conversion_in_the_cache(clean):
    bad = metadata_mutant(clean, "llama.rope.freq_base", "<f", float("nan"))
    with pytest.raises(LmlabError):
        load(bad)
    assert not list(lmlab_gguf.cache_dir("gguf").iterdir())


def test_cli_refuses_a_damaged_file_with_one_line(clean, capsys):
    path = metadata_mutant(clean, "llama.attention.layer_norm_rms_epsilon", "<f", float("nan"))
    assert lmlab("generate", "--model", path, "--prompt", "the cat", "--max-new-tokens", "2") == 2
    one_line_error(capsys, "mutant.gguf", "layer_norm_rms_epsilon")
