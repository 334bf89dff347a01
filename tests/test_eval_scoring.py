"""clemscore/statscore math against clemcore's own `clem eval` (clemeval.perform_evaluation) — on public
clembench v2.0 records (tests/data/clembench-runs-sample) and on synthetic score files. Fast."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from playpen.eval.scoring import (GameSummary, aggregate_score, load_episode_scores, summarize, val_scores)
from tests.helpers import CLEMBENCH_SAMPLE as FIXTURES

LLAMA = "Llama-3.3-70B-Instruct-t0.0--Llama-3.3-70B-Instruct-t0.0"
QWEN = "Qwen2.5-72B-Instruct-t0.0--Qwen2.5-72B-Instruct-t0.0"


def clem_eval(results_dir: Path) -> pd.DataFrame:
    """clemcore's results table for a folder (what `clem eval -r DIR` writes to results.csv)."""
    from clemcore import clemeval

    os.environ.setdefault("TQDM_DISABLE", "1")
    with contextlib.redirect_stdout(io.StringIO()):
        clemeval.perform_evaluation(str(results_dir))
    return pd.read_csv(results_dir / "results.csv", index_col=0)


def taboo_scores(interactions: dict) -> dict:
    """Taboo's episode scores recomputed from a v2.0 record (the sample has no scores.json for taboo): success
    at turn k scores 100/k."""
    turns = interactions["turns"]
    success = any(a["action"]["type"] == "correct guess" for a in turns[-1])
    return {"Aborted": 0, "Lose": int(not success), "Success": int(success),
            "Main Score": 100 / len(turns) if success else 0}


@pytest.fixture
def sample(tmp_path) -> Path:
    root = tmp_path / "sample"
    shutil.copytree(FIXTURES, root)
    for interactions in root.glob("*/taboo/*/*/interactions.json"):
        scores = {"turn scores": {}, "episode scores": taboo_scores(json.loads(interactions.read_text()))}
        (interactions.parent / "scores.json").write_text(json.dumps(scores))
    return root


def test_reads_clembench_v2_records_with_bare_nan(sample):
    episodes = {(e.model, e.game, e.experiment, e.episode): e for e in load_episode_scores(sample)}
    assert len(episodes) == 4
    aborted = episodes[(LLAMA, "wordle", "0_high_frequency_words_no_clue_no_critic", "episode_3")]
    assert aborted.played == 0 and math.isnan(aborted.quality)  # "Main Score": NaN in the file
    lost = episodes[(LLAMA, "wordle", "1_medium_frequency_words_no_clue_no_critic", "episode_0")]
    assert lost.played == 1 and lost.quality == 0
    assert episodes[(LLAMA, "taboo", "0_high_en", "episode_14")].quality == pytest.approx(100 / 3)
    assert episodes[(QWEN, "taboo", "1_medium_en", "episode_11")].quality == 100


def test_clemscore_matches_clem_eval_on_clembench_records(sample):
    table = clem_eval(sample)
    for model in (LLAMA, QWEN):
        games = summarize(load_episode_scores(sample, model=model))
        ours = aggregate_score(games.values())
        assert ours["score"] == pytest.approx(table.loc[model, "-, clemscore"], abs=1e-9)
        assert ours["played"] == pytest.approx(table.loc[model, "all, Average % Played"], abs=1e-9)
        assert ours["quality"] == pytest.approx(table.loc[model, "all, Average Quality Score"], abs=1e-9)
        for game, s in games.items():
            assert s.played == pytest.approx(table.loc[model, f"{game}, % Played"], abs=1e-9)
            assert s.quality == pytest.approx(table.loc[model, f"{game}, Quality Score"], abs=1e-9)
    # by hand: Llama wordle 50 % played (one abort), quality 0; taboo 100 % played, quality 33.33
    llama = aggregate_score(summarize(load_episode_scores(sample, model=LLAMA)).values())
    assert llama["played"] == 75.0 and llama["quality"] == pytest.approx(16.66, abs=0.01)
    assert llama["score"] == pytest.approx(0.75 * llama["quality"], abs=0.01)


def _write_episode(root: Path, model: str, game: str, i: int, aborted: int, main: float) -> None:
    folder = root / model / game / "0_exp" / f"instance_{i:05d}"
    folder.mkdir(parents=True)
    scores = {"Aborted": aborted, "Lose": 0, "Success": int(main == 100 and not aborted), "Main Score": main}
    (folder / "scores.json").write_text(json.dumps({"turn scores": {}, "episode scores": scores}))


def test_all_aborted_game_is_skipped_in_quality_like_clemcore(tmp_path):
    """Game A: 100 % played, quality 50. Game B: everything aborted (quality NaN). clemcore averages quality over
    the games where it exists: avg played 50, avg quality 50 → clemscore 25."""
    _write_episode(tmp_path, "m", "a", 0, 0, 100.0)
    _write_episode(tmp_path, "m", "a", 1, 0, 0.0)
    _write_episode(tmp_path, "m", "b", 0, 1, float("nan"))
    _write_episode(tmp_path, "m", "b", 1, 1, float("nan"))
    games = summarize(load_episode_scores(tmp_path))
    assert games["b"].quality is None and games["b"].clemscore == 0.0
    ours = aggregate_score(games.values())
    assert ours == {"score": 25.0, "played": 50.0, "quality": 50.0, "games": ["a", "b"]}
    assert ours["score"] == clem_eval(tmp_path).loc["m", "-, clemscore"]


def test_nothing_played_scores_zero_where_clemcore_writes_nan(tmp_path):
    _write_episode(tmp_path, "m", "a", 0, 1, float("nan"))
    assert aggregate_score(summarize(load_episode_scores(tmp_path)).values())["score"] == 0.0
    assert math.isnan(clem_eval(tmp_path).loc["m", "-, clemscore"])


def test_rounding_follows_clemcore(tmp_path):
    """Thirds everywhere: per-game means are rounded to 2 decimals before averaging, as in clemeval."""
    for i, (aborted, main) in enumerate([(0, 100.0), (0, 0.0), (1, float("nan"))]):
        _write_episode(tmp_path, "m", "a", i, aborted, main)
    for i, main in enumerate([100.0, 100.0, 0.0]):
        _write_episode(tmp_path, "m", "b", i, 0, main)
    ours = aggregate_score(summarize(load_episode_scores(tmp_path)).values())
    table = clem_eval(tmp_path)
    assert ours["score"] == table.loc["m", "-, clemscore"]
    assert ours["played"] == table.loc["m", "all, Average % Played"]


def test_val_scores_split_dialogue_and_static_games():
    summaries = {"wordle": GameSummary("wordle", 4, 100.0, 40.0, 25.0, 75.0, 0.0),
                 "taboo": GameSummary("taboo", 4, 50.0, 20.0, 25.0, 25.0, 50.0),
                 "arithmetic": GameSummary("arithmetic", 4, 100.0, 75.0, 75.0, 25.0, 0.0)}
    val = val_scores(summaries, static_games=["arithmetic"])
    assert val["clemscore"] == pytest.approx(0.75 * 30.0)  # mean played 75 %, mean quality 30
    assert val["statscore"] == 75.0
    assert sorted(val["clem"]["games"]) == ["taboo", "wordle"] and val["static"]["games"] == ["arithmetic"]
    assert val["games"]["arithmetic"]["static"] and val["games"]["taboo"]["clemscore"] == 10.0
    assert val_scores({"wordle": summaries["wordle"]}, [])["statscore"] is None


def test_a_games_own_episode_scores_are_averaged_where_logged():
    """numberguess logs Guesses and Feedback Consistency beside clemcore's keys: each is its mean over the
    episodes that logged a number (NaN for an aborted one is skipped, as clemcore's quality mean skips it)."""
    from playpen.eval.scoring import EpisodeScores

    common = {"Aborted": 0, "Lose": 0, "Success": 1, "Main Score": 100, "Request Count": 3}
    episodes = [EpisodeScores("m", "numberguess", "width16", f"instance_{i}", {**common, **own})
                for i, own in enumerate([{"Guesses": 3, "Feedback Consistency": 1.0},
                                         {"Guesses": 5, "Feedback Consistency": 0.6},
                                         {"Guesses": math.nan, "Feedback Consistency": math.nan, "Aborted": 1}])]
    (summary,) = summarize(episodes).values()
    assert summary.own == {"Feedback Consistency": 0.8, "Guesses": 4.0}
    assert summary.to_dict()["own"] == summary.own


def planted_records(results: Path, hostile: str) -> Path:
    """One arithmetic episode of `mock` in clemcore's layout, with `hostile` (a FIFO at instance.json or
    experiment.json, or an interactions.json above the records' size bound) planted in it."""
    from playpen.reading import RECORD_MAX_BYTES

    episode = results / "mock" / "arithmetic" / "0_easy" / "instance_00000"
    episode.mkdir(parents=True)
    files = {"interactions.json": episode / "interactions.json", "instance.json": episode / "instance.json",
             "experiment.json": episode.parent / "experiment.json"}
    for name, path in files.items():
        if name == hostile == "interactions.json":
            with path.open("wb") as f:  # sparse: no disk taken
                f.truncate(RECORD_MAX_BYTES + 1)
        elif name == hostile:
            os.mkfifo(path)
        else:
            path.write_text(json.dumps({"name": "0_easy", "game_id": 0, "players": {}, "turns": []}))
    return files[hostile]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("hostile", ["instance.json", "experiment.json", "interactions.json"])
def test_rescoring_checks_every_file_clemcores_scorer_opens(tmp_path, capsys, hostile):
    """A FIFO planted where clemcore's scorer opens an episode's file would hang its plain open(); a huge (sparse)
    record would take the machine's memory: one line naming the file, and nothing scored or written."""
    from tests.helpers import fails

    results = tmp_path / "res"
    planted = planted_records(results, hostile)
    err = fails(capsys, ["eval", "mock", "--skip-gameplay", "-r", str(results)])
    assert f"episode record {planted}" in err and "move that episode folder" in err, err
    assert not list(results.rglob("scores.json")) and not (results / "mock.val.json").exists()


def test_when_no_episode_finished_the_line_names_the_first_episodes_error(tmp_path, capsys):
    """The cause (a prompt beyond the context window, ...) is in the one line, not only in clembench.log."""
    from tests.helpers import fails

    results = tmp_path / "res"
    episode = planted_records(results, "experiment.json").parent / "instance_00000"
    (episode.parent / "experiment.json").unlink()
    (episode.parent / "experiment.json").write_text(json.dumps({"name": "0_easy"}))
    (episode / "error.json").write_text(json.dumps({"message": "context window of 512 tokens exceeded\n(5000000 "
                                                               "tokens before the reply)"}))
    err = fails(capsys, ["eval", "mock", "--skip-gameplay", "-r", str(results)])
    assert err == ("playpen: error: no episode of arithmetic finished (first error: context window of 512 tokens "
                   f"exceeded (5000000 tokens before the reply)); see {results / 'clembench.log'}"), err
