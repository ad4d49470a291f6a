"""`lmlab serve --rag`: chat requests get the passages retrieved for their last user message in the prompt,
and the response carries them in `sources` (streamed: in the first chunk), driven with the official `openai`
client; a request turns retrieval off with "rag": false or sets "rag": {"top": N}; a server without an index
refuses "rag": true."""

import openai
import pytest

from chat_models import tiny_chat_model
from encoder_data import tiny_encoder_dir
from lmlab.inference.engine import Engine
from lmlab.inference.server import create_app
from lmlab.models.load import load, load_encoder
from lmlab.rag.index import build_index
from lmlab.rag.passages import Passage
from lmlab.rag.prompt import open_book_text
from lmlab.rag.retrieve import Retriever
from lmlab.tokenizers.chat import chat_prompt
from served import served

pytestmark = pytest.mark.usefixtures("one_thread")
MODEL = "tiny-chat"
TEXTS = ["paris is in france", "rome is in italy", "anna lives in oslo with bob", "the cat sat on a mat ."]
ASK = [{"role": "user", "content": "rome is in italy"}]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(client with retrieval, client without, the retriever, the tokenizer)."""
    from lmlab.cli.serve import rag_retrieval
    from lmlab.rag.index import save_index

    root = tmp_path_factory.mktemp("served")
    model, tokenizer = load(tiny_chat_model(root / "chat", context_length=1024))
    encoder, encoder_tokenizer = load_encoder(tiny_encoder_dir(root / "encoder"))
    passages = [Passage(t, f"doc{i}.txt", 0) for i, t in enumerate(TEXTS)]
    save_index(build_index(encoder.eval(), encoder_tokenizer, passages, str(root / "encoder"), 10, 0), root / "idx")
    retriever = Retriever(build_index(encoder, encoder_tokenizer, passages, "e", 10, 0), encoder, encoder_tokenizer)
    with Engine(model, tokenizer, slots=2) as engine:
        with_rag = create_app(engine, tokenizer, MODEL, 1024, retrieval=rag_retrieval(str(root / "idx"), 2))
        without = create_app(engine, tokenizer, MODEL, 1024)
        with served(with_rag) as url, served(without) as plain_url:
            yield (openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60),
                   openai.OpenAI(base_url=f"{plain_url}/v1", api_key="x", max_retries=0, timeout=60),
                   retriever, tokenizer)


def ask(client, **settings):
    return client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, temperature=0, **settings)


def test_a_chat_request_gets_the_passages_in_its_prompt_and_back_as_sources(servers):
    client, _, retriever, tokenizer = servers
    response = ask(client)
    sources = response.model_extra["sources"]
    assert [s["text"] for s in sources][0] == "rome is in italy" and len(sources) == 2
    assert set(sources[0]) == {"source", "position", "score", "text"} and sources[0]["source"] == "doc1.txt"
    hits = retriever.retrieve(["rome is in italy"], 2)[0]
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": open_book_text("rome is in italy", hits)}])
    assert response.usage.prompt_tokens == len(tokenizer.encode(prompt))


def test_rag_false_turns_it_off_and_top_sets_how_many(servers):
    client, plain, _, tokenizer = servers
    off = ask(client, extra_body={"rag": False})
    assert "sources" not in (off.model_extra or {})
    assert off.usage.prompt_tokens == len(tokenizer.encode(chat_prompt(tokenizer, ASK)))
    assert off.choices[0].message.content == ask(plain).choices[0].message.content
    assert len(ask(client, extra_body={"rag": {"top": 1}}).model_extra["sources"]) == 1


def test_a_streamed_answer_carries_the_sources_in_its_first_chunk(servers):
    client = servers[0]
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, temperature=0,
                                                 stream=True))
    assert chunks[0].model_extra["sources"][0]["text"] == "rome is in italy"
    assert all("sources" not in (c.model_extra or {}) for c in chunks[1:])
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ask(client).choices[0].message.content


def test_bad_rag_requests_are_400s_naming_the_field(servers):
    client, plain, _, _ = servers
    with pytest.raises(openai.BadRequestError, match="no retrieval index; start it with lmlab serve --rag"):
        ask(plain, extra_body={"rag": True})
    with pytest.raises(openai.BadRequestError, match="rag: give true, false or {\"top\": N} with N in 1..50"):
        ask(client, extra_body={"rag": {"top": 0}})
    with pytest.raises(openai.BadRequestError, match="messages hold none"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "hi"}], max_tokens=2)
