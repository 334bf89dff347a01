"""The built-in games: instance files, clemcore play and scoring, expert demonstrations, and `clem run`/`clem score`
on the tiny model as a subprocess."""
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clemcore.backends import CustomResponseModel, ModelSpec
from clemcore.clemgame import (ExperimentFileSaver, GameBenchmarkCallbackList, GameInstanceGenerator,
                               GameInstances, GameInteractionsRecorder, InstanceFileSaver, InteractionsFileSaver,
                               ResultsFolder)
from clemcore.clemgame.metrics import BENCH_SCORE, METRIC_ABORTED, METRIC_LOSE, METRIC_SUCCESS
from clemcore.clemgame.runners import sequential

from playpen import games
from playpen.games.common import read_lines
from playpen.games.registry import game_entries
from playpen.model_registry import resolve_model
from tests.helpers import CLEMBENCH_SAMPLE as FIXTURES

GAMES = games.BUILTIN_GAMES
WORDLE_SCORES = {1: 100, 2: 100, 3: 100, 4: 50, 5: 30, 6: 20}
READING_GAMES = ("debate", "consultancy", "double_consultancy")  # prompts carry a passage (tests/test_debate.py)


def rows(game: str, split: str = "validation") -> list[dict]:
    return list(games.load_instances(game, split))


def content_key(game: str, instance: dict):
    """What must not repeat between train and validation: the target (or the arithmetic of the problem)."""
    if game == "arithmetic":
        words = instance["problem"].replace(".", " ").split()
        return tuple(w for w in words if w.isdigit() or w in ("more", "away", "loses", "bags"))
    if game == "referencegame":
        return tuple(instance["target_grid"])
    if game in READING_GAMES:
        return instance["passage"]
    if game == "numberguess":
        return instance["lo"], instance["secret"]
    return instance["target_word"]


def play_scripted(game: str, row: dict, responses: list[str]) -> dict:
    """Feeds fixed responses through the game master's step loop with a recorder attached, as clemcore's runner
    does, and scores the interactions the way `clem score` does; returns the scores."""
    benchmark = games.load_benchmark(game)
    master = benchmark.create_game_master(row["experiment"], [CustomResponseModel()])
    master.setup(**row["game_instance"])
    recorder = GameInteractionsRecorder(game, row["experiment"]["name"], row["game_instance"]["game_id"], "test", {})
    for player in master.get_players():
        recorder.log_player(player.name, player.game_role, player.model.name)
    master.register(recorder)
    master.before_game()
    done = False
    for response in responses:
        assert not done, "the game ended before all scripted responses were used"
        done, _ = master.step(response)
    assert done, "the game did not end after the scripted responses"
    scorer = benchmark.create_game_scorer(row["experiment"], row["game_instance"])
    scorer.compute_scores(json.loads(json.dumps(recorder.interactions)))  # as if read back from interactions.json
    return scorer.scores


def outcome(scores: dict) -> tuple:
    episode = scores["episode scores"]
    return episode[METRIC_ABORTED], episode[METRIC_SUCCESS], episode[METRIC_LOSE], episode[BENCH_SCORE]


# ------------------------------------------------------------------ specs and instance files

def test_game_folders_are_registered_and_static_is_marked():
    entries = {e.name: e for e in game_entries() if e.source == "built-in"}
    assert set(GAMES) <= set(entries)
    for name in GAMES:
        spec = games.game_spec(name)
        assert spec["game_name"] == name and isinstance(spec["players"], int)
        assert set(spec["roles"]) == set(games.load_benchmark(name).roles)
        assert games.is_static(spec) == (name == "arithmetic")
        assert games.is_static(entries[name].spec) == games.is_static(spec)


@pytest.mark.parametrize("game", GAMES)
def test_instances_validate_and_splits_are_disjoint(game):
    validation, train = rows(game, "validation"), rows(game, "train")
    if game == "numberguess":  # one shape in domain; a paired comparison of two learners needs hundreds of episodes
        assert len(validation) == len(train) == 400 and {r["experiment"]["name"] for r in validation} == {"width16"}
    else:
        assert 20 <= len(validation) <= 60 and len(train) >= 100  # referencegame: 60, a 1-in-3 choice is noisy
        assert len({r["experiment"]["name"] for r in validation}) == 3
    for split in (validation, train):
        ids = [r["game_instance"]["game_id"] for r in split]
        assert len(set(ids)) == len(ids) and all(isinstance(i, int) for i in ids)  # clemcore finds rows by id
        budget = 1400 if game in READING_GAMES else 600
        for row in split:  # a prompt must leave room for a multi-turn dialogue in a 2k-token context
            prompts = [v for k, v in row["game_instance"].items() if k.endswith("prompt")]
            assert prompts and all(len(p) < budget for p in prompts)
    assert not {r["game_instance"]["game_id"] for r in validation} & {r["game_instance"]["game_id"] for r in train}
    val_keys = {content_key(game, r["game_instance"]) for r in validation}
    train_keys = {content_key(game, r["game_instance"]) for r in train}
    assert not val_keys & train_keys
    assert len(val_keys) == len(validation)  # every validation instance is a different item


@pytest.mark.parametrize("split", ["validation", "train"])
def test_referencegame_target_positions_are_balanced(split):
    """A position that holds the target more often would pay a learner for a positional habit, not for reading
    the grids (an earlier train split had 'second' 46 % of the time; GRPO learned to say 'second')."""
    by_experiment = {}
    for row in rows("referencegame", split):
        for seat in ("player_1_target", "player_2_target"):
            counts = by_experiment.setdefault((row["experiment"]["name"], seat), {})
            counts[row["game_instance"][seat]] = counts.get(row["game_instance"][seat], 0) + 1
    for counts in by_experiment.values():
        assert set(counts) == {"first", "second", "third"} and max(counts.values()) - min(counts.values()) <= 1


@pytest.mark.parametrize("game", GAMES)
def test_regenerating_instances_gives_the_committed_files(game):
    module = importlib.import_module(f"playpen.games.{game}.instancegenerator")
    (generator_class,) = [c for c in vars(module).values() if isinstance(c, type)
                          and issubclass(c, GameInstanceGenerator) and c.__module__ == module.__name__]
    for split, file_name in games.SPLITS.items():
        committed = json.loads((games.game_path(game) / "in" / f"{file_name}.json").read_text())
        for _ in range(2):
            generator = generator_class()
            generator.on_generate(module.SEED, split=split)
            assert json.loads(json.dumps(generator.instances)) == committed, f"{game} {split} is not reproducible"
    other = generator_class()
    other.on_generate(module.SEED + 1, split="validation")
    assert json.loads(json.dumps(other.instances)) != committed


# ------------------------------------------------------------------ main scores through the game masters

@pytest.mark.parametrize("n_guesses", [1, 3, 4, 5, 6])
def test_wordle_main_score_by_number_of_guesses(n_guesses):
    row = rows("wordle")[-1]  # hard: no hint in the prompt
    target = row["game_instance"]["target_word"]
    words = read_lines(games.game_path("wordle") / "resources" / "words.txt")
    wrong = [w for w in words if w != target][:n_guesses - 1]
    scores = play_scripted("wordle", row, [f"GUESS: {w}" for w in wrong] + [f"GUESS: {target.upper()}"])
    assert outcome(scores) == (0, 1, 0, WORDLE_SCORES[n_guesses])
    assert len(scores["round scores"]) == n_guesses
    assert scores["round scores"][n_guesses - 1]["closeness score"] == 25  # 5 greens


def test_wordle_loss_and_clembench_score_keys():
    row = rows("wordle")[0]
    target = row["game_instance"]["target_word"]
    guesses = ["crane", "stony", "crane", "moldy", "whack", "fjord"]
    assert target not in guesses
    scores = play_scripted("wordle", row, [f"GUESS: {g}" for g in guesses])
    assert outcome(scores) == (0, 0, 1, 0)
    assert scores["episode scores"]["total guess repetitions"] == 1
    published = FIXTURES / "Llama-3.3-70B-Instruct-t0.0--Llama-3.3-70B-Instruct-t0.0" / "wordle"
    fixture = json.loads(next(published.glob("1_*/episode_0/scores.json")).read_text())
    assert set(fixture["episode scores"]) <= set(scores["episode scores"])  # same keys as clembench v2.0 wordle


@pytest.mark.parametrize("turn", [1, 2, 3, None])
def test_taboo_main_score_is_100_over_turns(turn):
    row = rows("taboo")[0]
    target = row["game_instance"]["target_word"]
    responses = []
    for t in range(1, 4):
        responses += ["CLUE: think of something you see every day", f"GUESS: {target if t == turn else 'nothing'}"]
        if t == turn:
            break
    scores = play_scripted("taboo", row, responses)
    if turn is None:
        assert outcome(scores) == (0, 0, 1, 0)
    else:
        assert outcome(scores)[:3] == (0, 1, 0) and scores["episode scores"][BENCH_SCORE] == pytest.approx(100 / turn)
        assert scores["round scores"][turn - 1]["Accuracy"] == 1


@pytest.mark.parametrize("correct", [True, False])
def test_referencegame_and_arithmetic_score_100_or_0(correct):
    row = rows("referencegame")[0]
    answer = row["game_instance"]["player_2_target"]
    other = next(p for p in ("first", "second", "third") if p != answer)
    scores = play_scripted("referencegame", row, ["Expression: the grid whose top row is X.X",
                                                   f"Answer: {answer if correct else other}"])
    assert outcome(scores) == ((0, 1, 0, 100) if correct else (0, 0, 1, 0))
    row = rows("arithmetic")[0]
    value = row["game_instance"]["answer"] + (0 if correct else 1)
    scores = play_scripted("arithmetic", row, [f"ANSWER: {value}"])
    assert outcome(scores) == ((0, 1, 0, 100) if correct else (0, 0, 1, 0))


@pytest.mark.parametrize("game, responses", [
    ("wordle", ["I think it is apple"]),
    ("wordle", ["GUESS: apple", "GUESS: bananas"]),  # not 5 letters
    ("taboo", ["The word is a thing"]),
    ("taboo", ["CLUE: it is a {target}"]),  # says the target
    ("taboo", ["CLUE: it is a {taboo}"]),  # says a taboo word
    ("taboo", ["CLUE: something common", "GUESS: two words"]),
    ("referencegame", ["the top one"]),
    ("referencegame", ["Expression: the grid with 4 X", "Answer: fourth"]),
    ("arithmetic", ["ANSWER: seven"]),
    ("arithmetic", ["The answer is 7"]),
    ("numberguess", ["GUESS: 70", "GUESS: 12.5"]),
])
def test_malformed_responses_and_rule_breaks_abort(game, responses):
    row = rows(game)[-1]
    instance = row["game_instance"]
    fill = {"target": instance.get("target_word", ""), "taboo": (instance.get("taboo_words") or [""])[0]}
    scores = play_scripted(game, row, [r.format(**fill) for r in responses])
    aborted, success, lose, main = outcome(scores)
    assert (aborted, success, lose) == (1, 0, 0) and math.isnan(main)


def test_numberguess_scores_guesses_and_feedback_consistency():
    row = next(r for r in rows("numberguess") if r["game_instance"]["secret"] - r["game_instance"]["lo"] >= 8)
    lo, secret = row["game_instance"]["lo"], row["game_instance"]["secret"]
    # out of range (inconsistent), too low, too high, the same again (inconsistent), then right
    guesses = [lo - 5, lo + 1, secret + 1, secret + 1, secret]
    scores = play_scripted("numberguess", row, [f"GUESS: {g}" for g in guesses])
    assert outcome(scores) == (0, 1, 0, 100)
    assert scores["episode scores"]["Guesses"] == 5 and scores["episode scores"]["Feedback Consistency"] == 3 / 5
    scores = play_scripted("numberguess", row, [f"GUESS: {lo + 1}"] * 5)  # never uses "Higher."
    assert outcome(scores) == (0, 0, 1, 0) and scores["episode scores"]["Feedback Consistency"] == 1 / 5
    scores = play_scripted("numberguess", row, ["GUESS: seventy"])
    assert outcome(scores)[0] == 1 and math.isnan(scores["episode scores"]["Feedback Consistency"])


def test_numberguess_sets_share_no_secret_or_range_and_the_expert_wins_them_all():
    from clemcore.clemgame.master import Outcome

    sets = {split: rows("numberguess", split) for split in ("train", "validation", "instances_ood")}
    secrets = {split: {r["game_instance"]["secret"] for r in found} for split, found in sets.items()}
    starts = {split: {r["game_instance"]["lo"] for r in found} for split, found in sets.items()}
    for a, b in (("train", "validation"), ("train", "instances_ood"), ("validation", "instances_ood")):
        assert not secrets[a] & secrets[b] and not starts[a] & starts[b]
    ood = sets["instances_ood"][0]["game_instance"]
    assert ood["hi"] - ood["lo"] + 1 == 32 and ood["max_guesses"] == 6 and len(sets["instances_ood"]) == 300
    for found in sets.values():
        assert all(games.play_episode("numberguess", r, [games.expert_model()]).state.outcome is Outcome.SUCCESS
                   for r in found)


# ------------------------------------------------------------------ experts through clemcore's runner

@pytest.mark.parametrize("game", GAMES)
def test_experts_win_validation_episodes_through_clemcore(game, tmp_path):
    benchmark = games.load_benchmark(game)
    instances = GameInstances(game, rows(game)[::3])  # 7 episodes over all experiments
    n_players = games.game_spec(game)["players"]
    # a multi-player game gets a stand-in learner (its own name) and expert partners, as in teacher play
    models = [games.expert_model(skill=1.0, seed=1)] if n_players == 1 else [
        CustomResponseModel(ModelSpec(model_name="stand-in-learner"))] + [games.expert_model(skill=1.0, seed=1)] * (
        n_players - 1)
    folder = ResultsFolder(tmp_path, run_dir="experts")
    infos = {"player_0": "experts"}
    sequential.run(benchmark, instances, models, callbacks=GameBenchmarkCallbackList([
        InstanceFileSaver(folder), ExperimentFileSaver(folder, player_model_infos=infos),
        InteractionsFileSaver(folder, player_model_infos=infos)]))
    interaction_files = sorted(tmp_path.rglob("interactions.json"))
    assert len(interaction_files) == len(instances)  # the runner logs and skips episodes that crash
    benchmark.compute_scores(interaction_files)
    for file in interaction_files:
        players = json.loads(file.read_text())["players"]
        assert players["GM"]["model_name"] == "programmatic"
        assert players[f"Player {n_players}"]["model_name"] == "programmatic"  # the expert is never a learner
        if n_players > 1:
            assert players["Player 1"]["model_name"] == "stand-in-learner"
        scores = json.loads((file.parent / "scores.json").read_text())
        aborted, success, lose, main = outcome(scores)
        assert (aborted, success, lose) == (0, 1, 0)
        expected = WORDLE_SCORES[len(scores["round scores"])] if game == "wordle" else 100
        assert main == expected


def test_expert_player_stands_alone():
    row = rows("wordle")[0]
    player = games.expert_player("wordle", "Word Guesser", seed=3)
    reply = player({"role": "user", "content": row["game_instance"]["prompt"]})
    assert reply.startswith("GUESS: ") and len(reply.split()[1]) == 5
    assert player.model.name == "programmatic"
    with pytest.raises(ValueError, match="roles: Describer, Guesser"):
        games.expert_player("taboo", "Referee")


def test_demonstrations_are_diverse_chat_transcripts():
    conversations = games.demonstrations(episodes_per_game=400, seed=1234)
    assert len(conversations) == 400 * (1 + 2 + 2 + 1)  # every role of every episode; experts never abort
    for messages in conversations:
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
        assert sum(len(m["content"]) for m in messages) < 1500
    firsts = [m[0]["content"] for m in conversations]
    for marker in ("Wordle", "Describe the target word", "describes a word to you", "Here are three grids",
                   "word problem"):
        assert any(marker in text for text in firsts), marker
    wordle = [m for m in conversations if "Wordle" in m[0]["content"]]
    assert {len(m) // 2 for m in wordle} >= {1, 2, 3, 4, 5}  # imperfect experts: some long, some lost games
    assert games.demonstrations(5, seed=7) == games.demonstrations(5, seed=7)
    assert games.demonstrations(5, seed=7) != games.demonstrations(5, seed=8)


# ------------------------------------------------------------------ the clem CLI on the tiny model

@pytest.mark.slow
def test_clem_run_and_score_wordle_with_playpen_tiny(tmp_path):
    from playpen.models.tiny import ensure_tiny_model

    ensure_tiny_model()
    (tmp_path / "model_registry.json").write_text(json.dumps([resolve_model("playpen-tiny")]))
    (tmp_path / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(games.BUILTIN_DIR)}]))
    clem = str(Path(sys.executable).with_name("clem"))

    def clem_cli(*args):
        done = subprocess.run([clem, *args], cwd=tmp_path, env=os.environ, capture_output=True, text=True,
                              timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    clem_cli("run", "-g", "wordle", "-m", "playpen-tiny", "-l", "30")
    records = sorted((tmp_path / "results" / "playpen-tiny" / "wordle").glob("*/instance_*/interactions.json"))
    assert len(records) == len(rows("wordle"))
    clem_cli("score", "-g", "wordle")
    for record in records:
        episode = json.loads((record.parent / "scores.json").read_text())["episode scores"]
        assert BENCH_SCORE in episode and episode[METRIC_ABORTED] in (0, 1)
        assert math.isnan(episode[BENCH_SCORE]) == bool(episode[METRIC_ABORTED])
