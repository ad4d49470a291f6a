"""`lmlab serve` with the real SmolLM2-135M-Instruct: the API's greedy chat reply, whole and streamed,
is exactly what `lmlab chat --greedy` prints for the same message."""

import openai
import pytest

from lmlab.cli.main import main
from lmlab.inference.engine import Engine
from lmlab.inference.server import create_app
from lmlab.models.load import load
from real_models import real_model
from served import served

QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.mark.slow
def test_smollm2_replies_as_lmlab_chat_does(capsys):
    path = real_model("smollm2-135m-instruct")
    assert main(["chat", "--model", str(path), "--greedy", "--max-new-tokens", "48", "--prompt", QUESTION]) == 0
    printed = capsys.readouterr().out
    assert printed.endswith("\n")
    model, tokenizer = load(path)
    with Engine(model, tokenizer, slots=4) as engine:
        with served(create_app(engine, tokenizer, "smollm2", model.config.context_length)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            settings = {"model": "smollm2", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
                        "max_tokens": 48}
            whole = client.chat.completions.create(**settings).choices[0].message.content
            streamed = "".join(e.choices[0].delta.content or ""
                               for e in client.chat.completions.create(stream=True, **settings))
    assert "Paris" in whole
    assert whole == streamed == printed[:-1]
