"""One objective signature and one registry: every objective, built from the registry and a
tokenizer, turns one example and a key into exactly today's (inputs, targets); the registry picks
each family's default and refuses, in one line, an objective its model kind cannot train with.

MASKED and SEQ2SEQ are the outputs printed by the code before the registry existed (masked_lm,
whole_word_masked_lm and span_masked_lm through dynamic_masking.mask_each with seeded generators;
span_corruption, bart_denoising and gap_sentences with random.Random(f"{seed}:{step}:{k}") as
recipes/pretrain_encoder_decoder.py drew it): the same key must keep giving the same pair, masks included.
"""

import random

import pytest
import torch
from tokenizers.models import WordLevel

from conftest import lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.models.registry import FAMILIES, lookup
from lmlab.objectives.causal_lm import causal_lm
from lmlab.objectives.dynamic_masking import example_key
from lmlab.objectives.registry import REGISTRY, build_objective, choose_objective, objectives_for
from lmlab.objectives.sft import sft_batch
from lmlab.objectives.span_corruption import t5_sentinel_tokens
from lmlab.objectives.span_noise import SpanNoise
from lmlab.objectives.whole_word import whole_word_objective
from lmlab.targets import IGNORE_INDEX
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.text import TextTokenizer
from tokenizers import Tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# A WordPiece-like vocabulary: BERT's specials, 25 words, 10 continuation pieces; rows as a batch pads them.
ENCODER_VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4} | {f"w{i}": i for i in range(5, 30)} | {
    f"##p{i}": i for i in range(30, 40)}
ROWS = [[2, 5, 6, 30, 7, 8, 31, 32, 9, 10, 11, 33, 12, 13, 14, 3, 15, 16, 34, 17, 18, 19, 35, 36, 20, 21, 22, 3],
        [2, 23, 24, 25, 37, 26, 27, 28, 38, 39, 29, 5, 6, 7, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
# An encoder-decoder vocabulary: "." = 5 ends sentences, <mask> = 6, words 10..49, sentinels 100..199.
SEQ2SEQ_VOCAB = {"<pad>": 0, "</s>": 1, "<unk>": 2, ".": 5, "<mask>": 6} | {f"w{i}": i for i in range(10, 50)} | {
    token: 100 + k for k, token in enumerate(t5_sentinel_tokens())}
CHUNK = [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33,
         34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42]
DOCUMENTS = [[[10, 11], [12, 13, 14], [15], [16, 17]], [[20, 21, 22], [23]], [[30], [31, 32], [33, 34, 35]]]

MASKED = {  # (objective, row, key): ({position: new input id}, {position: target id})
    ('mlm', 0, (0, 3)): ({2: 4, 3: 28, 5: 4, 6: 4, 9: 4, 10: 4, 13: 4}, {2: 6, 3: 30, 5: 8, 6: 31, 9: 10, 10: 11, 13: 13}),
    ('mlm', 0, (0, 3, 2)): ({3: 4, 8: 4}, {3: 30, 8: 9}),
    ('mlm', 0, (7, 11)): ({2: 4, 8: 4, 13: 4, 14: 4, 22: 4}, {2: 6, 8: 9, 13: 13, 14: 14, 22: 35}),
    ('mlm', 1, (0, 3)): ({2: 4, 3: 28, 5: 4, 6: 4, 9: 4, 10: 4, 13: 4}, {2: 24, 3: 25, 5: 26, 6: 27, 9: 39, 10: 29, 13: 7}),
    ('mlm', 1, (0, 3, 2)): ({3: 4, 8: 4}, {3: 25, 8: 38}),
    ('mlm', 1, (7, 11)): ({2: 4, 8: 4, 13: 4}, {2: 24, 8: 38, 13: 7}),
    ('whole_word', 0, (0, 3)): ({5: 4, 6: 4, 7: 4, 9: 4}, {5: 8, 6: 31, 7: 32, 9: 10}),
    ('whole_word', 0, (0, 3, 2)): ({8: 4, 12: 4, 25: 37}, {8: 9, 12: 12, 25: 21}),
    ('whole_word', 0, (7, 11)): ({2: 4, 3: 4, 13: 4, 14: 4}, {2: 6, 3: 30, 13: 13, 14: 14}),
    ('whole_word', 1, (0, 3)): ({3: 28}, {3: 25, 4: 37}),
    ('whole_word', 1, (0, 3, 2)): ({3: 4, 4: 4}, {3: 25, 4: 37}),
    ('whole_word', 1, (7, 11)): ({2: 4, 13: 4}, {2: 24, 13: 7}),
    ('span', 0, (0, 3)): ({19: 4, 20: 0, 25: 4}, {19: 17, 20: 18, 25: 21, 26: 22}),
    ('span', 0, (0, 3, 2)): ({8: 4, 9: 38, 13: 4, 14: 4}, {8: 9, 9: 10, 13: 13, 14: 14}),
    ('span', 0, (7, 11)): ({9: 4, 10: 4, 11: 4, 12: 4}, {9: 10, 10: 11, 11: 33, 12: 12}),
    ('span', 1, (0, 3)): ({12: 4, 13: 4}, {12: 6, 13: 7}),
    ('span', 1, (0, 3, 2)): ({1: 4}, {1: 23, 2: 24}),
    ('span', 1, (7, 11)): ({1: 26, 13: 4}, {1: 23, 13: 7}),
}
SEQ2SEQ = {  # (objective, key): (inputs, targets)
    ('span_corruption', (0, 3, 1)): ([10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 100, 34, 5, 35, 36, 37, 38, 39, 40, 101],
        [100, 31, 32, 33, 101, 5, 41, 42]),
    ('span_corruption_0.3_2', (0, 3, 1)): ([10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 100, 23, 24, 25, 26, 27, 101, 30, 102, 31, 32, 33, 103, 5, 35, 36, 37, 104, 39, 105],
        [100, 21, 22, 5, 101, 28, 29, 102, 5, 103, 34, 104, 38, 105, 40, 5, 41, 42]),
    ('denoising', (0, 3, 1)): ([31, 6, 34, 5, 14, 6, 18, 19, 6, 12, 6, 6, 23, 24, 25, 26, 27, 28, 29, 30, 5, 35, 36, 37, 38, 39, 40, 5, 20, 21, 22, 5],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42]),
    ('gap_sentences', (0, 3, 1)): ([6, 6, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5]),
    ('span_corruption', (0, 'val', 2)): ([10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 100, 36, 37, 38, 39, 40, 101],
        [100, 34, 5, 35, 101, 5, 41, 42]),
    ('span_corruption_0.3_2', (0, 'val', 2)): ([10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 100, 21, 22, 5, 23, 24, 101, 28, 29, 30, 102, 31, 32, 103, 5, 35, 36, 37, 38, 104, 40, 5, 105],
        [100, 19, 5, 20, 101, 25, 26, 27, 102, 5, 103, 33, 34, 104, 39, 105, 41, 42]),
    ('denoising', (0, 'val', 2)): ([10, 6, 5, 41, 42, 31, 32, 33, 34, 6, 14, 15, 16, 6, 18, 19, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 20, 21, 22, 5],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42]),
    ('gap_sentences', (0, 'val', 2)): ([6, 6, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5]),
    ('span_corruption', (5, 0, 0)): ([10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 100, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 101],
        [100, 25, 101, 39, 40, 5, 41, 42]),
    ('span_corruption_0.3_2', (5, 0, 0)): ([10, 11, 12, 13, 5, 14, 100, 16, 17, 101, 19, 5, 20, 102, 23, 24, 25, 26, 27, 28, 103, 5, 31, 32, 33, 34, 5, 35, 36, 37, 104, 39, 105],
        [100, 15, 101, 18, 102, 21, 22, 5, 103, 29, 30, 104, 38, 105, 40, 5, 41, 42]),
    ('denoising', (5, 0, 0)): ([41, 42, 14, 15, 6, 16, 17, 18, 19, 5, 35, 36, 37, 38, 6, 5, 6, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 20, 21, 6, 6, 5],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42]),
    ('gap_sentences', (5, 0, 0)): ([6, 6, 20, 21, 22, 5, 23, 24, 25, 26, 27, 28, 29, 30, 5, 31, 32, 33, 34, 5, 35, 36, 37, 38, 39, 40, 5, 41, 42],
        [10, 11, 12, 13, 5, 14, 15, 16, 17, 18, 19, 5]),
}


def word_level(vocab: dict[str, int]) -> Tokenizer:
    return Tokenizer(WordLevel(vocab, unk_token=next(t for t in vocab if "unk" in t.lower())))


@pytest.mark.parametrize("name, row, key", list(MASKED))
def test_masking_objectives_give_today_s_masks(name, row, key):
    tokenizer = word_level(ENCODER_VOCAB)
    objective = (whole_word_objective(tokenizer) if name == "whole_word"
                 else build_objective(REGISTRY[name], tokenizer))
    inputs, targets = objective(ROWS[row], key)
    changed, chosen = MASKED[name, row, key]
    assert inputs == [changed.get(i, t) for i, t in enumerate(ROWS[row])]
    assert targets == [chosen.get(i, IGNORE_INDEX) for i in range(len(ROWS[row]))]


def test_mlm_nsp_sop_and_rtd_mask_as_mlm_does():
    tokenizer = word_level(ENCODER_VOCAB)
    pairs = [build_objective(REGISTRY[name], tokenizer)(ROWS[0], (0, 3)) for name in ("mlm", "mlm+nsp", "mlm+sop",
                                                                                       "rtd")]
    assert all(pair == pairs[0] for pair in pairs)


def test_example_keys_are_today_s_generator_seeds():
    assert example_key(0, 3) == (0, 3) and example_key(0, 3, epoch=1) == (0, 3, 2)


@pytest.mark.parametrize("name, key", list(SEQ2SEQ))
def test_encoder_decoder_objectives_give_today_s_pairs(name, key):
    settings = {"noise": SpanNoise(0.3, 2.0)} if name == "span_corruption_0.3_2" else {}
    record = REGISTRY[name.removesuffix("_0.3_2")]
    inputs, targets = build_objective(record, word_level(SEQ2SEQ_VOCAB), **settings)(CHUNK, key)
    assert (inputs, targets) == SEQ2SEQ[name, key]


def test_sentence_pair_tasks_draw_today_s_pairs():
    nsp = REGISTRY["mlm+nsp"].sentence_pairs(DOCUMENTS, random.Random(0))
    sop = REGISTRY["mlm+sop"].sentence_pairs(DOCUMENTS, random.Random(0))
    assert nsp == [([10, 11], [20, 21, 22], 0), ([12, 13, 14], [15], 1), ([15], [23], 0), ([20, 21, 22], [30], 0),
                   ([30], [20, 21, 22], 0), ([31, 32], [20, 21, 22], 0)]
    assert sop == [([12, 13, 14], [10, 11], 0), ([15], [12, 13, 14], 0), ([15], [16, 17], 1), ([20, 21, 22], [23], 1),
                   ([31, 32], [30], 0), ([31, 32], [33, 34, 35], 1)]


def test_causal_lm_objective_is_one_row_of_the_batched_shift():
    tokens = [7, 8, 9, 10, 11]
    inputs, targets = build_objective(REGISTRY["causal_lm"], None)(tokens, (0,))
    batched = causal_lm(torch.tensor([tokens]))
    assert (inputs, targets) == (batched[0][0].tolist(), batched[1][0].tolist())


def test_sft_objective_is_the_chat_s_row_of_sft_batch():
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    backend = train_bpe(["user: what is 2 + 2?\nassistant: 4, as 2 + 2 = 4.\n"] * 5, vocab_size=280)
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer = TextTokenizer(backend, bos_id=0, eos_id=1, pad_id=2, stop_ids=(1,), chat_template=template)
    chat = [{"role": "user", "content": "what is 2 + 2?"}, {"role": "assistant", "content": "4, as 2 + 2 = 4."}]
    inputs, targets = build_objective(REGISTRY["sft"], tokenizer, block_size=64)(chat, (0,))
    rows = sft_batch(tokenizer, [chat], block_size=64)
    assert len(inputs) < 64 and {t for t in targets} - {IGNORE_INDEX}
    assert (inputs, targets) == (rows[0][0, :len(inputs)].tolist(), rows[1][0, :len(inputs)].tolist())


def test_every_record_names_a_known_kind_and_every_family_names_objectives_of_its_kind():
    for record in REGISTRY.values():
        assert record.kind in ("decoder", "encoder", "encoder-decoder") and record.about
        assert (record.pair_task is None) == (record.sentence_pairs is None)
    for family in FAMILIES.values():
        if family.kind == "classic":
            assert not family.objective and not family.objectives, family.name
            continue
        assert REGISTRY[family.objective].kind == family.kind, family.name
        assert all(REGISTRY[name].kind == family.kind for name in family.objectives), family.name


@pytest.mark.parametrize("kind, family, default", [
    ("decoder", "llama", "causal_lm"), ("encoder", "bert", "mlm+nsp"), ("encoder", "roberta", "mlm"),
    ("encoder", "albert", "mlm+sop"), ("encoder", "electra", "rtd"), ("encoder-decoder", "t5", "span_corruption"),
    ("encoder-decoder", "bart", "denoising"), ("encoder-decoder", "transformer", "denoising")])
def test_each_family_gets_its_default_first(kind, family, default):
    assert choose_objective(lookup(family, kind=kind)).name == default
    assert objectives_for(kind, lookup(family))[0].name == default


def test_a_name_of_another_kind_is_refused_with_the_kind_s_objectives():
    with pytest.raises(LmlabError, match="unknown for an encoder-decoder; choose one of: span_corruption, "
                                         "denoising, gap_sentences"):
        choose_objective(lookup("t5"), "mlm")
    with pytest.raises(LmlabError, match="span does not apply to electra; electra trains with: rtd"):
        choose_objective(lookup("electra"), "span")


def test_cli_lists_what_the_registry_holds_for_the_model_kind(tmp_path, capsys):
    assert lmlab("train", "--model", "t5-tiny", "--objective", "mlm", "--data", "markov", "--out", tmp_path / "run",
                 "--max-steps", "1") == 2
    one_line_error(capsys, "objective 'mlm' is unknown for an encoder-decoder", "span_corruption, denoising, gap_sentences")
    assert not (tmp_path / "run").exists()


def test_a_decoder_record_that_pre_trains_carries_its_batch_form_and_only_encoders_name_a_head():
    for record in REGISTRY.values():
        if record.kind == "decoder" and record.pretraining:
            block = torch.tensor([[7, 8, 9, 10, 11], [1, 2, 3, 4, 5]])  # (B, T+1)
            inputs, targets = record.batch(block)
            rows = [build_objective(record, None)(row, (0,)) for row in block.tolist()]
            assert (inputs.tolist(), targets.tolist()) == ([r[0] for r in rows], [r[1] for r in rows]), record.name
        assert bool(record.head) == (record.kind == "encoder"), record.name
        assert record.whole_word is None or record.kind == "encoder", record.name


def test_an_objective_that_tunes_on_chats_is_not_chosen_for_pre_training():
    assert "sft" not in [r.name for r in objectives_for("decoder", lookup("gpt2"))]
    with pytest.raises(LmlabError, match="objective 'sft' .* does not pre-train; choose one of: causal_lm"):
        choose_objective(lookup("gpt2"), "sft")
