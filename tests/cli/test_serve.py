"""`lmlab serve`: started as a user starts it, it answers the API and the web page, and Ctrl-C stops
it cleanly; bad flags are one line before anything loads."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from chat_models import tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.cli.serve import served_name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_until_interrupted(tmp_path):
    model = tiny_chat_model(tmp_path / "tiny")
    port = free_port()
    command = [sys.executable, "-c", "import sys; from lmlab.cli.main import main; sys.exit(main())",
               "serve", "--model", str(model), "--port", str(port), "--slots", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{url}/health").json()["model"] == "tiny"
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
                time.sleep(0.2)
        r = httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "max_tokens": 4,
                                                           "messages": [{"role": "user", "content": "1+2?"}]})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        assert "<html" in httpx.get(url).text
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0


@pytest.mark.parametrize("flags, fragment", [(["--slots", "0"], "--slots 0"), (["--port", "70000"], "--port 70000"),
                                             (["--rag", "idx", "--rag-top", "0"], "--rag-top 0 must be in 1..50")])
def test_bad_flags_are_one_line(flags, fragment, capsys):
    assert lmlab("serve", "--model", "nowhere", *flags) == 2
    one_line_error(capsys, fragment)


def test_the_served_name_is_the_zoo_name_or_the_file_name():
    assert served_name("smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert served_name("/models/SmolLM2-135M.Q4_1.gguf") == "SmolLM2-135M.Q4_1"
    assert served_name("runs/my-model/") == "my-model"


def test_slots_whose_cache_would_not_fit_in_memory_are_refused_before_serving(tmp_path, monkeypatch, capsys):
    model = tiny_chat_model(tmp_path / "tiny")  # 16 kB of KV cache per slot at its full context of 64
    sysconf = os.sysconf
    small = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1024}  # a 4 MiB machine
    monkeypatch.setattr(os, "sysconf", lambda name: small.get(name) or sysconf(name))
    assert lmlab("serve", "--model", str(model), "--slots", "1024", "--port", "0") == 2
    one_line_error(capsys, "use at most --slots 256")


def test_a_bad_rag_index_is_one_line_before_the_model_loads(tmp_path, capsys):
    assert lmlab("serve", "--model", "nowhere", "--rag", tmp_path, "--port", "0") == 2
    one_line_error(capsys, "is not an lmlab retrieval index")


def test_a_port_in_use_is_one_line_before_the_model_loads(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert lmlab("serve", "--model", "nowhere", "--port", str(taken.getsockname()[1])) == 2
    one_line_error(capsys, "choose another --port")
