"""The API's request bodies are checked on arrival: each bad number or string is a ValidationError (the
server's 400) at the field it is in, and each sampling setting outside `GenerationConfig`'s ranges is an
ApiError naming its API field."""

import json

import pytest
from pydantic import ValidationError

from lmlab.inference.openai_api import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    generation_config,
    parse_body,
)

PROMPT = {"model": "m", "prompt": "1+"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SURROGATE = "ba\ud800"  # json.dumps writes it as JSON's "ba\ud800" escape, as a client may send it


def body(fields: dict) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize("model, fields, field, where", [
    (CompletionRequest, {**PROMPT, "prompt": SURROGATE}, "prompt", ""),
    (CompletionRequest, {**PROMPT, "prompt": ["ok", SURROGATE]}, "prompt", "[1]"),
    (CompletionRequest, {**PROMPT, "model": SURROGATE}, "model", ""),
    (CompletionRequest, {**PROMPT, "stop": ["x", SURROGATE]}, "stop", "[1]"),
    (CompletionRequest, {**PROMPT, "user": SURROGATE}, "user", ""),
    (CompletionRequest, {**PROMPT, "logit_bias": {SURROGATE: 1}}, "logit_bias", "key"),
    (ChatRequest, {**CHAT, "messages": [{"role": "user", "content": SURROGATE}]}, "messages", "[0].content"),
    (ChatRequest, {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]},
     "messages", "[0].content[0].text"),
    (ChatRequest, {**CHAT, "response_format": {"type": SURROGATE}}, "response_format", ".type"),
    (EmbeddingRequest, {"model": "e", "input": ["a", SURROGATE]}, "input", "[1]"),
])
def test_a_lone_surrogate_anywhere_is_refused_at_its_field(model, fields, field, where):
    with pytest.raises(ValidationError) as caught:
        parse_body(model, body(fields))
    error = caught.value.errors()[0]
    assert (error["type"], error["loc"]) == ("lone_surrogate", (field,))
    assert "U+D800" in error["msg"] and (f"at {where}:" in error["msg"] if where else " at " not in error["msg"])
    error["msg"].encode("utf-8")  # the message itself is sendable


@pytest.mark.parametrize("fields, field", [
    ({**PROMPT, "temperature": float("nan")}, "temperature"),
    ({**PROMPT, "top_p": float("inf")}, "top_p"),
    ({**PROMPT, "seed": 2**64}, "seed"),
    ({**PROMPT, "seed": -2**63 - 1}, "seed"),
    ({**PROMPT, "seed": 10**30}, "seed"),
    ({**PROMPT, "max_tokens": 10**30}, "max_tokens"),
    ({**PROMPT, "presence_penalty": float("-inf")}, "presence_penalty"),
])
def test_numbers_out_of_range_are_refused_at_their_field(fields, field):
    with pytest.raises(ValidationError) as caught:
        parse_body(CompletionRequest, body(fields))
    assert caught.value.errors()[0]["loc"][0] == field


def test_invalid_json_stays_invalid_json():
    for text in (b'{"model": ', b"[" * 100_000, b'{"model": "m", "prompt": "\xff"}'):
        with pytest.raises(ValidationError) as caught:
            parse_body(CompletionRequest, text)
        assert caught.value.errors()[0]["type"] == "json_invalid"


def test_valid_text_passes_and_surrogate_pairs_are_characters():
    request = parse_body(CompletionRequest, b'{"model": "m", "prompt": "ok \\ud83d\\ude00", "seed": -1}')
    assert request.prompt == "ok \U0001F600" and request.seed == -1


@pytest.mark.parametrize("settings, param", [
    ({"temperature": 1e-45}, "temperature"),
    ({"temperature": 1e-310}, "temperature"),
    ({"temperature": 0.005}, "temperature"),
])
def test_sampling_settings_outside_their_range_name_their_field(settings, param):
    request = CompletionRequest(**PROMPT, **settings)
    with pytest.raises(ApiError) as caught:
        generation_config(request, 8, ())
    assert (caught.value.status, caught.value.param) == (400, param)
    assert caught.value.message.startswith(f"{param} ")


@pytest.mark.parametrize("settings", [{"temperature": 0.01}, {"temperature": 1, "top_p": 1e-300},
                                      {"temperature": 1, "seed": 2**64 - 1}, {"temperature": 1, "seed": -2**63}])
def test_the_edges_of_each_range_are_taken(settings):
    assert generation_config(CompletionRequest(**PROMPT, **settings), 8, ()).max_new_tokens == 8
