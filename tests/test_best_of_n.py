"""Best-of-N advocates (playpen/games/debate/best_of_n.py): the speech given is the chooser's argmax, records keep
every candidate and the choice, the judge scores a candidate reading it in context, the rollout engine samples a
local policy's candidates and keeps the chosen tokens, choices become DPO pairs with both probabilities, and
tournament debaters can be best-of-N."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from clemcore.backends import BatchGenerativeModel, CustomResponseModel, ModelSpec
from clemcore.clemgame import GameInteractionsRecorder

from playpen import games
from playpen.games.common import episode_gm_events
from playpen.games.debate import best_of_n as bon
from playpen.games.debate import protocol as pr
from tests.helpers import engine, fails, word_problems

PASSAGE = "Mara Okafor works at the bakery. Tomas Reyes works at the library. Mara keeps a parrot."
ITEM = {"game_id": 0, "passage": PASSAGE, "question": "Where does Mara Okafor work?",
        "answers": {"A": "the bakery", "B": "the library"}, "correct": "A"}
PINNED = {"name": "t", "rounds": 1, "judge": "programmatic", "opponent": "programmatic",
          "main_score": "player_1_preference"}
# Debater A's candidates and what the programmatic judge makes of each with A's speech as the only one so far:
# no evidence for A (a tie, A wins at 0.5); a verified quote naming the subject and A's answer (+2.25: 0.90);
# a quote that is not in the passage (-1: B wins at 0.73, A's probability 0.27)
CANDIDATES = ["I argue for the library.", "It is the bakery: <quote>Mara Okafor works at the bakery</quote>",
              "<quote>Mara works at the bakery</quote>"]
JUDGE_PROBABILITIES = [0.5, 0.9, 0.27]


class Scripted(BatchGenerativeModel):
    """A clemcore model that gives its replies in order, one per request, and keeps what it was asked."""

    def __init__(self, name: str, replies: list[str]):
        super().__init__(ModelSpec(model_name=name))
        self.replies, self.asked = list(replies), []
        self.set_gen_args(temperature=0.0, max_tokens=32)

    def generate_response(self, messages):
        self.asked.append(json.loads(json.dumps(messages)))
        return messages, {}, self.replies.pop(0)

    def generate_batch_response(self, batch):
        return [self.generate_response(m) for m in batch]


class BakeryJudge(Scripted):
    """A model judge that prefers A when it reads a verified quote of the bakery sentence."""

    def generate_response(self, messages):
        self.asked.append(json.loads(json.dumps(messages)))
        return messages, {}, "Verdict: A 0.8" if "bakery</v_quote>" in messages[-1]["content"] else "Verdict: B 0.6"


def run(game: str, experiment: dict, instance: dict, models: list):
    """One episode the way clemcore's sequential runner plays it (each player asked for its reply), recorded."""
    master = games.load_benchmark(game).create_game_master(experiment, models)
    master.setup(**json.loads(json.dumps(instance)))
    recorder = GameInteractionsRecorder(game, experiment["name"], instance["game_id"], "test", {})
    for player in master.get_players():
        recorder.log_player(player.name, player.game_role, player.model.name)
    master.register(recorder)
    master.before_game()
    done = False
    while not done:
        player = master.current_player
        done, _ = master.step(player(master.get_context_for(player)))
    return master, json.loads(json.dumps(recorder.interactions))


def choices(interactions: dict) -> list[dict]:
    return [note for _, note in episode_gm_events(interactions, bon.NOTE)]


def test_the_speech_given_is_the_choosers_argmax_and_records_keep_every_candidate():
    learner = Scripted("learner", CANDIDATES)
    master, interactions = run("debate", {**PINNED, "best_of_n": {"n": 3, "chooser": "judge"}}, ITEM,
                               [learner, CustomResponseModel(), CustomResponseModel()])
    assert len(learner.asked) == 3 and learner.asked[0] == learner.asked[2]  # three samples of one view
    (note,) = choices(interactions)
    assert [c["text"] for c in note["candidates"]] == CANDIDATES
    assert [c["score"] for c in note["candidates"]] == pytest.approx(JUDGE_PROBABILITIES)
    assert note["chosen"] == 1 and note["chooser"] == "judge" and note["side"] == "A" and note["speaker"] == "A"
    assert note["prompt"][0]["content"].startswith("You are Debater A") and PASSAGE in note["prompt"][0]["content"]
    given = [s for _, s in episode_gm_events(interactions, "speech") if s["speaker"] == "A"]
    assert given[0]["shown"] == "It is the bakery: <v_quote>Mara Okafor works at the bakery</v_quote>"
    assert master.verdict[0] == "A" and interactions["players"]["Player 1"]["model_name"] == "learner"
    assert not [s for s in master.speeches if s.speaker == "B" and "bakery" in s.raw]  # B is no best-of-n seat


def test_the_judge_reads_each_candidate_in_context_and_keeps_its_own_memory():
    """chooser: judge with a model in the judge's seat: the model is shown what it would read at its verdict with
    the candidate as the newest speech (quotes marked, no passage); its own later verdict sees only what was said."""
    judge = BakeryJudge("judge", [])
    experiment = {"name": "t", "rounds": 1, "openings": "sequential", "opponent": "programmatic",
                  "best_of_n": {"n": 3}}
    master, interactions = run("debate", experiment, ITEM, [Scripted("learner", CANDIDATES), CustomResponseModel(),
                                                            judge])
    assert [c["score"] for c in choices(interactions)[0]["candidates"]] == pytest.approx([0.4, 0.8, 0.4])
    probes, verdict = judge.asked[:3], judge.asked[3]
    for probe, candidate in zip(probes, CANDIDATES):
        (message,) = probe
        assert message["content"].startswith("You are the judge of a debate") and PASSAGE not in message["content"]
        assert "[Debater A, round 1 of 1]\n" + pr.read_speech(candidate, "A", 0, master.protocol, PASSAGE).shown \
            in message["content"] and message["content"].endswith("Your verdict?")
    assert len(verdict) == 1 and "Debater B" in verdict[0]["content"]  # the real verdict: the debate as said
    assert CANDIDATES[0] not in verdict[0]["content"] and CANDIDATES[2] not in verdict[0]["content"]


def scored_by_length(texts: list[str]) -> list[float]:
    """A callable scorer: longer speeches score higher."""
    return [float(len(t)) for t in texts]


def test_a_callable_scorer_chooses_and_an_expert_can_be_best_of_n():
    _, interactions = run("consultancy", {"name": "c", "questions": 0, "judge": "programmatic",
                                          "best_of_n": {"n": 3, "chooser": "tests.test_best_of_n:scored_by_length"}},
                          {**ITEM, "consultant_side": "B"}, [Scripted("learner", CANDIDATES), CustomResponseModel()])
    (note,) = choices(interactions)
    assert note["chosen"] == 1 and note["speaker"] == "C" and note["side"] == "B"
    assert [c["score"] for c in note["candidates"]] == [float(len(t)) for t in CANDIDATES]
    # an expert that slips (skill 0.2) drawing four moves before the programmatic judge: its best wins
    row = next(iter(games.load_instances("debate", "train")))
    experiment = {**row["experiment"], "best_of_n": {"n": 4, "chooser": "programmatic"}}
    master = games.play_episode("debate", {"experiment": experiment, "game_instance": row["game_instance"]},
                                [games.expert_model(skill=0.2, seed=3)])
    assert master.players_by_side["A"].best_of_n.n == 4 and master.players_by_side["B"].best_of_n is None


def test_the_engine_samples_a_policys_candidates_and_keeps_the_chosen_tokens(policy):
    """playpen-tiny as a best-of-3 Debater A on the train split (pinned expert and judge): greedy play, candidates
    sampled at best_of_n's temperature; the learner's trace holds the chosen candidate."""
    from playpen.games.instances import load_instances

    rows = [({**e, "best_of_n": {"n": 3, "temperature": 1.0}}, i)
            for e, i in load_instances("debate", "train", experiment="simultaneous_1_round")[:3]]
    episodes = engine(policy, max_new_tokens=16, temperature=0.0, seed=0).play("debate", rows)
    for episode in episodes:
        (note,) = choices(episode.interactions)
        scores = [c["score"] for c in note["candidates"]]
        assert len(scores) == 3 and note["chosen"] == bon.argmax(scores)
        assert all(0 <= s <= 1 for s in scores)
        (trace,) = episode.traces  # the learner holds Debater A's seat only
        assert trace.messages[1]["content"].strip() == note["candidates"][note["chosen"]]["text"]
        assert episode.interactions["players"]["Player 2"]["model_name"] == "programmatic"
    assert len({c["text"] for e in episodes for c in choices(e.interactions)[0]["candidates"]}) > 3


def test_choices_become_dpo_pairs_with_both_probabilities(tmp_path, capsys):
    from playpen import training_data
    from playpen.cli import main
    from playpen.train.dpo import _row_problem

    _, interactions = run("debate", {**PINNED, "best_of_n": {"n": 3}}, ITEM,
                          [Scripted("learner", CANDIDATES), CustomResponseModel(), CustomResponseModel()])
    (pair,) = bon.preference_pairs(interactions)
    assert pair["chosen"] == [{"role": "assistant", "content": CANDIDATES[1]}]
    assert pair["rejected"] == [{"role": "assistant", "content": CANDIDATES[2]}]  # the judge liked it least
    assert pair["meta"]["chosen_score"] == pytest.approx(0.9) and pair["meta"]["rejected_score"] == pytest.approx(0.27)
    assert pair["prompt"][-1]["role"] == "user" and pair["prompt"][0]["content"].startswith("You are Debater A")
    assert bon.preference_pairs(interactions, min_margin=0.7) == []
    folder = tmp_path / "records" / "learner" / "debate" / "t" / "instance_0"  # a records folder, clem's layout
    folder.mkdir(parents=True)
    (folder / "interactions.json").write_text(json.dumps(interactions))
    assert main(["debate", "pairs", str(tmp_path / "records"), "-o", str(tmp_path / "pairs.jsonl")]) == 0
    rows = training_data.read_jsonl_rows(str(tmp_path / "pairs.jsonl"), "test", "data", _row_problem)
    assert len(rows) == 1 and rows[0]["meta"]["rejected_score"] == pytest.approx(0.27)
    (tmp_path / "empty").mkdir()
    assert "no best-of-n choice recorded" in fails(capsys, ["debate", "pairs", str(tmp_path / "empty"), "-o",
                                                            str(tmp_path / "none.jsonl")])


def test_dpo_round_on_best_of_n_pairs(tmp_path, monkeypatch):
    """The shipped dpo/debate_best_of_n config (pairs: best_of_n): each instance played once with a best-of-4 Debater
    A, every choice whose candidates the judge scored apart is a pair, one DPO step."""
    from playpen.train import train

    experiment, instances = word_problems(8)
    file = tmp_path / "word_problems.json"
    file.write_text(json.dumps({"experiments": [{**experiment, "game_instances": instances}]}))
    monkeypatch.chdir(tmp_path)
    run_ = train("dpo", "dpo/debate_best_of_n", [
        f"storage_root={tmp_path / 'runs'}", "cpu_threads=1", f"split={file}", "instances=8", "iterations=1",
        "max_new_tokens=12", "trainer.max_steps=1",
        "trainer.per_device_train_batch_size=2"])
    pairs = [json.loads(line) for line in (run_.path / "pairs" / "iter_00.jsonl").read_text().splitlines()]
    assert pairs and all(p["meta"]["chosen_score"] > p["meta"]["rejected_score"] for p in pairs)
    assert json.loads((run_.checkpoints / "iter_00" / "round_done.json").read_text())["rows"] == len(pairs)


def test_a_tournament_debater_can_be_best_of_n(tmp_path):
    """best_of_n entries of the tournament file: the expert drawing two moves per turn (chosen by the programmatic
    judge) against the expert drawing four (chosen by this match's judge), rated apart; their choices are in the
    records."""
    from playpen.debate_tools import tournament
    from playpen.debate_tools.recorded_episodes import episodes_under

    cfg = tournament.TournamentConfig(
        name="bon", debaters=["expert-bo2", "expert-bo4"], judges=["programmatic"], max_instances=6,
        best_of_n={"expert-bo2": {"model": "programmatic", "n": 2, "chooser": "programmatic"},
                   "expert-bo4": {"model": "programmatic", "n": 4}}, output_dir=str(tmp_path))
    result = tournament.run(cfg, log=lambda *_: None)
    episodes = episodes_under(Path(result["dir"]) / "records")
    assert {e.seats["Debater A"] for e in episodes} == {"expert-bo2", "expert-bo4"} and len(episodes) == 12
    for e in episodes:
        notes = choices(e.interactions)
        assert {n["speaker"] for n in notes} == {"A", "B"}  # both seats choose: both debaters are best-of-n
        sizes = {n["speaker"]: len(n["candidates"]) for n in notes}
        assert sizes == {side: 2 if e.seats[f"Debater {side}"] == "expert-bo2" else 4 for side in "AB"}
    assert set(result["advocates"]) == {"expert-bo2", "expert-bo4"}


@pytest.mark.parametrize("overrides, message", [
    (["best_of_n={n: 1}"], "best_of_n.n must be an integer >= 2 (one candidate is an ordinary seat), got 1"),
    (["best_of_n={n: 4, chooser: nobody}"], "best_of_n.chooser must be judge, programmatic or a callable scorer"),
    (["best_of_n={n: 4, temperature: 0}"], "best_of_n.temperature must be > 0 (the candidates are sampled), got 0"),
    (["pairs=best_of_n"], "pairs: best_of_n needs best-of-n advocates: set best_of_n"),
    (["game=wordle", "best_of_n=4"], "best_of_n is for the advocates of debate, consultancy, double_consultancy; "
                                     "wordle has none")])
def test_bad_best_of_n_settings_fail_in_one_line(tmp_path, capsys, overrides, message):
    err = fails(capsys, ["train", "dpo", "--config", "dpo/debate_iterative", f"storage_root={tmp_path / 'runs'}",
                         *overrides], tmp_path / "runs")
    assert message in err


def test_a_tournament_best_of_n_entry_is_checked_before_play(tmp_path, capsys):
    config = tmp_path / "t.yaml"
    config.write_text("name: t\ndebaters: [programmatic, bo4]\njudges: [programmatic]\n"
                      "best_of_n: {bo4: {model: programmatic, n: 4, seats: [A]}}\n")
    assert "a tournament debater samples in every seat it takes" in fails(
        capsys, ["debate", "tournament", str(config), f"output_dir={tmp_path}"])
    assert not (tmp_path / "t").exists()
    assert math.isclose(bon.argmax([None, 0.2, 0.2, None]), 1) and bon.argmax([None, None]) == 0


def test_playpen_eval_plays_the_best_of_n_instance_set(tmp_path):
    """`playpen eval MODEL -g debate --instance-set instances_best_of_n`: Debater A samples four speeches per
    turn and the judge (here playpen-tiny itself, which never gives a verdict line) chooses; all four are kept."""
    from playpen.cli import main

    assert main(["eval", "playpen-tiny", "-g", "debate", "--instance-set", "instances_best_of_n", "--instances", "1",
                 "-L", "12", "-r", str(tmp_path)]) == 0
    (file,) = tmp_path.rglob("interactions.json")
    (note,) = choices(json.loads(file.read_text()))[:1]
    assert len(note["candidates"]) == 4 and note["speaker"] == "A"
    assert all(c["score"] is None for c in note["candidates"]) and note["chosen"] == 0  # no verdict: no score
