"""The OpenAI API's shapes: request bodies (checked on arrival), the error object, and the mapping
of a request's sampling fields onto a `GenerationConfig`.

Field names, defaults and limits are OpenAI's, so the official clients work unchanged: temperature
defaults to 1 and 0 means greedy, top_p is in (0, 1], `stop` is one string or a list. Fields that
would change the output in a way lmlab cannot honour (n > 1, penalties, logit_bias, echo, tools, …)
are refused with a 400 that names them rather than silently ignored; unknown extra fields are ignored,
as OpenAI does.

Everything is checked here, before the engine sees the request: every number is finite and in its
range (the sampling settings by `GenerationConfig`'s own rules, named by their API field), and every
string, wherever it sits in the body, is Unicode text (JSON's "\ud800" escape decodes to a lone
surrogate, which no tokenizer or UTF-8 encoder takes).
"""

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from lmlab.config_checks import MAX_CONTEXT, MAX_RAG_TOP, SettingError
from lmlab.errors import LmlabError
from lmlab.generation.config import SEED_RANGE, GenerationConfig

API_FIELDS = {"max_new_tokens": "max_tokens", "stop_strings": "stop"}  # GenerationConfig fields named otherwise here


class ApiError(Exception):
    """A request the server answers with OpenAI's error object `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class ApiModel(BaseModel):
    """A request body or a part of one: floats must be finite, and no string anywhere in a field's
    value (list items, dict keys and values included) may hold a lone surrogate."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _unicode_only(cls, value: Any, info: ValidationInfo) -> Any:
        if info.mode == "json":  # pydantic's JSON parser has refused lone surrogates already
            return value
        found = _lone_surrogate(value)
        if found is not None:
            where, char = found
            raise PydanticCustomError("lone_surrogate", "a lone surrogate ({char}){where}: half of a UTF-16 pair, "
                                      "not a character; send valid Unicode text",
                                      {"char": char, "where": f" at {where}" if where else ""})
        return value


def parse_body(model: type[ApiModel], body: bytes) -> ApiModel:
    """The JSON `body` as `model`, or pydantic's ValidationError naming the first bad field.

    pydantic's own JSON parser refuses a lone surrogate ("\\ud800") or a NaN as invalid JSON, with no
    field to name; Python's parser takes both, so such a body is checked from its objects instead,
    where the field's own check (`ApiModel`) names it."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        if error.errors()[0]["type"] != "json_invalid":
            raise
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # not JSON for Python either: pydantic's message says where
            raise error from None
    return model.model_validate(data)


def _lone_surrogate(value: Any) -> tuple[str, str] | None:
    """(where in `value` it is, e.g. "[0].content", and the code point as U+XXXX) of the first lone
    surrogate in `value`'s strings, list items, dict keys and values; None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # surrogates are the only code points UTF-8 cannot encode
        except UnicodeEncodeError as e:
            return "", f"U+{ord(value[e.start]):04X}"
        return None
    if isinstance(value, dict):
        children = [(" key", key) for key in value] + [(f".{key}", item) for key, item in value.items()]
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return None
    for step, child in children:
        if isinstance(child, (str, list, dict)) and (found := _lone_surrogate(child)):
            where = f"[{step}]" if isinstance(step, int) else step
            return (where + found[0]).strip(), found[1]
    return None


class StreamOptions(ApiModel):
    include_usage: bool = False  # a last chunk with no choices and the request's token counts


class SamplingRequest(ApiModel):
    """The fields completions and chat completions share."""

    model: str
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_CONTEXT)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # accepted and ignored, as an end-user id for the caller's own records

    def refuse_unsupported(self) -> None:
        """A 400 naming the first field set to something lmlab does not do."""
        unsupported = {"n": self.n != 1, "presence_penalty": self.presence_penalty != 0,
                       "frequency_penalty": self.frequency_penalty != 0, "logit_bias": bool(self.logit_bias)}
        for name, is_set in unsupported.items():
            if is_set:
                raise ApiError(400, f"{name} is not supported by this server; leave it at its default", param=name)


class CompletionRequest(SamplingRequest):
    """POST /v1/completions: continue `prompt` (text, or token ids; one prompt per request)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        for name, is_set in {"echo": self.echo, "suffix": self.suffix is not None,
                             "best_of": self.best_of not in (None, 1)}.items():
            if is_set:
                raise ApiError(400, f"{name} is not supported by this server; leave it at its default", param=name)


class TextPart(ApiModel):
    type: Literal["text"]
    text: str


class Message(ApiModel):
    role: Literal["system", "developer", "user", "assistant"]  # developer is OpenAI's newer name for system
    content: str | list[TextPart]

    def as_template_message(self) -> dict:
        """The {"role", "content"} dict a chat template reads (text parts joined, developer as system)."""
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class RagOptions(ApiModel):
    """A chat request's `"rag": {"top": N}` (lmlab's own field): retrieve N passages for this request."""

    top: int = Field(ge=1, le=MAX_RAG_TOP)


class ChatRequest(SamplingRequest):
    """POST /v1/chat/completions: the assistant's next turn after `messages`."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_CONTEXT)  # OpenAI's newer name for max_tokens
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    rag: bool | RagOptions | None = None  # lmlab's own: retrieval on (true, {"top": N}) or off (false); None: the server's

    @field_validator("rag", mode="before")
    @classmethod
    def _rag_shape(cls, value: Any) -> Any:
        """One message for any bad "rag" (not one per branch of the union)."""
        if value is None or isinstance(value, bool) or (isinstance(value, dict) and set(value) == {"top"} and
                                                        type(value["top"]) is int and
                                                        1 <= value["top"] <= MAX_RAG_TOP):
            return value
        raise PydanticCustomError("rag", "give true, false or {options}",
                                  {"options": f'{{"top": N}} with N in 1..{MAX_RAG_TOP}'})

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.tools:
            raise ApiError(400, "tools are not supported by this server", param="tools")
        if self.tool_choice not in (None, "none"):
            raise ApiError(400, "tool_choice is not supported by this server", param="tool_choice")
        if self.response_format and self.response_format.get("type") != "text":
            raise ApiError(400, "only response_format {\"type\": \"text\"} is supported", param="response_format")
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")


class EmbeddingRequest(ApiModel):
    """POST /v1/embeddings: one unit-length vector per input text."""

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def generation_config(request: SamplingRequest, max_new_tokens: int, stop_ids: tuple[int, ...],
                      extra_stops: tuple[str, ...] = ()) -> GenerationConfig:
    """The engine's settings for `request`: OpenAI's temperature default of 1, greedy at 0 (where
    top_p has no effect, so it is dropped), the request's stop strings and then `extra_stops`."""
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if any(not s for s in stops):
        raise ApiError(400, "stop strings must not be empty", param="stop")
    temperature = 1.0 if request.temperature is None else request.temperature
    top_p = request.top_p if temperature > 0 and request.top_p not in (None, 1) else None
    try:
        return GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                eos_id=stop_ids, stop_strings=(*stops, *extra_stops), seed=request.seed)
    except SettingError as e:  # a value outside the range sampling works in, e.g. temperature 1e-45
        param = API_FIELDS.get(e.field, e.field)
        raise ApiError(400, f"{param} {e.value} {e.problem}", param=param) from None
    except LmlabError as e:
        raise ApiError(400, str(e)) from None
