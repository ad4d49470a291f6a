"""The road from fine-tuning to deployment, end to end through the command line, on the real SmolLM2-135M-Instruct
(docs/deploy.md): LoRA SFT on a small chat file (`lmlab sft`), the run merged into an f16 GGUF file (`lmlab
export --to gguf`), llama.cpp (llama-cpp-python) greedy-decoding lmlab's tokens and `lmlab chat`'s reply from
it, and HF peft loading the run's adapter onto the transformers base with lmlab's logits. Each stage's time is
printed."""

import json
import time

import pytest
import torch

import lmlab
from conftest import lmlab as run_lmlab
from gguf_reference import greedy, llama_cpp_greedy
from llama_cpp_converter import llama_cpp as llama_cpp_module
from lmlab.models.peft_files import load_peft
from lmlab.tokenizers.chat import chat_prompt
from real_models import real_model

pytestmark = [pytest.mark.slow, pytest.mark.parity]

CHATS = [  # a dozen short chats teaching one style (TRL's `messages` format)
    ("What colour is the sky?", "Arr, the sky be blue, matey!"), ("Name a fruit.", "Arr, an apple, matey!"),
    ("How many legs does a dog have?", "Arr, four legs, matey!"), ("What is 2 + 2?", "Arr, four, matey!"),
    ("Say hello.", "Arr, ahoy there, matey!"), ("What do cows drink?", "Arr, water, matey!"),
    ("Where do fish live?", "Arr, in the sea, matey!"), ("What is the capital of France?", "Arr, Paris, matey!"),
    ("Name a colour.", "Arr, red as rum, matey!"), ("What is ice made of?", "Arr, frozen water, matey!"),
    ("How many days are in a week?", "Arr, seven days, matey!"), ("What do bees make?", "Arr, honey, matey!"),
]
SFT_FLAGS = ["--peft", "lora", "--max-steps", "12", "--batch-size", "4", "--lr", "1e-3", "--block-size", "64",
             "--warmup-steps", "2", "--eval-every", "100", "--checkpoint-every", "100"]
PROMPTS = ["What colour is grass?", "Who are you?"]  # held out: not in CHATS
NEW_TOKENS = 48


def write_chats(path):
    """CHATS as a JSONL file, one chat per line."""
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": question},
                                                     {"role": "assistant", "content": answer}]}) + "\n"
                            for question, answer in CHATS))
    return path


def timed(times: dict, stage: str, step):
    """`step()`'s result, its wall time recorded as `times[stage]` (seconds)."""
    start = time.perf_counter()
    result = step()
    times[stage] = time.perf_counter() - start
    return result


def chat_reply(run, prompt: str, capsys) -> str:
    """`lmlab chat --greedy`'s reply to one message (the line it prints)."""
    capsys.readouterr()
    assert run_lmlab("chat", "--model", run, "--prompt", prompt, "--greedy", "--max-new-tokens", NEW_TOKENS) == 0
    return capsys.readouterr().out.removesuffix("\n")


def assert_llama_cpp_answers_as_lmlab(run, gguf_file, capsys) -> list[str]:
    """For each prompt in the chat template: llama.cpp's tokenizer gives lmlab's prompt ids, its greedy tokens
    from the GGUF file are lmlab's (the run's fp32 model), and the reply they spell (to the end of the turn) is
    `lmlab chat`'s and llama-cpp-python's own `create_chat_completion(temperature=0)`'s; returns the replies."""
    model, tokenizer = lmlab.load(run)
    replies = []
    llama_cpp = llama_cpp_module()
    chat_api = llama_cpp.Llama(str(gguf_file), n_ctx=256, verbose=False, n_threads=2)
    try:
        for prompt in PROMPTS:
            messages = [{"role": "user", "content": prompt}]
            text = chat_prompt(tokenizer, messages)
            ids = tokenizer.encode(text)
            assert chat_api.tokenize(text.encode(), add_bos=False, special=True) == ids
            theirs, ours = llama_cpp_greedy(gguf_file, ids, NEW_TOKENS)[0], greedy(model, ids, NEW_TOKENS)
            assert theirs == ours, prompt
            turn = ours[:next((i for i, t in enumerate(ours) if t in tokenizer.stop_ids), len(ours))]
            reply = tokenizer.decode(turn).strip()
            assert chat_reply(run, prompt, capsys) == reply, prompt
            chat_api.reset()
            answer = chat_api.create_chat_completion(messages=messages, temperature=0, max_tokens=NEW_TOKENS)
            assert answer["choices"][0]["message"]["content"].strip() == reply, prompt
            replies.append(reply)
    finally:
        chat_api.close()
    return replies


def peft_logit_error(base, run, base_hf) -> float:
    """The largest difference between peft's logits (the run's adapter on the transformers base) and lmlab's
    (the same adapter on the same base), over the first prompt in the chat template; also checks the adapter
    moves the logits (so the parity is about a trained adapter, not a no-op)."""
    peft, transformers = pytest.importorskip("peft"), pytest.importorskip("transformers")
    model, tokenizer = lmlab.load(base, "fp32")  # the float weights the adapter was trained on
    ours_model = load_peft(model, run / "adapter").eval()
    ids = torch.tensor([tokenizer.encode(chat_prompt(tokenizer, [{"role": "user", "content": PROMPTS[0]}]))])
    reference = transformers.AutoModelForCausalLM.from_pretrained(base_hf, attn_implementation="eager")
    reference = peft.PeftModel.from_pretrained(reference, run / "adapter").eval()
    with torch.no_grad():
        theirs, ours = reference(ids).logits, ours_model(ids)  # (1, T, V)
        with reference.disable_adapter():
            assert (reference(ids).logits - theirs).abs().max() > 1.0
    return (theirs - ours).abs().max().item()


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft's call
def test_sft_on_a_chat_file_then_llama_cpp_answers_as_lmlab_chat_and_peft_gives_lmlabs_logits(tmp_path, capsys):
    base, times = real_model("smollm2-135m-instruct"), {}
    chats, run, gguf_file, base_hf = (write_chats(tmp_path / "chats.jsonl"), tmp_path / "run",
                                      tmp_path / "run.gguf", tmp_path / "base_hf")
    assert timed(times, "sft", lambda: run_lmlab("sft", "--model", base, "--data", chats, "--out", run,
                                                 *SFT_FLAGS)) == 0
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert timed(times, "export gguf", lambda: run_lmlab("export", "--model", run, "--to", "gguf", "--dtype",
                                                         "f16", "--out", gguf_file)) == 0
    replies = timed(times, "llama.cpp vs lmlab chat", lambda: assert_llama_cpp_answers_as_lmlab(run, gguf_file, capsys))
    assert timed(times, "export hf base", lambda: run_lmlab("export", "--model", base, "--to", "hf", "--out",
                                                            base_hf)) == 0
    error = timed(times, "peft vs lmlab", lambda: peft_logit_error(base, run, base_hf))
    with capsys.disabled():
        print("\n" + ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in times.items())
              + f"; peft's logits within {error:.1e} of lmlab's; replies {replies}")
    assert error < 1e-4 and all(replies)
