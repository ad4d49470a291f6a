"""Where preference methods get their data: a ranking's pairs, and a preference file read as rankings
(the reward model's) and as pairs (DPO's) alike."""

import json

from chat_models import TINY_RUN
from lmlab.training.post_training import with_reply
from lmlab.training.preference import ranking_chats
from lmlab.training.preference_data import load_pairs, ranking_pairs, read_preferences

PROMPT = [{"role": "user", "content": "What is 1 + 1?"}]


def test_a_ranking_of_k_answers_gives_every_better_worse_pair():
    assert [(chosen, rejected) for _, chosen, rejected in ranking_pairs((PROMPT, ["a", "b", "c"]))] == [
        ("a", "b"), ("a", "c"), ("b", "c")]


def test_a_preference_file_gives_rankings_and_pairs_alike(tmp_path):
    data = tmp_path / "prefs.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 + 1?", "chosen": "2", "rejected": "3"}) + "\n"
                    + json.dumps({"prompt": "What is 2 + 2?", "ranked": ["4", "5", "6"]}) + "\n")
    rankings = read_preferences(data)
    assert [answers for _, answers in rankings] == [["2", "3"], ["4", "5", "6"]]
    assert load_pairs(str(data), TINY_RUN) == [pair for ranking in rankings for pair in ranking_pairs(ranking)]
    assert len(ranking_chats(rankings)) == 5 and ranking_chats(rankings)[2] == with_reply(rankings[1][0], "4")
