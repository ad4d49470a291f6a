"""LAMA-style factual probing: the fact table is well formed, P@k counts right, a causal LM's candidate
ranking equals full-forward scoring, a masked LM loads with its MLM head (parity with transformers) and
ranks its vocabulary at [MASK], and `lmlab eval facts` end to end with its one-line errors."""

import json

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.data.facts import RELATIONS, Relation
from lmlab.errors import LmlabError
from lmlab.eval.facts import candidates, precision_at, rank_causal, rank_masked
from lmlab.models.decoder import build_decoder
from lmlab.models.decoder_files import save_hf_dir
from lmlab.models.encoder_files import save_pretraining_dir
from lmlab.models.load import load
from lmlab.models.masked_lm import load_masked_lm
from lmlab.models.presets import preset
from lmlab.models.pretraining import build_for_pretraining
from lmlab.tokenizers.bpe import train_bpe
from lmlab.tokenizers.wordpiece import wordpiece_from_vocab
from real_models import models_root, real_model

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CAPITAL = RELATIONS["capital"]


# --- the table ---------------------------------------------------------------------------------

@pytest.mark.parametrize("relation", RELATIONS.values(), ids=RELATIONS)
def test_relation_templates_and_pairs_are_well_formed(relation):
    assert RELATIONS[relation.name] is relation
    assert "{subject}" in relation.causal_template and not relation.causal_template.endswith(" ")
    assert "{subject}" in relation.masked_template and relation.masked_template.count("[MASK]") == 1
    subjects = [s for s, _ in relation.pairs]
    assert len(subjects) == len(set(subjects)), "a subject appears twice"
    assert all(s.strip() == s and o.strip() == o and s and o for s, o in relation.pairs)
    assert len(relation.pairs) >= 25


def test_the_main_relations_are_there():
    assert {"capital", "language", "currency", "symbol"} <= set(RELATIONS)
    assert ("France", "Paris") in CAPITAL.pairs and ("iron", "Fe") in RELATIONS["symbol"].pairs


def test_candidates_are_the_distinct_objects_in_table_order():
    relation = Relation("r", "{subject} is", "{subject} is [MASK].", (("a", "x"), ("b", "y"), ("c", "x")))
    assert candidates(relation) == ("x", "y")


def test_precision_at_k_counts_ranks_within_k():
    ranks = [1, 2, 10, 11]
    assert precision_at(ranks, 1) == 0.25 and precision_at(ranks, 10) == 0.75 and precision_at(ranks, 100) == 1.0
    assert precision_at([], 1) == 0.0


# --- causal ranking ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def capital_decoder_dir(tmp_path_factory):
    """A tiny random llama with a BPE tokenizer trained on the capital prompts."""
    texts = [f"{CAPITAL.causal_template.format(subject=s)} {o}." for s, o in CAPITAL.pairs]
    tokenizer = train_bpe(texts * 3, vocab_size=400)
    torch.manual_seed(0)
    model = build_decoder(preset("llama-tiny", vocab_size=tokenizer.get_vocab_size(), context_length=64,
                                 n_layers=2, n_heads=2, d_model=32, d_ff=64)).eval()
    return save_hf_dir(model, tmp_path_factory.mktemp("facts") / "decoder", tokenizer)


def full_forward_logprob(model, tokenizer, prompt: str, obj: str) -> float:
    """log p(" obj" | prompt) from one plain forward pass over prompt + object."""
    context, target = tokenizer.encode(prompt), tokenizer.encode(prompt + " " + obj)[len(tokenizer.encode(prompt)):]
    with torch.no_grad():
        logprobs = model(torch.tensor([context + target[:-1]]))[0].log_softmax(-1)  # (T, V)
    return sum(float(logprobs[len(context) - 1 + i, t]) for i, t in enumerate(target))


def test_candidate_ranking_equals_full_forward_scoring(capital_decoder_dir):
    model, tokenizer = load(capital_decoder_dir)
    objects = candidates(CAPITAL)
    assert len({len(tokenizer.encode(" " + o)) for o in objects}) > 1  # candidates of several lengths
    for subject, gold in CAPITAL.pairs[:2]:
        prompt = CAPITAL.causal_template.format(subject=subject)
        scores = {o: full_forward_logprob(model, tokenizer, prompt, o) for o in objects}
        ranked = rank_causal(model, tokenizer, CAPITAL, subject, gold)
        assert ranked.rank == 1 + sum(s >= scores[gold] for o, s in scores.items() if o != gold)
        assert ranked.top == max(scores, key=scores.get)


# --- masked LMs --------------------------------------------------------------------------------

def hf_bert(vocab: list[str], seed: int, masked_lm: bool = True):
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(seed)
    model = (transformers.BertForMaskedLM if masked_lm else transformers.BertModel)(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # HF's init leaves biases and norms trivial; make every weight count
            p.normal_(0, 0.2)
    return model


@pytest.fixture(scope="module")
def vocab():
    words = {w.lower() for s, o in CAPITAL.pairs for w in (s + " " + o).split()}
    return SPECIALS + ["the", "capital", "of", "is", "."] + sorted(words - {"the", "capital", "of", "is"})


@pytest.fixture(scope="module")
def bert_dir(vocab, tmp_path_factory):
    directory = tmp_path_factory.mktemp("facts") / "bert"
    reference = hf_bert(vocab, seed=1)
    reference.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return directory, reference


@pytest.mark.parity
def test_masked_lm_loads_with_its_head_and_matches_transformers_at_mask(bert_dir):
    directory, reference = bert_dir
    model, tokenizer = load_masked_lm(directory)
    encoding = tokenizer.encode("The capital of France is [MASK].")
    ids, position = torch.tensor([encoding.ids]), encoding.tokens.index("[MASK]")
    with torch.no_grad():
        ours = model.mlm_logits(model(ids)[0, position])  # (V,)
        expected = reference(ids).logits[0, position]
    assert (ours - expected).abs().max() <= 1e-5


def test_masked_ranking_is_the_rank_at_mask_and_skips_multi_wordpiece_objects(bert_dir):
    model, tokenizer = load_masked_lm(bert_dir[0])
    ranked, skipped = rank_masked(model, tokenizer, CAPITAL, CAPITAL.pairs)
    multi = [o for _, o in CAPITAL.pairs if " " in o]  # "Buenos Aires", … are two wordpieces here
    assert skipped == len(multi) and len(ranked) == len(CAPITAL.pairs) - len(multi)
    for fact in ranked[:3]:
        encoding = tokenizer.encode(CAPITAL.masked_template.format(subject=fact.subject))
        with torch.no_grad():
            logits = model.mlm_logits(model(torch.tensor([encoding.ids]))[0, encoding.tokens.index("[MASK]")])
        gold = tokenizer.token_to_id(fact.gold.lower())
        assert fact.rank == int((logits >= logits[gold]).sum())
        assert fact.top == tokenizer.id_to_token(int(logits.argmax()))


def test_an_lmlab_encoder_run_loads_with_its_mlm_head(vocab, tmp_path):
    cfg = preset("bert-tiny", vocab_size=len(vocab), context_length=32, n_layers=2, n_heads=2, d_model=32,
                         d_ff=64)
    torch.manual_seed(3)
    trained = build_for_pretraining(cfg, sentence_pair=True).eval()
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    save_pretraining_dir(trained, tmp_path / "run" / "model", wordpiece_from_vocab(tmp_path / "vocab.txt"))
    model, tokenizer = load_masked_lm(tmp_path / "run")  # the run directory, as `lmlab train` leaves it
    ids = torch.tensor([tokenizer.encode("the capital of france is [MASK] .").ids])
    with torch.no_grad():
        assert (model.mlm_logits(model(ids)) - trained.mlm_logits(trained(ids))).abs().max() <= 1e-6


@pytest.fixture(scope="module")
def bare_dir(vocab, tmp_path_factory):
    """A bare BertModel directory: an encoder with no MLM head, like all-MiniLM-L6-v2."""
    directory = tmp_path_factory.mktemp("facts") / "bare"
    hf_bert(vocab, seed=2, masked_lm=False).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return directory


def test_an_encoder_without_mlm_head_is_refused(bare_dir):
    with pytest.raises(LmlabError, match="no masked-LM head weights .*cls.predictions"):
        load_masked_lm(bare_dir)


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_json_for_a_causal_lm(capital_decoder_dir, capsys):
    assert lmlab("eval", "facts", "--model", capital_decoder_dir, "--relations", "capital", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "causal" and set(result["relations"]) == {"capital"}
    row = result["relations"]["capital"]
    assert row["facts"] == row["scored"] == len(CAPITAL.pairs) and row["skipped"] == 0
    assert row["candidates"] == len(candidates(CAPITAL)) and 0 <= row["p_at_1"] <= row["p_at_10"] <= 1
    assert result["overall"]["p_at_1"] == row["p_at_1"]
    assert len(result["facts"]) == len(CAPITAL.pairs)
    assert set(result["facts"][0]) == {"relation", "subject", "gold", "rank", "top"}


def test_cli_table_for_a_masked_lm(bert_dir, capsys):
    assert lmlab("eval", "facts", "--model", bert_dir[0], "--relations", "capital") == 0
    out = capsys.readouterr().out
    assert "[MASK]" in out and "capital" in out and "overall" in out


@pytest.mark.parametrize("args, fragments", [
    (["--relations", "capital,planets"], ["unknown relation 'planets'", ", ".join(RELATIONS)]),
])
def test_cli_errors_are_one_line(capital_decoder_dir, capsys, args, fragments):
    assert lmlab("eval", "facts", "--model", capital_decoder_dir, *args) == 2
    one_line_error(capsys, *fragments)


def test_cli_refuses_an_encoder_without_mlm_head(bare_dir, capsys):
    assert lmlab("eval", "facts", "--model", bare_dir) == 2
    one_line_error(capsys, "no masked-LM head weights", "cannot fill a [MASK]")


# --- the real model ----------------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_knows_capitals_far_above_chance(monkeypatch):
    path = real_model("smollm2-135m-instruct")
    monkeypatch.setenv("LMLAB_CACHE", models_root())
    model, tokenizer = load(path, "fp32")  # measured on the fp32 load
    ranked = [rank_causal(model, tokenizer, CAPITAL, s, o) for s, o in CAPITAL.pairs]
    p_at_1 = precision_at([r.rank for r in ranked], 1)
    assert p_at_1 >= 0.8, p_at_1  # chance is 1/48; measured 0.98 (47 of 48)
