"""Text out: streamed pieces never split a character or show a stop string, join to the final text,
and stop strings end generation with the text cut just before them."""

import pytest
import torch

from lmlab.data.markov import markov_corpus
from lmlab.generation import GenerationConfig, generate_batch, stream_text
from lmlab.generation.detokenize import IncrementalDetokenizer
from lmlab.models.decoder import build_decoder
from lmlab.models.presets import preset
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

UNICODE = "héllo wörld — 日本語 🙂 naïve café"


@pytest.fixture(scope="module")
def tokenizer():
    return TextTokenizer(train_bpe(markov_corpus(100, seed=3)[0] + [UNICODE], 300), eos_id=1, stop_ids=(1,))


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return build_decoder(preset("gpt2-tiny", vocab_size=tokenizer.vocab_size, context_length=64, n_layers=1,
                                d_model=32, n_heads=2, d_ff=64)).eval()


def stream(tokenizer, text, stops=()):
    """Feed the tokens of `text` one at a time; the pieces, the final piece and the detokenizer."""
    detok = IncrementalDetokenizer(tokenizer, stops)
    pieces = [detok.add(t) for t in tokenizer.encode(text)]
    return pieces, detok.finish(), detok


def test_pieces_never_split_a_character_and_join_to_the_text(tokenizer):
    ids = tokenizer.encode(UNICODE)
    assert any("\ufffd" in tokenizer.decode([t]) for t in ids)  # some tokens hold part of a character
    pieces, last, _ = stream(tokenizer, UNICODE)
    assert not any("\ufffd" in p for p in pieces)
    assert "".join(pieces) + last == UNICODE and last == ""


def test_spaces_survive_sentencepiece_style_decoding():
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    backend.train_from_iterator(["hello world again and again", "the world is big"],
                                trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>"], show_progress=False))
    tokenizer = TextTokenizer(backend)
    text = "hello world again"
    assert "".join(tokenizer.decode([t]) for t in tokenizer.encode(text)) != text  # token by token loses spaces
    pieces, last, _ = stream(tokenizer, text)
    assert "".join(pieces) + last == text


def test_stop_string_is_cut_and_never_shown(tokenizer):
    pieces, last, detok = stream(tokenizer, "Zini pori. 日本語 teme", stops=("日本",))
    assert "".join(pieces) + last == "Zini pori. " == detok.text
    assert detok.stopped_by == "日本"


def test_text_that_might_start_a_stop_string_waits_then_shows(tokenizer):
    detok = IncrementalDetokenizer(tokenizer, ("STOP",))
    shown = "".join(detok.add(t) for t in tokenizer.encode("Zini STO"))
    assert shown == "Zini "  # "STO" could become "STOP": held back
    shown += "".join(detok.add(t) for t in tokenizer.encode("x pori"))
    assert shown + detok.finish() == "Zini STOx pori" and not detok.stopped


def test_earliest_of_several_stop_strings_wins(tokenizer):
    _, _, detok = stream(tokenizer, "Zini pori. Segura teme.", stops=("teme", "."))
    assert (detok.text, detok.stopped_by) == ("Zini pori", ".")


def test_stream_joins_to_batch_text_and_stop_string_ends_generation(model, tokenizer):
    prompt = tokenizer.encode("Zini pori")
    config = GenerationConfig(max_new_tokens=40, temperature=1.0, seed=3, eos_id=tokenizer.stop_ids)
    full = generate_batch(model, [prompt], config, tokenizer)[0]
    assert full.text == "".join(stream_text(model, tokenizer, prompt, config))
    stop = full.text.strip()[len(full.text.strip()) // 2:][:2]  # two characters from the middle
    assert stop.strip()
    config = GenerationConfig(**{**config.__dict__, "stop_strings": (stop,)})
    cut = generate_batch(model, [prompt], config, tokenizer)[0]
    assert cut.text == full.text[:full.text.index(stop)]
    assert (cut.finish_reason, cut.stop) == ("stop", stop)
    assert cut.token_ids == full.token_ids[:len(cut.token_ids)] and len(cut.token_ids) < len(full.token_ids)
    assert "".join(stream_text(model, tokenizer, prompt, config)) == cut.text


def test_batch_rows_stop_at_their_own_stop_strings(model, tokenizer):
    prompts = [tokenizer.encode("Zini"), tokenizer.encode("Segura teme")]
    config = GenerationConfig(max_new_tokens=30, temperature=1.0, seed=0, eos_id=tokenizer.stop_ids)
    free = generate_batch(model, prompts, config, tokenizer)
    stop = next(free[0].text[i:i + 2] for i in range(5, 30) if free[0].text[i:i + 2] not in free[1].text)
    assert stop.strip()
    cut = generate_batch(model, prompts, GenerationConfig(**{**config.__dict__, "stop_strings": (stop,)}), tokenizer)
    assert cut[0].text == free[0].text[:free[0].text.index(stop)] and cut[0].finish_reason == "stop"
    assert cut[1] == free[1]
