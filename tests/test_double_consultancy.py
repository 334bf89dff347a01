"""double_consultancy (playpen/games/double_consultancy): each consultant sees only its own questions and the
other sees nothing of its session, the judge reads both sessions before its verdict; scores; experts before the
programmatic judge; a tournament; `playpen list games`."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from clemcore.backends import CustomResponseModel

from playpen import games
from tests.helpers import play_scripted

PASSAGE = "Mara Okafor works at the bakery. Tomas Reyes works at the library. Mara keeps a parrot."
ITEM = {"game_id": 0, "passage": PASSAGE, "question": "Where does Mara Okafor work?",
        "answers": {"A": "the bakery", "B": "the library"}, "correct": "A"}


def play(experiment: dict, responses: list[str]):
    """Scripted replies through the game master in schedule order, every seat a stand-in."""
    return play_scripted("double_consultancy", experiment, ITEM, responses, [CustomResponseModel()] * 3)


REPLIES = ["A opens: <quote>Mara Okafor works at the bakery</quote>", "Question: Why the bakery?",
           "B opens: the library.", "Question: Whose sentence is that?",
           "A answers: she bakes.", "B answers: <quote>Mara works at the library</quote>",
           "Both sessions read.\nVerdict: A 0.8"]


def test_each_consultant_sees_only_its_own_questions_and_the_judge_sees_both():
    master, seen, scores = play({"name": "t", "questions": 1}, REPLIES)
    assert [role for role, _ in seen] == ["Consultant A", "Questioner A", "Consultant B", "Questioner B",
                                          "Consultant A", "Consultant B", "Judge"]
    a_second, b_second = seen[4][1], seen[5][1]
    assert "The judge asks: Why the bakery?" in a_second and "Whose sentence" not in a_second
    assert "The judge asks: Whose sentence is that?" in b_second and "Why the bakery" not in b_second
    a_views = [c for role, c in seen if role in ("Consultant A", "Questioner A")]
    b_views = [c for role, c in seen if role in ("Consultant B", "Questioner B")]
    assert not any("B opens" in c or "B answers" in c for c in a_views)  # A's session never shows B's speeches
    assert not any("A opens" in c or "A answers" in c for c in b_views)
    assert "A opens" in seen[1][1] and "B opens" not in seen[1][1]  # A's questioner reads A only
    judge = seen[6][1]
    assert PASSAGE not in judge
    for text in ("Session with Consultant A", "Session with Consultant B", "Question: Why the bakery?",
                 "Question: Whose sentence is that?", "A answers: she bakes.", "B opens: the library.",
                 "<v_quote>Mara Okafor works at the bakery</v_quote>", "<u_quote>Mara works at the library</u_quote>"):
        assert text in judge, text
    assert judge.index("A answers") < judge.index("Session with Consultant B")  # one session, then the other
    assert scores["Main Score"] == 100 and scores["Player 1 Wins"] == 1 and scores["Judge Correct"] == 1
    assert scores["Quote Precision A"] == 1.0 and scores["Quote Precision B"] == 0.0
    assert math.isnan(play({"name": "t", "questions": 0}, ["A.", "B.", "Verdict: maybe"])[2]["Main Score"])


def test_a_questioner_asks_and_never_decides():
    master, _, scores = play({"name": "t", "questions": 1}, ["A opens.", "Verdict: A 0.9"])
    assert scores["Aborted"] == 1 and master.verdict is None


def test_experts_before_the_programmatic_judge_and_its_rule():
    """Expert consultants let the programmatic judge, weighing each consultant's evidence as debate's judge
    weighs each debater's, find the correct answer on every validation item."""
    from playpen.games.debate import protocol as pr

    rows = list(games.load_instances("double_consultancy", "validation"))
    masters = [games.play_episode("double_consultancy", row, [games.expert_model(skill=1.0, seed=i)])
               for i, row in enumerate(rows)]
    assert all(m.verdict[0] == m.correct for m in masters) and {m.correct for m in masters} == {"A", "B"}
    view = masters[0].players_by_side["J"].get_perspective()
    blocks = pr.read_transcript(view[0]["content"])
    assert {label for label, _ in blocks} == {"Consultant A", "Consultant B"}
    assert not any("Question:" in text for _, text in blocks)  # questions are not part of a speech


def test_a_double_consultancy_tournament_and_playpen_list_games(tmp_path, capsys):
    from playpen.cli import main
    from playpen.debate_tools import tournament

    cfg = tournament.TournamentConfig(name="dc", game="double_consultancy", debaters=["programmatic", "expert-bo3"],
                                      judges=["programmatic"], max_instances=3,
                                      best_of_n={"expert-bo3": {"model": "programmatic", "n": 3}},
                                      output_dir=str(tmp_path))
    result = tournament.run(cfg, log=lambda *_: None)
    rows = json.loads((Path(result["dir"]) / "matches.json").read_text())
    assert len(rows) == 2 * 3 and {tuple(r["advocates"]) for r in rows} == {("programmatic", "expert-bo3"),
                                                                             ("expert-bo3", "programmatic")}
    assert result["judges"]["programmatic"]["accuracy"] == 1.0 and "rating" in result["advocates"]["expert-bo3"]
    capsys.readouterr()
    assert main(["list", "games"]) == 0
    assert "double_consultancy" in capsys.readouterr().out


@pytest.mark.parametrize("split", ["validation", "train"])
def test_the_train_split_pins_the_judge_and_consultant_b(split):
    experiments = {row["experiment"]["name"]: row["experiment"]
                   for row in games.load_instances("double_consultancy", split)}
    assert set(experiments) == {"no_questions", "one_question", "two_questions_scratchpad"}
    pinned = {e.get("judge") for e in experiments.values()} | {e.get("opponent") for e in experiments.values()}
    assert pinned == ({"programmatic"} if split == "train" else {None})
