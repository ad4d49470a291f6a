"""The web chat at `/`, in a real headless browser (Debian's chromium driven by Playwright): a typed
message gets a streamed reply equal to the API's, Stop ends a long reply on the server too, and a
reload shows the conversation again."""

import dataclasses
import os
import shutil
import time

import openai
import pytest
from playwright import sync_api

from chat_models import CHATML, tiny_chat_model
from lmlab.inference.engine import Engine
from lmlab.inference.server import create_app
from lmlab.models.load import load
from served import served

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MODEL = "tiny-chat"
LONG = 1900  # max tokens of a reply long enough to be stopped by hand (the model's context is 2048)
# A random model's greedy reply repeats the prompt's last token; ChatML ends in a newline, which the
# reply's lstrip would leave as nothing, so here the generation prompt ends in the word "assistant".
TEMPLATE = CHATML.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant{% endif %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model, tokenizer = load(tiny_chat_model(tmp_path_factory.mktemp("web") / "chat", context_length=2048))
    tokenizer = dataclasses.replace(tokenizer, chat_template=TEMPLATE)
    with Engine(model, tokenizer, slots=2) as engine:
        with served(create_app(engine, tokenizer, MODEL, model.config.context_length)) as url:
            yield url, engine


@pytest.fixture
def page(server):
    if CHROMIUM is None:  # CI must have it; elsewhere the test is skipped until it is installed
        message = "the web chat test needs Debian's chromium: apt-get install -y chromium"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_chat_streams_stops_and_survives_a_reload(server, page):
    url, engine = server
    expect = sync_api.expect
    page.goto(url)
    expect(page.locator("#model")).to_have_text(MODEL)
    page.fill("#temperature", "0")
    page.fill("#max_tokens", "12")
    page.fill("#message", "1+2?")
    page.press("#message", "Enter")
    expect(page.locator("#status")).to_have_text("done")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    api = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "1+2?"}], temperature=0,
                                         max_tokens=12).choices[0].message.content
    assert api.strip()
    expect(page.locator(".msg.assistant .content")).to_have_text(api)

    before = engine.stats()["tokens_generated"]
    page.fill("#max_tokens", str(LONG))
    page.fill("#message", "Go on for a long time.")
    page.click("#send")
    reply = page.locator(".msg.assistant .content").nth(1)
    expect(reply).not_to_have_text("")  # streamed: text shows while the reply is still being written
    expect(page.locator("#stop")).to_be_enabled()
    page.click("#stop")
    expect(page.locator("#status")).to_have_text("stopped")
    deadline = time.monotonic() + 10
    while engine.stats()["running"] or engine.stats()["waiting"]:
        assert time.monotonic() < deadline, "the stopped request still holds its slot"
        time.sleep(0.02)
    assert engine.stats()["tokens_generated"] - before < LONG / 2
    shown = page.locator(".msg .content").all_inner_texts()

    page.reload()
    expect(page.locator("#model")).to_have_text(MODEL)
    assert page.locator(".msg .content").all_inner_texts() == shown
    assert shown[:3] == ["1+2?", api, "Go on for a long time."] and shown[3]
    assert page.input_value("#temperature") == "0"
