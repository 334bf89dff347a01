"""debate and consultancy: the protocol (speech order, rounds, scratchpad, quotes verified verbatim,
verdicts), the programmatic judge and expert advocates, playpen-tiny as debater and as judge, judge-preference
pairs from branched rounds, one iterative-DPO round, tournaments, re-judging, winning transcripts for SFT, and
bad inputs failing in one line."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from clemcore.backends import CustomResponseModel, ModelSpec

from playpen import games
from playpen.cli import main as playpen_main
from playpen.games.debate import protocol as pr
from tests.helpers import engine, fails, play_scripted, train, word_problems

PASSAGE = "Mara Okafor works at the bakery. Tomas Reyes works at the library. Mara keeps a parrot."
ITEM = {"game_id": 0, "passage": PASSAGE, "question": "Where does Mara Okafor work?",
        "answers": {"A": "the bakery", "B": "the library"}, "correct": "A"}


def play(game: str, experiment: dict, instance: dict, responses: list[str], models=None):
    return play_scripted(game, experiment, instance, responses, models)


# ---------------------------------------------------------------- protocol

def test_quotes_are_verified_verbatim_and_marked_for_the_judge():
    protocol = pr.Protocol(scratchpad=True, max_words=40)
    speech = pr.read_speech("<scratchpad>secret plan</scratchpad> It is the bakery: <quote>Mara Okafor works at "
                            "the  bakery</quote>, not <quote>Mara works at the library</quote>. "
                            "<v_quote>Tomas keeps a parrot</v_quote>", "A", 0, protocol, PASSAGE)
    assert [q["verified"] for q in speech.quotes] == [True, False, False]  # a forged <v_quote> is checked too
    assert "secret plan" not in speech.shown and "<v_quote>Mara Okafor works at the  bakery</v_quote>" in speech.shown
    assert "<u_quote>Mara works at the library</u_quote>" in speech.shown
    assert pr.verify("  tomas reyes works at the library ", PASSAGE) is False  # case counts: verbatim
    long = pr.read_speech("word " * 50, "B", 1, protocol, PASSAGE)
    assert long.truncated and long.shown.endswith("[...]") and len(long.shown.split()) == 41
    with pytest.raises(ValueError, match="empty"):
        pr.read_speech("<scratchpad>only thoughts</scratchpad>", "A", 0, protocol, PASSAGE)


@pytest.mark.parametrize("reply, expected", [
    ("A is better supported.\nVerdict: A 0.8", ("A", 0.8)), ("Verdict: b (70%)", ("B", 0.7)),
    ("Verdict: B with probability 0.95.", ("B", 0.95)), ("Verdict: A, 1", ("A", 1.0)),
    ("I pick A", None), ("Verdict: A 0.9\nthanks", None)])
def test_verdicts_parse_from_the_last_line(reply, expected):
    assert pr.parse_verdict(reply) == expected
    with pytest.raises(ValueError, match="between 0.5 and 1"):
        pr.parse_verdict("Verdict: A 0.3")


def test_speech_order_rounds_scratchpad_and_scores():
    experiment = {"name": "t", "rounds": 2, "openings": "simultaneous", "rebuttals": "sequential",
                  "scratchpad": True}
    replies = ["Opening A <quote>Mara Okafor works at the bakery</quote>", "<scratchpad>B plan</scratchpad>Opening B",
               "Rebuttal A <quote>Mara works at the library</quote>", "Rebuttal B", "Thinking.\nVerdict: A 0.9"]
    master, seen, scores = play("debate", experiment, ITEM, replies)
    roles = [role for role, _ in seen]
    assert roles == ["Debater A", "Debater B", "Debater A", "Debater B", "Judge"]
    assert "Opening A" not in seen[1][1]  # simultaneous openings: B has not heard A's
    assert "Opening B" in seen[2][1] and "B plan" not in seen[2][1]  # A hears B's opening, not its scratchpad
    assert "Rebuttal A" in seen[3][1]  # sequential rebuttals: B hears A's rebuttal first
    judge = seen[4][1]
    assert "Passage" not in judge and PASSAGE not in judge  # the judge never sees the passage
    assert "<v_quote>Mara Okafor works at the bakery</v_quote>" in judge
    assert "<u_quote>Mara works at the library</u_quote>" in judge
    assert scores["Main Score"] == 100 and scores["Judge Correct"] == 1 and scores["Player 1 Wins"] == 1
    assert scores["Quote Precision A"] == 0.5 and math.isnan(scores["Quote Precision B"])
    assert scores["Judge Probability Correct"] == pytest.approx(0.9)
    _, seen, _ = play("debate", {**experiment, "openings": "sequential"}, ITEM, replies)
    assert "Opening A" in seen[1][1]  # sequential openings: B hears A's first
    _, _, scores = play("debate", {**experiment, "main_score": "player_1_preference"}, {**ITEM, "correct": "B"},
                        replies)
    assert scores["Main Score"] == pytest.approx(90) and scores["Judge Correct"] == 0  # A's preference, not truth
    _, _, scores = play("debate", experiment, ITEM, replies[:4] + ["no idea"])
    assert scores["Aborted"] == 1 and math.isnan(scores["Main Score"])


def test_consultancy_judge_asks_then_decides():
    item = {**ITEM, "consultant_side": "B"}
    replies = ["It is the library. <quote>Tomas Reyes works at the library</quote>", "Question: Who works there?",
               "Tomas does, trust me.", "The quote is about Tomas.\nVerdict: A 0.75"]
    _, seen, scores = play("consultancy", {"name": "c", "questions": 1}, item, replies)
    assert [r for r, _ in seen] == ["Consultant", "Judge", "Consultant", "Judge"]
    assert "The judge asks: Who works there?" in seen[2][1]
    assert scores["Judge Correct"] == 1 and scores["Player 1 Wins"] == 0 and scores["Quote Precision"] == 1.0


@pytest.mark.parametrize("game", ["debate", "consultancy"])
def test_experts_before_the_programmatic_judge(game):
    """The programmatic judge rewards verified quotes that name the subject and state the answer: experts on
    either side let it find the correct answer in every validation item; player 1 wins about half."""
    rows = list(games.load_instances(game, "validation"))
    masters = [games.play_episode(game, row, [games.expert_model(skill=1.0, seed=i)]) for i, row in enumerate(rows)]
    verdicts = [(m.verdict[0], m.correct, m.player_1_side) for m in masters]
    assert all(side == correct for side, correct, _ in verdicts)
    assert 0.3 <= sum(side == p1 for side, _, p1 in verdicts) / len(verdicts) <= 0.7
    quotes = [q for m in masters for s in m.speeches for q in s.quotes]
    assert quotes and all(q["verified"] for q in quotes)


# ---------------------------------------------------------------- playpen-tiny as debater and as judge

DEBATERS = dict(max_new_tokens=24, temperature=1.0, batch_size=32, seed=0)  # sampled debates, seeded

def test_tiny_debaters_before_the_programmatic_judge(policy):
    """Both debaters are playpen-tiny, the judge's seat is pinned to the programmatic judge (experiment key)."""
    from playpen.games.instances import load_instances

    pairs = [({**e, "judge": "programmatic"}, i) for e, i in load_instances("debate", "validation", limit=3)]
    episodes = engine(policy, **DEBATERS).play("debate", pairs)
    for episode in episodes:
        players = episode.interactions["players"]
        assert [players[p]["model_name"] for p in ("Player 1", "Player 2", "Player 3")] == \
            ["playpen-tiny", "playpen-tiny", "programmatic"]
        assert not episode.aborted and episode.episode_scores["Judge Correct"] in (0, 1)  # tiny's speeches are text
        assert episode.episode_scores["Quotes A"] >= 0 and len(episode.traces) == 2  # both debater seats learn


def test_playpen_eval_plays_debate_with_tiny_in_every_seat(tmp_path, capsys):
    """`playpen eval playpen-tiny -g debate --instances 2 -L 24`: tiny is also the judge, and has never learned
    the verdict line, so its debates end aborted at the verdict: played, recorded and scored as such."""
    from playpen.cli import main

    assert main(["eval", "playpen-tiny", "-g", "debate", "--instances", "2", "-L", "24", "-r", str(tmp_path)]) == 0
    val = json.loads((tmp_path / "playpen-tiny.val.json").read_text())
    assert val["games"]["debate"]["episodes"] == 2
    for file in tmp_path.rglob("interactions.json"):
        interactions = json.loads(file.read_text())
        judge = [e for t in interactions["turns"] for e in t if e["from"] == "Player 3"]
        assert judge and interactions["players"]["Player 3"]["model_name"] == "playpen-tiny"
        assert json.loads((file.parent / "scores.json").read_text())["episode scores"]["Aborted"] == 1


def test_branched_rounds_give_judge_preference_pairs(policy):
    from playpen.rollout import preference_pairs

    experiment, instances = word_problems(8)
    episodes = engine(policy, **DEBATERS).branch("debate", [(experiment, i) for i in instances], branch_factor=4)
    pairs = preference_pairs(episodes)
    assert pairs, [e.messages[1]["content"] for e in episodes]
    for pair in pairs:
        assert pair["meta"]["chosen_reward"] > pair["meta"]["rejected_reward"]  # the judge preferred chosen
        assert pair["prompt"][0]["content"].startswith("Solve this word problem")  # Debater A's own view
        assert pair["chosen"][0]["role"] == "assistant" and pair["chosen"] != pair["rejected"]


def test_branches_meet_the_same_pinned_opponent(policy):
    """The engine copies the game before the learner's reply; the pinned expert opponent (which slips half the
    time on the train split) must make the same moves in every branch, or pairs would reward its luck."""
    from playpen.games.instances import load_instances

    rows = load_instances("debate", "train", experiment="simultaneous_1_round")[:4]
    episodes = engine(policy, **DEBATERS).branch("debate", rows, branch_factor=3)
    by_root = {}
    for episode in episodes:
        said = [e["action"]["content"] for t in episode.interactions["turns"] for e in t if e["from"] == "Player 2"]
        by_root.setdefault(episode.branch.root, set()).add(tuple(said))
    assert len(by_root) == 4 and all(len(variants) == 1 for variants in by_root.values())


def test_one_iterative_dpo_round_on_judge_preferences(tmp_path, monkeypatch):
    from playpen.storage import read_jsonl
    from playpen.train import train

    experiment, instances = word_problems(8)
    file = tmp_path / "word_problems.json"
    file.write_text(json.dumps({"experiments": [{**experiment, "game_instances": instances}]}))
    monkeypatch.chdir(tmp_path)
    run = train("dpo", "dpo/debate_iterative", [
        f"storage_root={tmp_path / 'runs'}", "cpu_threads=1", f"split={file}", "instances=8", "iterations=1",
        "max_new_tokens=12", "trainer.max_steps=1", "trainer.per_device_train_batch_size=2"])
    pairs = [json.loads(line) for line in (run.path / "pairs" / "iter_00.jsonl").read_text().splitlines()]
    assert pairs and json.loads((run.checkpoints / "iter_00" / "round_done.json").read_text())["global_step"] == 1
    assert (run.checkpoints / "iter_00" / "final" / "adapter_config.json").is_file()
    assert list(run.records.glob("*/iter_00000/debate/word_problems/instance_*/scores.json"))
    (played,) = [r for r in read_jsonl(run.metrics) if "pairs" in r]
    assert played["pairs"] == len(pairs) and 0 <= played["success_rate"] <= 1  # A's win rate of the round


# ---------------------------------------------------------------- tournaments, re-judging, SFT data

def test_tournament_table_heatmap_and_rejudging(tmp_path):
    """playpen-tiny against the expert before the programmatic judge and before playpen-tiny (clemcore's runner,
    greedy); re-judging the records with the judge that judged them reproduces its replies and verdicts."""
    from playpen.debate_tools import rejudge, tournament

    cfg = tournament.TournamentConfig(name="t", debaters=["playpen-tiny", "programmatic"],
                                      judges=["programmatic", "playpen-tiny"], max_instances=2, max_new_tokens=24,
                                      output_dir=str(tmp_path))
    result = tournament.run(cfg, log=lambda *_: None)
    folder = Path(result["dir"])
    assert (folder / "heatmap.png").stat().st_size > 0 and "| playpen-tiny |" in (folder / "results.md").read_text()
    assert len(json.loads((folder / "matches.json").read_text())) == 2 * 2 * 2  # seatings x judges x instances
    expert, learner = result["advocates"]["programmatic"], result["advocates"]["playpen-tiny"]
    assert expert["win_rate"] == 1.0 and learner["win_rate"] == 0.0 and expert["rating"] > learner["rating"]
    assert result["judges"]["programmatic"]["no_verdict_pct"] == 0 and result["judges"]["playpen-tiny"]["episodes"] == 4
    for judge in ("programmatic", "playpen-tiny"):
        out = rejudge.rejudge(folder / "records", judge, max_tokens=24)
        same = [r for r in out["rows"] if r["recorded_judge"] == judge]
        assert len(same) == 4 and all(r["new_reply"] == r["recorded_reply"] and r["agree"] for r in same)
    assert playpen_main(["debate", "tournament", "debate/tournament_tiny",
                         f"output_dir={tmp_path}", "name=t", "max_instances=2", "max_new_tokens=24"]) == 0  # rerun


def test_winning_transcripts_become_sft_rows(tmp_path):
    """`playpen data RECORDS --outcome success` on the train split (player 1's win) keeps the winner's view; the
    experts' own winning transcripts are SFT rows too."""
    from clemcore.clemgame import (ExperimentFileSaver, GameBenchmarkCallbackList, GameInstances, InstanceFileSaver,
                                   InteractionsFileSaver, ResultsFolder)
    from clemcore.clemgame.runners import sequential

    from playpen.dataset_from_records import convert
    from playpen.eval.evaluation import score_game
    from playpen.debate_tools.transcripts import winning_transcripts
    from playpen.games.registry import resolve_game
    from playpen.training_data import check_messages

    rows = list(games.load_instances("debate", "train"))[:6]
    learner = CustomResponseModel(ModelSpec(model_name="stand-in-learner"))  # plays the expert's policy
    folder = ResultsFolder(tmp_path / "records", run_dir="stand-in-learner")
    infos = {"player_0": "stand-in-learner"}
    savers = [InstanceFileSaver(folder), ExperimentFileSaver(folder, player_model_infos=infos),
              InteractionsFileSaver(folder, player_model_infos=infos)]
    sequential.run(games.load_benchmark("debate"), GameInstances("debate", rows), [learner],
                   callbacks=GameBenchmarkCallbackList(savers))
    score_game(resolve_game("debate"), tmp_path / "records" / "stand-in-learner" / "debate")
    stats = convert(tmp_path / "records", tmp_path / "won.jsonl", game="debate", outcome="success")
    won = [json.loads(line) for line in (tmp_path / "won.jsonl").read_text().splitlines()]
    wins = [json.loads(f.read_text())["episode scores"]["Player 1 Wins"] for f in tmp_path.rglob("scores.json")]
    honest = sum(r["game_instance"]["correct"] == "A" for r in rows)  # the expert A always wins when right
    assert stats.rows == len(won) == sum(wins) >= honest and {r["meta"]["game_role"] for r in won} == {"Debater A"}
    demos = winning_transcripts("consultancy", episodes=6, seed=1)
    assert demos and all(check_messages(r["messages"]) is None for r in demos + won)


# ---------------------------------------------------------------- bad input: one line, exit 2

@pytest.mark.parametrize("drop, message", [
    ("passage", "has no passage: the advocates need a text to argue from and quote"),
    ("correct", "has no correct answer: set 'correct' to \"A\" or \"B\"")])
def test_bad_instances_fail_in_one_line(tmp_path, capsys, drop, message):

    file = tmp_path / "bad.json"
    instance = {k: v for k, v in ITEM.items() if k != drop}
    file.write_text(json.dumps({"experiments": [{"name": "x", "game_instances": [instance]}]}))
    err = fails(capsys, ["eval", "playpen-tiny", "-g", "debate", "--instance_set", str(file), "-r",
                               str(tmp_path / "out")])
    assert message in err


def test_missing_judge_fails_in_one_line(tmp_path, capsys):
    config = tmp_path / "t.yaml"
    config.write_text("name: t\ndebaters: [playpen-tiny, programmatic]\njudges: []\n")
    assert "no judge" in fails(capsys, ["debate", "tournament", str(config), f"output_dir={tmp_path}"])
    (tmp_path / "records").mkdir()
    assert "re-judging needs a judge" in fails(capsys, ["debate", "rejudge", str(tmp_path / "records")])
    with pytest.raises(ValueError, match="requires 3 players"):  # a debate given two models has no judge
        games.load_benchmark("debate").create_game_master({"name": "x"}, [CustomResponseModel()] * 2)


def test_grpo_self_play_debaters_before_a_model_judge(tmp_path, monkeypatch):
    """The learner in both debater seats, a frozen model (playpen-tiny) as the judge (teacher_seats: [2]), on
    freshly generated train passages without pinned partners; GRPO trains seat A on the judge's preference."""
    from playpen.debate_tools.recorded_episodes import episodes_under
    from playpen.model_registry import resolve_model
    from playpen.train import train

    monkeypatch.chdir(tmp_path)  # the judge: playpen-tiny registered under its own name
    (tmp_path / "model_registry.json").write_text(json.dumps([{**resolve_model("playpen-tiny"),
                                                               "model_name": "tiny-judge"}]))
    run = train("grpo", None, [
        f"storage_root={tmp_path / 'runs'}", "experiment=debate-judge", "model=playpen-tiny", "game=debate",
        "generate={seed: 7, split: train, programmatic_partners: false}", "instances=2", "group_size=2",
        "partner=tiny-judge", "partner_seats=[2]", "train_seats=first", "max_new_tokens=12", "cpu_threads=1",
        "trainer.max_steps=1", "trainer.per_device_train_batch_size=4"])
    episodes = episodes_under(run.records)
    assert len(episodes) == 4
    learner = {e.seats["Debater A"] for e in episodes} | {e.seats["Debater B"] for e in episodes}
    judges = {e.seats["Judge"] for e in episodes}
    assert judges == {"tiny-judge"} and len(learner) == 1 and learner != judges, (learner, judges)
    assert (run.checkpoints / "checkpoint-1").is_dir()


def test_dpo_on_consultancy_judge_preferences(tmp_path, monkeypatch):
    """consultancy through the iterative DPO config: branched consultant speeches, judge-preference pairs, DPO."""
    from playpen.train import train

    monkeypatch.chdir(tmp_path)
    run = train("dpo", "dpo/debate_iterative", [
        f"storage_root={tmp_path / 'runs'}", "game=consultancy", "cpu_threads=1", "instances=6", "iterations=1",
        "max_new_tokens=12", "trainer.max_steps=1", "trainer.per_device_train_batch_size=2"])
    assert list(run.records.glob("*/iter_00000/consultancy/*/instance_*/scores.json"))
    assert (run.checkpoints / "iter_00" / "round_done.json").is_file()


def test_grpo_with_the_programmatic_teacher_in_chosen_seats(tmp_path, monkeypatch):
    """teacher: programmatic puts the built-in game's experts in teacher_seats: here the expert Debater B and the
    programmatic judge, on generated train passages that pin no seat."""
    from playpen.debate_tools.recorded_episodes import episodes_under
    from playpen.train import train

    monkeypatch.chdir(tmp_path)
    run = train("grpo", None, [
        f"storage_root={tmp_path / 'runs'}", "experiment=debate-expert", "model=playpen-tiny", "game=debate",
        "generate={seed: 7, split: train, programmatic_partners: false}", "instances=2", "group_size=2",
        "partner=programmatic", "partner_seats=[1, 2]", "max_new_tokens=12", "cpu_threads=1",
        "trainer.max_steps=1", "trainer.per_device_train_batch_size=4"])
    episodes = episodes_under(run.records)
    assert len(episodes) == 4 and {e.seats["Debater B"] for e in episodes} == {"programmatic"}
    assert {e.seats["Judge"] for e in episodes} == {"programmatic"}
    assert {e.seats["Debater A"] for e in episodes} == {"playpen-tiny"}


def test_the_curve_starts_from_the_model_the_run_continued(tmp_path):
    """A run that continued a warm-started adapter is measured against that adapter, not the bare base weights."""
    from playpen.debate_tools.curve import policies

    row = {"messages": [{"role": "user", "content": "Argue."}, {"role": "assistant", "content": "The answer is A."}]}
    data = tmp_path / "warm.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for _ in range(4)))
    warm = train("sft", tmp_path / "runs", "experiment=warm", f"data={data}", "trainer.max_steps=1",
                 "trainer.per_device_train_batch_size=2", "trainer.save_steps=1")
    run = tmp_path / "debate-run"
    final = run / "checkpoints" / "iter_00" / "final"
    final.mkdir(parents=True)
    (final / "adapter_config.json").write_text("{}")
    found = policies(run, {"model": str(warm.path), "game": "debate"})
    label, weights, adapter = found[0]
    assert label == "before training" and adapter is not None and Path(adapter).resolve().is_relative_to(
        warm.path.resolve()), found
    assert found[1] == ("after round 0", weights, str(final))


@pytest.mark.slow
def test_a_match_removes_what_a_killed_match_left_and_writes_clem_run_files(tmp_path):
    """records/.playing.* of a match killed before is removed by the next match, never the folder a match being
    played now holds; the records get clem run's run.json, completed.json and player_N.requests.json. ~6 s."""
    from playpen.debate_tools import tournament
    from playpen.storage import LOCK_FILE, private_folder

    cfg = tournament.TournamentConfig(name="t", debaters=["programmatic"], judges=["programmatic"], self_play=True,
                                      max_instances=1, output_dir=str(tmp_path))
    records = tournament.tournament_dir(cfg) / "records"
    dead = records / ".playing.killed"
    dead.mkdir(parents=True)
    (dead / LOCK_FILE).write_text("pid 1 on elsewhere".ljust(199) + "\n")  # as a SIGKILL leaves it: no holder
    with private_folder(records, ".playing.") as playing:  # another match's, being played
        tournament.run(cfg, log=lambda *_: None)
        assert not dead.exists() and playing.is_dir()
    (seated,) = [p for p in records.iterdir() if not p.name.startswith(".")]
    assert json.loads((seated / "run.json").read_text())["games"]["debate"]["num_instances"] == 1
    (episode,) = seated.glob("debate/*/instance_*")
    assert {"completed.json", "player_1.requests.json", "player_3.requests.json"} <= {p.name for p in episode.iterdir()}
