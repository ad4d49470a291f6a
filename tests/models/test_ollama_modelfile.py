"""Ollama Modelfiles (`models/ollama_modelfile.py`): a chat template that wraps each message in fixed texts becomes
a Go TEMPLATE that renders a chat as the Jinja template does; one with more logic gets no TEMPLATE."""

import dataclasses

from gguf_files import CHATML, TEXTS
from lmlab.models.ollama_modelfile import go_template, modelfile
from lmlab.tokenizers.bpe import special_token_ids, train_bpe
from lmlab.tokenizers.text import TextTokenizer

LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\\nYou are SmolLM<|im_end|>\\n' }}{% endif %}"
           "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
ALTERNATING = "{% for m in messages %}{% if loop.index0 % 2 == 0 %}A: {% endif %}{{ m['content'] }}{% endfor %}"


def tokenizer(template: str) -> TextTokenizer:
    backend = train_bpe(TEXTS, 270)
    ids = special_token_ids(backend)
    return TextTokenizer(backend, ids["bos"], ids["eos"], ids["pad"], (ids["eos"],), template)


def test_a_fixed_wrap_per_message_becomes_a_go_template():
    template, system = go_template(tokenizer(LLAMA3))
    assert system == ""
    assert template == ('<|bos|>{{ range .Messages }}{{ if eq .Role "system" }}<|start_header_id|>system'
                        '<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ else if eq .Role "user" }}<|start_header_id|>'
                        'user<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ else if eq .Role "assistant" }}'
                        '<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}{{ end }}'
                        '<|start_header_id|>assistant<|end_header_id|>\n\n')


def test_a_default_system_message_becomes_the_modelfiles_system():
    text, has_template = modelfile(tokenizer(SMOLLM2), "m.gguf")
    assert has_template and '{{ end }}{{ end }}<|im_start|>assistant\n"""\nSYSTEM """You are SmolLM"""\n' in text


def test_a_template_with_more_logic_gets_no_template_line_but_its_stops():
    text, has_template = modelfile(dataclasses.replace(tokenizer(ALTERNATING)), "m.gguf")
    assert (text, has_template) == ('FROM ./m.gguf\nPARAMETER stop "<|eos|>"\n', False)
    assert modelfile(tokenizer(CHATML), "m.gguf")[1]
