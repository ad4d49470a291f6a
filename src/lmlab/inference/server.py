"""An OpenAI-compatible HTTP API over the continuous-batching `Engine`, and the web chat at `/`.

    app = create_app(engine, tokenizer, "smollm2", context_length=8192)
    uvicorn.run(app, host="127.0.0.1", port=8000)     # what `lmlab serve` does

Routes: GET /v1/models, POST /v1/completions, /v1/chat/completions (streamed over server-sent events
with `"stream": true`), /v1/embeddings (with an `Embedder`), GET /health, /metrics (Prometheus) and
/ (the chat page). `guard.RequestGuard` checks each request's Host and API key and reads its body
(bounded in size and time); what may take long (parsing the body, rendering the chat template,
tokenizing, embedding) runs in a thread (`offload.off_loop`), so the event loop always answers at once;
the engine's own thread does the decoding. A request whose client goes away is cancelled, so its slot is freed between
two steps. Errors come back as OpenAI's error object with a 4xx status (5xx: a bug or an engine failure),
mid-stream as a last `data: {"error": …}` event.

With LoRA adapters attached to the engine (`adapter_names`), /v1/models lists the base model and each
adapter, and a request's `model` field picks one; an unknown name is a 404 for that request alone.

A chat reply is rendered exactly as `lmlab chat` renders it: the model's own template, its stop ids,
the fallback template's extra stop string, and the reply's leading whitespace dropped.

With a `Retrieval` (`lmlab serve --rag INDEX`), a chat request's last user message is first rewritten
to carry the passages retrieved for it (`lmlab.rag.prompt`), and the response carries them in a field
of its own, `sources` (streamed: in the first chunk). The request's own `"rag"` field turns it off
(`false`) or sets how many passages (`{"top": N}`); a server without an index refuses `"rag": true`.
"""

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from lmlab.errors import LmlabError
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.inference.guard import Access, RequestGuard, body_limit
from lmlab.inference.metrics import MetricsMiddleware, ServerMetrics
from lmlab.inference.offload import off_loop
from lmlab.inference.openai_api import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    RagOptions,
    SamplingRequest,
    generation_config,
    parse_body,
)
from lmlab.models.bert.model import BertEncoder
from lmlab.tokenizers.chat import chat_prompt, chat_stop_strings
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Tokenizer

log = logging.getLogger(__name__)
COMPLETION_DEFAULT_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions (chat: the rest of the context)
_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "TextPart"}  # pydantic's names of union branches
ENDPOINTS = {"/", "/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings"}
MAX_STOPS = 16  # stop strings per request (OpenAI takes 4): each is looked for after every token
MAX_STOP_CHARS = 1000  # characters of one stop string
MAX_EMBEDDING_INPUTS = 2048  # texts per /v1/embeddings request, as OpenAI


@dataclass(frozen=True)
class Embedder:
    """A sentence encoder served at /v1/embeddings under the model id `name`."""

    name: str
    encoder: BertEncoder
    tokenizer: Tokenizer


@dataclass(frozen=True)
class Retrieval:
    """Retrieval for chat requests: `augment(messages, top)` gives the messages with `top` passages
    retrieved for the last user message, and those passages as JSON-ready dicts (the `sources`);
    `top` is how many a request gets unless its `"rag": {"top": N}` says."""

    augment: Callable[[list[dict], int], tuple[list[dict], list[dict]]]
    top: int


def create_app(engine, tokenizer: TextTokenizer, model_name: str, context_length: int,
               embedder: Embedder | None = None, access: Access = Access(),
               adapter_names: tuple[str, ...] = (), retrieval: Retrieval | None = None) -> FastAPI:
    """The FastAPI app serving `engine` (started by the caller) as the model `model_name`; `tokenizer`
    is the model's, `context_length` its longest sequence (prompt + reply); `access`: which Host names
    it answers to and its API key (default: local names only, no key); `adapter_names`: the model ids of
    the engine's LoRA adapters, in their order (adapter k is `adapter_names[k]`); `retrieval`: passages
    retrieved into chat requests (`lmlab serve --rag`)."""
    app = FastAPI(title="lmlab", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = ServerMetrics(engine.stats)
    app.add_middleware(RequestGuard, access=access, max_body_bytes=body_limit(context_length))
    app.add_middleware(MetricsMiddleware, metrics=metrics, endpoints=ENDPOINTS)  # outermost: counts refusals too
    generator = _Generator(engine, tokenizer, (model_name, *adapter_names), context_length, metrics, retrieval)
    embed_lock = asyncio.Lock()  # one batch of embeddings at a time: each uses every core
    page = (files("lmlab.inference") / "web" / "index.html").read_text(encoding="utf-8")
    created = int(time.time())
    decoders = [model_name, *adapter_names]
    names = decoders + ([embedder.name] if embedder else [])

    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _server_error)

    @app.get("/", response_class=HTMLResponse)
    async def web_chat():
        return page

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_name}

    @app.get("/metrics")
    async def prometheus_metrics():
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [_model_card(name, created) for name in names]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str):
        _check_model(name, names)
        return _model_card(name, created)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _parsed(CompletionRequest, request)
        _check_model(body.model, decoders)
        return await generator.completion(body, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await _parsed(ChatRequest, request)
        _check_model(body.model, decoders)
        return await generator.chat(body, request)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await _parsed(EmbeddingRequest, request)
        if embedder is None:
            raise ApiError(404, f"this server has no embedding model (it serves {model_name}); start it with "
                                "--embedding-model", param="model", code="model_not_found")
        return await _embeddings(embedder, body, embed_lock)

    return app


async def _api_error(request: Request, error: ApiError) -> JSONResponse:
    """An `ApiError` raised by a route: OpenAI's error object with its status."""
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    """Starlette's own refusals (an unknown path: 404, a wrong method: 405) as OpenAI's error object."""
    code = "not_found" if error.status_code == 404 else None
    return JSONResponse(ApiError(error.status_code, f"{request.method} {request.url.path}: {error.detail}",
                                 code=code).body(), status_code=error.status_code)


async def _server_error(request: Request, error: Exception) -> JSONResponse:
    """A bug or an engine failure: logged with its traceback, answered as a 500 in OpenAI's error object."""
    log.exception("%s %s failed", request.method, request.url.path)
    return JSONResponse(ApiError(500, f"internal error: {type(error).__name__}: {error}").body(), status_code=500)


async def _embeddings(embedder: Embedder, body: EmbeddingRequest, lock: asyncio.Lock) -> dict:
    """The /v1/embeddings response to `body`: its texts checked (a 400 naming the bad parameter), then
    tokenized and embedded in threads, one request at a time (`lock`: each batch uses every core)."""
    _check_model(body.model, [embedder.name])
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts or any(not t for t in texts):
        raise ApiError(400, "input must be a non-empty string or a non-empty list of non-empty strings",
                       param="input")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise ApiError(400, f"input holds {len(texts)} texts; send at most {MAX_EMBEDDING_INPUTS} per request",
                       param="input")
    if body.dimensions not in (None, embedder.encoder.config.d_model):
        raise ApiError(400, f"dimensions: {embedder.name} gives {embedder.encoder.config.d_model}-dimensional "
                            "embeddings only", param="dimensions")
    async with lock:
        tokens = await off_loop(_embedding_tokens, embedder, texts)
        vectors = await off_loop(sentence_embeddings, embedder.encoder, embedder.tokenizer, texts)
    return {"object": "list", "model": embedder.name,
            "data": [{"object": "embedding", "index": i, "embedding": _encode_vector(v, body.encoding_format)}
                     for i, v in enumerate(vectors.float().cpu().numpy())],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def _parsed(model: type[BaseModel], request: Request) -> BaseModel:
    """The request's JSON body as `model`, parsed and checked in a thread (a body of many small parts
    takes most of a second); a 400 naming the first bad field."""
    body = await request.body()
    try:
        return await off_loop(parse_body, model, body)
    except ValidationError as e:
        raise _validation_error(e.errors()) from None


def _embedding_tokens(embedder: Embedder, texts: list[str]) -> int:
    """The tokens of `texts` (for `usage`); a 400 naming the first text longer than the encoder's
    context, which it would otherwise cut silently."""
    encodings = embedder.tokenizer.encode_batch(texts)
    for i, encoding in enumerate(encodings):
        if encoding.overflowing:
            where = "input" if len(texts) == 1 else f"input[{i}]"
            raise ApiError(400, f"{where} has more tokens than {embedder.name} reads "
                                f"({embedder.encoder.config.context_length}); shorten or split it", param="input")
    return sum(sum(e.attention_mask) for e in encodings)


class _Generator:
    """What /v1/completions and /v1/chat/completions share: prompt -> engine request -> response or stream."""

    def __init__(self, engine, tokenizer: TextTokenizer, model_names: tuple[str, ...], context_length: int,
                 metrics: ServerMetrics, retrieval: Retrieval | None = None):
        self.engine = engine
        self.retrieval = retrieval
        self.tokenizer = tokenizer
        self.model_names = model_names  # the base model, then adapter k at k + 1
        self.context_length = context_length
        self.metrics = metrics
        # A text of more than this many characters has more tokens than the context (no token is longer
        # than the longest string in the vocabulary), so it is refused without being tokenized.
        self.max_prompt_chars = context_length * max(map(len, tokenizer.backend.get_vocab()), default=1)

    async def completion(self, body: CompletionRequest, http: Request):
        body.refuse_unsupported()
        _check_stops(body.stop)
        prompt_ids = await off_loop(self._completion_prompt, body.prompt)
        max_new = self._max_new_tokens(len(prompt_ids), body.max_tokens, "max_tokens", COMPLETION_DEFAULT_TOKENS,
                                     "prompt")
        config = generation_config(body, max_new, self.tokenizer.stop_ids)
        reply = _Reply("cmpl", "text_completion", body.model, self.tokenizer, chat=False)
        return await self._answer(body, http, prompt_ids, config, body.logprobs, reply)

    async def chat(self, body: ChatRequest, http: Request):
        body.refuse_unsupported()
        _check_stops(body.stop)
        messages = [m.as_template_message() for m in body.messages]
        top, sources = self._retrieval_top(body.rag), None
        if top is not None:
            messages, sources = await off_loop(self._retrieve, messages, top)
        prompt_ids = await off_loop(self._chat_prompt, messages)
        asked = body.max_completion_tokens or body.max_tokens
        param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
        max_new = self._max_new_tokens(len(prompt_ids), asked, param, None, "messages")
        config = generation_config(body, max_new, self.tokenizer.stop_ids, chat_stop_strings(self.tokenizer))
        top_logprobs = (body.top_logprobs or 0) if body.logprobs else None
        reply = _Reply("chatcmpl", "chat.completion", body.model, self.tokenizer, chat=True, sources=sources)
        return await self._answer(body, http, prompt_ids, config, top_logprobs, reply)

    def _retrieval_top(self, rag: bool | RagOptions | None) -> int | None:
        """The passages to retrieve for a request whose `"rag"` is `rag` (None: no retrieval); a 400 for
        retrieval asked of a server without an index."""
        if rag is False or (rag is None and self.retrieval is None):
            return None
        if self.retrieval is None:
            raise ApiError(400, "this server has no retrieval index; start it with lmlab serve --rag INDEX, or "
                                "leave \"rag\" out", param="rag")
        return rag.top if isinstance(rag, RagOptions) else self.retrieval.top

    def _retrieve(self, messages: list[dict], top: int) -> tuple[list[dict], list[dict]]:
        """The messages with passages, and the sources (run in a thread); a 400 for a chat with no user message."""
        if not any(m["role"] == "user" for m in messages):
            raise ApiError(400, "retrieval searches for the last user message and the messages hold none; add one "
                                "or send \"rag\": false", param="messages")
        return self.retrieval.augment(messages, top)

    def _chat_prompt(self, messages: list[dict]) -> list[int]:
        """Token ids of `messages` rendered by the model's chat template (run in a thread). Messages that
        could not fit the context (each takes a token at least, its text as `_encode` counts) are
        refused before the template runs."""
        chars = sum(len(m["content"]) for m in messages)
        if len(messages) > self.context_length or chars > self.max_prompt_chars:
            raise ApiError(400, f"messages hold {len(messages):,} messages of {chars:,} characters: more tokens than "
                                f"the model's context of {self.context_length}; shorten them", param="messages",
                           code="context_length_exceeded")
        try:
            text = chat_prompt(self.tokenizer, messages)
        except LmlabError as e:
            raise ApiError(400, str(e), param="messages") from None
        return self._encode(text, "messages", "the chat prompt (messages rendered by the model's template)")

    def _completion_prompt(self, prompt) -> list[int]:
        """Token ids of the one prompt a completion request holds (text or ids, maybe in a list of one;
        run in a thread). Ids are checked against the vocabulary when they fit the context (more are
        refused by `_max_new_tokens` without being read)."""
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ApiError(400, f"prompt holds {len(prompt)} prompts; this server takes one per request",
                               param="prompt")
            prompt = prompt[0]
        ids = self._encode(prompt, "prompt", "the prompt") if isinstance(prompt, str) else prompt
        if not ids:
            raise ApiError(400, "prompt is empty; give some text to continue", param="prompt")
        if len(ids) < self.context_length and not all(0 <= i < self.tokenizer.vocab_size for i in ids):
            raise ApiError(400, f"prompt holds token ids outside the vocabulary [0, {self.tokenizer.vocab_size})",
                           param="prompt")
        return ids

    def _encode(self, text: str, param: str, what: str) -> list[int]:
        """Token ids of `text`; a text too long in characters to fit the context is refused untokenized."""
        if len(text) > self.max_prompt_chars:
            raise ApiError(400, f"{what} has {len(text):,} characters: more tokens than the model's context of "
                                f"{self.context_length}; shorten it", param=param, code="context_length_exceeded")
        return self.tokenizer.encode(text)

    def _max_new_tokens(self, prompt_tokens: int, asked: int | None, param: str, default: int | None,
                        prompt_param: str) -> int:
        """The reply's token budget: `asked` (the field `param`), else `default` or the rest of the context;
        a 400 (context_length_exceeded) naming `prompt_param` when the prompt does not fit, `param` when
        the prompt and `asked` do not."""
        room = self.context_length - prompt_tokens
        if room < 1:
            raise ApiError(400, f"the prompt has {prompt_tokens} tokens and fills the model's context of "
                                f"{self.context_length}; shorten it", param=prompt_param,
                           code="context_length_exceeded")
        if asked is None:
            return min(room, default or room)
        if asked > room:
            raise ApiError(400, f"the prompt ({prompt_tokens} tokens) and {param} ({asked}) exceed the model's "
                                f"context of {self.context_length} tokens; ask for at most {room}", param=param,
                           code="context_length_exceeded")
        return asked

    async def _answer(self, body: SamplingRequest, http: Request, prompt_ids: list[int], config,
                      top_logprobs: int | None, reply: "_Reply"):
        arrived = time.perf_counter()
        try:
            request = self.engine.submit(prompt_ids, config, top_logprobs,
                                         adapter=self.model_names.index(body.model) - 1)
        except LmlabError as e:
            raise ApiError(400, str(e)) from None
        self.metrics.prompt_tokens.inc(len(prompt_ids))
        chunks = self._chunks(http, request, arrived)
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(reply.events(chunks, request, usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            text, logprobs, finish_reason = await reply.collect(chunks)
        except Exception as e:
            log.exception("generation failed")
            raise ApiError(500, f"generation failed: {type(e).__name__}: {e}") from None
        return reply.whole(text, logprobs, finish_reason, request)

    async def _chunks(self, http: Request, request, arrived: float):
        """The engine's chunks for `request`, which is cancelled if its client disconnects or the reader
        stops early; counts the tokens and the time to the first one."""
        watcher = asyncio.create_task(_cancel_on_disconnect(http, request))
        finished = first = False
        try:
            async for chunk in request:
                if chunk.token_ids and not first:
                    first = True
                    self.metrics.time_to_first_token.observe(time.perf_counter() - arrived)
                self.metrics.generated_tokens.inc(len(chunk.token_ids))
                finished = chunk.finish_reason is not None
                yield chunk
        finally:
            watcher.cancel()
            if not finished:
                request.cancel()


async def _cancel_on_disconnect(http: Request, request) -> None:
    """Wait for the client to go away, then cancel its engine request (the body is already read, so
    the next ASGI message is the disconnect)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass
    request.cancel()


class _Reply:
    """One answer in OpenAI's shapes, whole or as a stream of chunks: a text completion or a chat turn."""

    def __init__(self, id_prefix: str, kind: str, model_name: str, tokenizer: TextTokenizer, chat: bool,
                 sources: list[dict] | None = None):
        self.id = f"{id_prefix}-{uuid.uuid4().hex}"
        self.sources = sources  # the retrieved passages the prompt carried (lmlab serve --rag), or None
        self.kind = kind
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.chat = chat
        self.created = int(time.time())
        self.started = not chat  # a chat reply's leading whitespace is dropped, as `lmlab chat` does

    def _text(self, piece: str) -> str:
        if not self.started:
            piece = piece.lstrip()
            self.started = bool(piece)
        return piece

    async def collect(self, chunks) -> tuple[str, list, str | None]:
        """(text, token logprobs, finish reason) of the whole answer."""
        pieces, logprobs, finish_reason = [], [], None
        async for chunk in chunks:
            pieces.append(self._text(chunk.text))
            logprobs += chunk.logprobs
            finish_reason = chunk.finish_reason
        return "".join(pieces), logprobs, finish_reason

    def whole(self, text: str, logprobs: list, finish_reason: str | None, request) -> dict:
        """The non-streamed response body."""
        choice = {"index": 0, "finish_reason": finish_reason,
                  "logprobs": self._logprobs(logprobs, 0) if request.top_logprobs is not None else None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = {"id": self.id, "object": self.kind, "created": self.created, "model": self.model_name,
                "choices": [choice], "usage": _usage(request)}
        if self.sources is not None:
            body["sources"] = self.sources
        return body

    async def events(self, chunks, request, include_usage: bool):
        """The server-sent events of a streamed answer: a chunk per piece of text, the usage if asked
        for, then [DONE]; an engine failure ends the stream with an error event."""
        offset = 0  # characters streamed so far (a completion's logprobs give each token's text offset)
        try:
            if self.chat:
                yield self._event({"role": "assistant", "content": ""}, None, None, include_usage, self.sources)
            async for chunk in chunks:
                text = self._text(chunk.text)
                if not (text or chunk.logprobs or chunk.finish_reason):
                    continue
                logprobs = self._logprobs(chunk.logprobs, offset) if request.top_logprobs is not None else None
                offset += sum(len(self._token_text(lp.token_id)) for lp in chunk.logprobs)
                yield self._event({"content": text} if self.chat else text, logprobs, chunk.finish_reason,
                                  include_usage)
        except Exception as e:
            log.exception("generation failed mid-stream")
            yield _sse(ApiError(500, f"generation failed: {type(e).__name__}: {e}").body())
            return
        if include_usage:
            yield _sse({"id": self.id, "object": f"{self.kind}.chunk" if self.chat else self.kind,
                        "created": self.created, "model": self.model_name, "choices": [], "usage": _usage(request)})
        yield "data: [DONE]\n\n"

    def _event(self, content, logprobs, finish_reason: str | None, include_usage: bool,
               sources: list[dict] | None = None) -> str:
        choice = {"index": 0, "logprobs": logprobs, "finish_reason": finish_reason}
        choice["delta" if self.chat else "text"] = content
        data = {"id": self.id, "object": f"{self.kind}.chunk" if self.chat else self.kind, "created": self.created,
                "model": self.model_name, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        if sources is not None:
            data["sources"] = sources
        return _sse(data)

    def _token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def _logprobs(self, logprobs: list, offset: int) -> dict:
        """Chat's {"content": [{token, logprob, bytes, top_logprobs}]} or the completions API's
        {tokens, token_logprobs, top_logprobs, text_offset}; offsets count from `offset`."""
        if self.chat:
            return {"content": [{**self._token(lp.token_id, lp.logprob),
                                 "top_logprobs": [self._token(i, value) for i, value in lp.top]}
                                for lp in logprobs]}
        tokens = [self._token_text(lp.token_id) for lp in logprobs]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in logprobs],
                "top_logprobs": [{self._token_text(i): value for i, value in lp.top} for lp in logprobs],
                "text_offset": offsets}

    def _token(self, token_id: int, logprob: float) -> dict:
        text = self._token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def _usage(request) -> dict:
    return {"prompt_tokens": request.prompt_tokens, "completion_tokens": request.completion_tokens,
            "total_tokens": request.prompt_tokens + request.completion_tokens}


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _model_card(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "lmlab"}


def _check_stops(stop: str | list[str] | None) -> None:
    """A 400 for more than MAX_STOPS stop strings or one longer than MAX_STOP_CHARS."""
    stops = [stop] if isinstance(stop, str) else stop or []
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"stop holds {len(stops)} strings; give at most {MAX_STOPS}", param="stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ApiError(400, f"a stop string has more than {MAX_STOP_CHARS} characters; shorten it", param="stop")


def _check_model(name: str, served: list[str]) -> None:
    if name not in served:
        raise ApiError(404, f"the model '{name}' does not exist here; this server serves {', '.join(served)}",
                       param="model", code="model_not_found")


def _encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """A vector as OpenAI sends it: a list of floats, or base64 of its little-endian float32 bytes."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _validation_error(errors: list[dict]) -> ApiError:
    """FastAPI's validation failure (422) as OpenAI's 400, naming the first bad field."""
    first = errors[0]
    if first["type"] == "json_invalid":
        return ApiError(400, f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}")
    path = [part for part in first["loc"] if part != "body"]
    while path and isinstance(path[-1], str) and (path[-1] in _TYPE_TAGS or not path[-1].isidentifier()):
        path.pop()  # a union's branch names (str, list[int], function-after[…]) are not fields
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or None
    message = f"{param}: {first['msg']}" if param else first["msg"]
    if first["type"] != "missing" and "input" in first and len(repr(first["input"])) < 200:
        message += f" (got {json.dumps(first['input'], default=str)})"
    return ApiError(400, message, param=param)
