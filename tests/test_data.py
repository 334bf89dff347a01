"""playpen.dataset_from_records (`playpen data`) and playpen.training_data (the training data a method reads).

`playpen data`: interactions.json trees (clemcore 3.x results, playpen-records, published clembench v2.0 runs)
to conversational jsonl rows, per model player, with filters; corrupt files are reported and skipped, and a
dataset is never replaced by an empty one. Training data files: rows as written, pairs that differ."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clemcore.backends import ModelSpec
from clemcore.clemgame import (ExperimentFileSaver, GameBenchmarkCallbackList, InstanceFileSaver,
                               InteractionsFileSaver, ResultsFolder)
from clemcore.clemgame.runners import sequential

from playpen import games
from playpen.cli import main as cli
from playpen.dataset_from_records import convert, episode_rows
from tests.helpers import CLEMBENCH_SAMPLE, refused

LLAMA = "Llama-3.3-70B-Instruct-t0.0--Llama-3.3-70B-Instruct-t0.0"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_alternating(messages: list[dict]):
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
    assert all(isinstance(m["content"], str) and m["content"] for m in messages)


@pytest.fixture(scope="module")
def clem_results(tmp_path_factory) -> Path:
    """Real clemcore 3.7 results, written the way `clem run` + `clem score` write them, by the built-in games'
    experts under a model name (so they count as model players)."""
    root = tmp_path_factory.mktemp("results")
    for game in ("taboo", "wordle"):
        model = games.expert_model(skill=0.7, seed=3)
        model.model_spec = ModelSpec(model_name="expert-llm")
        folder = ResultsFolder(root, run_dir="expert-llm")
        callbacks = GameBenchmarkCallbackList([InstanceFileSaver(folder), ExperimentFileSaver(folder),
                                               InteractionsFileSaver(folder)])
        instances = games.load_instances(game, "validation").filter(lambda row: row["game_instance"]["game_id"] < 4)
        benchmark = games.load_benchmark(game)
        sequential.run(benchmark, instances, [model], callbacks=callbacks)
        benchmark.compute_scores(sorted((root / "expert-llm" / game).rglob("interactions.json")))
    return root


def test_clembench_v2_runs_outcomes_and_both_perspectives(tmp_path):
    stats = convert(CLEMBENCH_SAMPLE, tmp_path / "d.jsonl")
    rows = read(tmp_path / "d.jsonl")
    assert stats.files == 4 and stats.episodes == 4 and not stats.skipped and stats.rows == len(rows) == 6
    by_key = {(r["meta"]["game"], r["meta"]["task_id"], r["meta"]["player_name"]): r for r in rows}
    describer, guesser = by_key[("taboo", 14, "Player 1")], by_key[("taboo", 14, "Player 2")]
    assert describer["meta"] == {**describer["meta"], "experiment": "high_en", "game_role": "WordDescriber",
                                 "model": "Llama-3.3-70B-Instruct", "outcome": "success"}
    assert guesser["meta"]["game_role"] == "WordGuesser" and guesser["meta"]["outcome"] == "success"
    assert len(describer["messages"]) == len(guesser["messages"]) == 6  # success at turn 3: three exchanges each
    assert describer["messages"][1]["content"].startswith("CLUE:")
    assert guesser["messages"][-1]["content"] == "GUESS: Council"
    assert by_key[("wordle", 3, "Player 1")]["meta"]["outcome"] == "aborted"
    lost = by_key[("wordle", 0, "Player 1")]
    assert lost["meta"]["outcome"] == "lose" and lost["meta"]["main_score"] == 0.0
    assert lost["meta"]["experiment"] == "medium_frequency_words_no_clue_no_critic"
    assert ("wordle", 3, "Player 2") not in by_key  # the programmatic evaluator is no learner
    for row in rows:
        assert_alternating(row["messages"])


def test_filters_on_game_outcome_and_model(tmp_path):
    out = tmp_path / "d.jsonl"
    assert convert(CLEMBENCH_SAMPLE, out, outcome="success").rows == 4
    assert {r["meta"]["game"] for r in read(out)} == {"taboo"}
    assert convert(CLEMBENCH_SAMPLE, out, game="wordle").rows == 2
    stats = convert(CLEMBENCH_SAMPLE, out, model="Qwen2.5-72B-Instruct")
    assert stats.rows == 2 and stats.filtered == 4
    assert {r["meta"]["task_id"] for r in read(out)} == {11}
    assert convert(CLEMBENCH_SAMPLE, out, game="wordle", outcome="failure").rows == 1  # alias of "lose"


def test_clemcore_results_layout_with_meta_and_scores(clem_results, tmp_path):
    stats = convert(clem_results, tmp_path / "d.jsonl")
    rows = read(tmp_path / "d.jsonl")
    assert not stats.skipped and stats.episodes == 8
    taboo = [r for r in rows if r["meta"]["game"] == "taboo"]
    assert {r["meta"]["player_name"] for r in taboo} == {"Player 1", "Player 2"}
    assert {r["meta"]["game_role"] for r in taboo} == {"Describer", "Guesser"}
    for row in rows:
        assert_alternating(row["messages"])
        meta = row["meta"]
        assert meta["model"] == "expert-llm" and meta["outcome"] in ("success", "lose")
        scores = json.loads((Path(meta["source"]).parent / "scores.json").read_text())["episode scores"]
        assert meta["outcome"] == ("success" if scores["Success"] else "lose")
        assert meta["task_id"] == json.loads((Path(meta["source"]).parent / "instance.json").read_text())["game_id"]


def test_playpen_records_convert(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from playpen.models.tiny import ensure_tiny_model
    from playpen.games.instances import load_instances
    from playpen.rollout import LocalPolicy, RolloutEngine

    path = ensure_tiny_model()
    policy = LocalPolicy(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                         name="playpen-tiny")
    episodes = RolloutEngine(policy, max_new_tokens=8, temperature=0.0, progress=False).play(
        "taboo", load_instances("taboo", "validation", limit=2), records_dir=tmp_path / "rec", records_tag="step_1")
    convert(tmp_path / "rec", tmp_path / "d.jsonl", model="playpen-tiny")
    rows = read(tmp_path / "d.jsonl")
    replied = sum(1 for e in episodes for t in e.traces if t.learner_turns)
    assert len(rows) == replied
    by_id = {(e.experiment, e.game_id): e for e in episodes}
    for row in rows:
        episode = by_id[(row["meta"]["experiment"], row["meta"]["task_id"])]
        assert row["meta"]["outcome"] == ("aborted" if episode.aborted else "success" if episode.success else "lose")
        trace = next(t for t in episode.traces if t.player == row["meta"]["player_name"])
        assert row["meta"]["game_role"] == trace.role
        assert [m["content"] for m in row["messages"]] == [m["content"].strip() for m in trace.messages]


def test_corrupt_and_partial_files_are_reported_and_skipped(tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(CLEMBENCH_SAMPLE / LLAMA, root / LLAMA)
    bad = root / "m" / "taboo" / "0_x"
    for name, text in {"episode_0": '{"players": {"Player 1": "A, m"}, "turns": [[{"from"',
                       "episode_1": "", "episode_2": '{"results": 1}',
                       "episode_3": json.dumps({"meta": {"completed": None}, "players": {}, "turns": []})}.items():
        (bad / name).mkdir(parents=True)
        (bad / name / "interactions.json").write_text(text)
    stats = convert(root, tmp_path / "d.jsonl")
    assert stats.episodes == 3 and stats.rows == 4 and len(stats.skipped) == 4
    reasons = dict((Path(p).parent.name, r) for p, r in stats.skipped)
    assert "not valid JSON" in reasons["episode_0"] and "not valid JSON" in reasons["episode_1"]
    assert "not an interactions record" in reasons["episode_2"] and "partial record" in reasons["episode_3"]
    with pytest.raises(ValueError, match="truncated or corrupt"):
        episode_rows(bad / "episode_0" / "interactions.json")


def test_cli(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert cli(["data", str(CLEMBENCH_SAMPLE), "-o", str(out), "--outcome", "success", "--game", "taboo"]) == 0
    assert len(read(out)) == 4 and "4 rows from 4 episodes" in capsys.readouterr().out
    assert cli(["data", str(tmp_path / "missing"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("playpen: error:") and err.count("\n") == 1
    assert cli(["data", str(CLEMBENCH_SAMPLE), "-o", str(out), "--outcome", "great"]) == 2
    assert "unknown outcome 'great'" in capsys.readouterr().err


def test_expert_rows_from_a_game_with_nothing_prepared(tmp_path, capsys):
    """`playpen data --expert GAME`: the game's expert plays every role of its train instances, and the rows are
    the ones `playpen data` writes (each alternating, ending with the player), deterministic in the seed."""
    out = tmp_path / "taboo.jsonl"
    assert cli(["data", "--expert", "taboo", "--count", "3", "--seed", "1", "-o", str(out)]) == 0
    assert "6 rows from 3 expert episodes of taboo (train split, seed 1); outcomes: success 6" \
        in capsys.readouterr().out
    rows = read(out)
    assert {r["meta"]["game_role"] for r in rows} == {"Describer", "Guesser"}
    assert {r["meta"]["model"] for r in rows} == {"programmatic"} and rows[0]["meta"]["game"] == "taboo"
    for row in rows:
        assert_alternating(row["messages"])
    again = tmp_path / "again.jsonl"
    assert cli(["data", "--expert", "taboo", "--count", "3", "--seed", "1", "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    # by default each train instance once
    assert cli(["data", "--expert", "wordle", "-o", str(out)]) == 0
    assert len(read(out)) == len(list(games.load_instances("wordle", "train")))


@pytest.mark.parametrize("argv, message", [
    (["--expert", "wordel"], "no expert for game 'wordel'; did you mean wordle?"),
    (["--expert", "wordle", "--split", "hard"], "game 'wordle' has no instance set 'hard'"),
    (["--expert", "wordle", "--count", "0"], "--count must be at least 1"),
    (["results", "--expert", "wordle"], "--expert plays the game itself; drop RESULTS_DIR"),
    ([], "give a results folder (playpen data RESULTS_DIR -o FILE) or a game's expert"),
])
def test_expert_refusals_are_one_line_before_writing(capsys, tmp_path, argv, message):
    out = tmp_path / "rows.jsonl"
    out.write_text("kept\n")
    assert message in refused(capsys, ["data", *argv, "-o", str(out)], out)
    assert out.read_text() == "kept\n"


def test_rows_holding_line_separators_train_as_written(tmp_path):
    """`playpen data` writes text as it is (ensure_ascii=False): U+2028 and U+0085 inside a reply stay raw, and
    the training data reader splits rows at newlines only (str.splitlines would cut such a row in two)."""
    from playpen.training_data import check_messages, read_jsonl_rows

    root = tmp_path / "runs"
    shutil.copytree(CLEMBENCH_SAMPLE / LLAMA, root / LLAMA)
    first = sorted(root.rglob("interactions.json"))[0]
    interactions = json.loads(first.read_text())
    for events in interactions["turns"]:
        for event in events:
            if isinstance(event.get("action", {}).get("content"), str):
                event["action"]["content"] += " a\u2028b\u0085c"
    first.write_text(json.dumps(interactions, ensure_ascii=False))
    out = tmp_path / "d.jsonl"
    stats = convert(root, out)
    assert "\u2028" in out.read_text()
    rows = read_jsonl_rows(str(out), "test", "data", lambda row: check_messages(row["messages"]))
    assert len(rows) == stats.rows


def test_a_fifo_among_the_records_is_skipped_not_waited_for(tmp_path):
    import os

    root = tmp_path / "runs"
    shutil.copytree(CLEMBENCH_SAMPLE / LLAMA, root / LLAMA)
    fifo = root / "m" / "taboo" / "0_x" / "episode_0" / "interactions.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    stats = convert(root, tmp_path / "d.jsonl")  # (not a regular file: no episode, never opened)
    assert stats.episodes == 3 and not stats.skipped


def test_hidden_folders_and_files_that_are_not_regular_are_no_episodes(tmp_path):
    """A game being played (or one a killed process left) sits in a hidden .playing.* folder; a FIFO named
    interactions.json would hang whoever reads it (clemcore's scorer included)."""
    import os

    from playpen.records import interactions_files

    root = tmp_path / "res"
    shutil.copytree(CLEMBENCH_SAMPLE / LLAMA, root / LLAMA)
    found = interactions_files(root)
    shutil.copytree(CLEMBENCH_SAMPLE / LLAMA, root / ".playing.x" / LLAMA)
    os.mkfifo(root / LLAMA / "taboo" / "0_high_en" / "fifo.json")
    (root / "m" / "g" / "e" / "episode_9").mkdir(parents=True)
    os.mkfifo(root / "m" / "g" / "e" / "episode_9" / "interactions.json")
    assert interactions_files(root) == found and found


# ---------------------------------------------------------------- a dataset is never replaced by an empty one

def test_data_never_replaces_a_dataset_with_an_empty_one(capsys, tmp_path):
    out = tmp_path / "out.jsonl"
    assert cli(["data", str(CLEMBENCH_SAMPLE), "-o", str(out), "--game", "wordle", "--outcome", "lose"]) == 0
    assert len(out.read_text().splitlines()) == 1
    corrupt = tmp_path / "corrupt" / "m" / "wordle" / "0_x"
    for name in ("episode_0", "episode_1"):
        (corrupt / name).mkdir(parents=True)
        (corrupt / name / "interactions.json").write_text('{"players": {"Player 1": "A, m"}, "turns": [[')
    cases = [  # (arguments after the folder, what the one line says)
        (["--game", "wordel"], "unknown game 'wordel'; did you mean wordle? games in these records: taboo, wordle"),
        (["--outcome", "sucess"], "unknown outcome 'sucess'; did you mean success?"),
        (["--model", "Llama-3.3-70B"], "unknown model 'Llama-3.3-70B'; did you mean Llama-3.3-70B-Instruct?"),
        (["--game", "referencegame"],  # registered, but not in these records
         f"no rows from 4 episodes under {CLEMBENCH_SAMPLE}: --game referencegame left none of 6 player rows; "
         f"{out} not written"),
        (["--game", "taboo", "--outcome", "lose"], "--game taboo, --outcome lose left none of 6 player rows"),
    ]
    for extra, message in cases:
        err = refused(capsys, ["data", str(CLEMBENCH_SAMPLE), "-o", str(out), *extra], out)
        assert message in err, err
    err = refused(capsys, ["data", str(tmp_path / "corrupt"), "-o", str(out)], out)
    assert f"all 2 interactions files under {tmp_path / 'corrupt'} were skipped (e.g. " in err
    assert f"{out} not written" in err
    err = refused(capsys, ["data", str(CLEMBENCH_SAMPLE), "-o", str(tmp_path)], tmp_path)
    assert f"output {tmp_path} is a folder; give a file, e.g. -o {tmp_path / 'dataset.jsonl'}" in err
    assert len(out.read_text().splitlines()) == 1


# ---------------------------------------------------------------- training data files (playpen.training_data)

@pytest.mark.parametrize("method", ["dpo", "reward"])
def test_identical_chosen_and_rejected_are_refused(capsys, clean_cwd, method):
    turn = [{"role": "user", "content": "2 + 2?"}]
    same = [{"role": "assistant", "content": "4"}]
    rows = [{"prompt": turn, "chosen": same, "rejected": [{"role": "assistant", "content": "5"}]},
            {"prompt": turn, "chosen": same, "rejected": same}]
    (clean_cwd / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = refused(capsys, ["train", method, "experiment=x", "data=pairs.jsonl", "storage_root=runs"], clean_cwd)
    assert "pairs.jsonl:2" in err and "'chosen' and 'rejected' are the same" in err, err
