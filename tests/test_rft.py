"""`playpen train rft`: a round keeps exactly the successful episodes (at most M per instance, each once), trains
only the learner's own tokens, and a round resumed after a kill trains the same rows to the same weights."""
from __future__ import annotations

import json
import random
import shutil
from types import SimpleNamespace

import pytest
import torch

from playpen.storage import read_jsonl
from tests.helpers import numberguess_messages, train

ARGS = ("experiment=rft", "game=numberguess", "rounds=1", "instances=16", "group_size=4", "max_per_instance=2",
        "max_new_tokens=10", "temperature=1.0", "lora=null", "trainer.max_steps=4", "trainer.save_steps=2",
        "trainer.save_total_limit=null", "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")


@pytest.fixture(scope="module")
def rft(tmp_path_factory, numberguess_player):
    storage = tmp_path_factory.mktemp("rft") / "runs"
    return storage, train("rft", storage, f"model={numberguess_player}", *ARGS)


def kept_rows(run) -> list[dict]:
    return [json.loads(line) for line in (run.path / "kept" / "iter_00.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_round_keeps_exactly_the_successful_episodes_and_trains_their_learner_tokens(rft, tiny):
    from transformers import AutoTokenizer

    _, run = rft
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    records = {(p.parent.name, p.name): p for p in run.records.glob("*/iter_00000/numberguess/*/instance_*")}
    assert len(records) == 64  # 16 instances x 4 episodes
    won = {key for key, p in records.items() if json.loads((p / "scores.json").read_text())
           ["episode scores"]["Success"] == 1}
    assert 0 < len(won) < 64  # the round has something to choose from
    rows = kept_rows(run)
    kept = [(r["meta"]["experiment"], r["meta"]["episode"]) for r in rows]
    assert len(kept) == len(set(kept)) and set(kept) <= won
    by_instance: dict[str, list] = {}
    for experiment, episode in won:
        by_instance.setdefault(episode.split("_g")[0], []).append(
            [m["content"] for m in numberguess_messages(records[experiment, episode]) if m["role"] == "assistant"])
    distinct = sum(min(2, len({tuple(replies) for replies in wins})) for wins in by_instance.values())
    assert len(rows) == distinct  # every instance's distinct wins, at most max_per_instance
    for row, key in zip(rows, kept):
        replies = [m["content"] for m in numberguess_messages(records[key]) if m["role"] == "assistant"]
        labelled = [t if label != -100 else None for t, label in zip(row["input_ids"], row["labels"])]
        runs, current = [], []
        for t in labelled + [None]:
            if t is None and current:
                runs.append(tokenizer.decode(current))
                current = []
            elif t is not None:
                current.append(t)
        # trained: each reply the learner sampled and its end-of-turn token, nothing of the game master's
        assert [r.removesuffix(tokenizer.eos_token).strip() for r in runs] == replies
        assert all(r.endswith(tokenizer.eos_token) for r in runs)
    round_row = next(r for r in read_jsonl(run.metrics) if "round" in r)
    assert round_row["kept"] == len(rows) and round_row["pass_rate"] == len(won) / 64


@pytest.mark.slow
def test_a_round_resumed_after_a_kill_trains_the_same_rows_to_the_same_weights(rft, numberguess_player):
    from safetensors.torch import load_file

    storage, run = rft
    rows_before = (run.path / "kept" / "iter_00.jsonl").read_bytes()
    weights = load_file(run.path / "final" / "model.safetensors")
    records = sorted(p.stat().st_mtime_ns for p in run.records.rglob("scores.json"))
    losses = [r["loss"] for r in read_jsonl(run.metrics) if "loss" in r]
    # killed while saving step 4: the round restarts from checkpoint-2 with the rows it had played
    round_dir = run.checkpoints / "iter_00"
    for done in (round_dir / "round_done.json", round_dir / "final", round_dir / "checkpoint-4", run.path / "final",
                 run.path / "finished.json"):
        shutil.rmtree(done) if done.is_dir() else done.unlink(missing_ok=True)
    again = train("rft", storage, f"model={numberguess_player}", *ARGS)
    assert again.path == run.path
    assert (run.path / "kept" / "iter_00.jsonl").read_bytes() == rows_before
    assert sorted(p.stat().st_mtime_ns for p in run.records.rglob("scores.json")) == records  # nothing replayed
    resumed = load_file(run.path / "final" / "model.safetensors")
    assert all(torch.allclose(weights[k], resumed[k], atol=1e-6) for k in weights)
    assert [r["loss"] for r in read_jsonl(run.metrics) if "loss" in r][-2:] == losses[-2:]


def episode(instance: int, success: bool, tokens: list[int]):
    return SimpleNamespace(experiment="e", game_id=instance, aborted=False, success=success,
                           reward=1.0 if success else 0.0, traces=[SimpleNamespace(completion_ids=tokens)])


def test_shuffled_rewards_keep_as_many_episodes_per_instance_chosen_at_random():
    from playpen.train.rft import Config, keep_episodes

    episodes = [episode(i, won, [i, j]) for i in range(50) for j, won in enumerate([j < i % 3 for j in range(4)])]
    episodes.append(episode(0, True, [9, 9]))
    episodes.append(episode(0, True, [9, 9]))  # the same token sequence twice: kept once
    by_reward, passed = keep_episodes(episodes, Config(experiment="x", max_per_instance=2), random.Random(0))
    assert passed == sum(e.success for e in episodes)
    assert all(e.success for e in by_reward) and len(by_reward) == sum(min(2, i % 3) for i in range(50)) + 1
    shuffled, _ = keep_episodes(episodes, Config(experiment="x", max_per_instance=2, shuffle_rewards=True),
                                random.Random(0))
    count = lambda kept, i: sum(e.game_id == i for e in kept)  # noqa: E731
    assert all(count(shuffled, i) == count(by_reward, i) for i in range(50))
    assert 0 < sum(not e.success for e in shuffled) < len(shuffled)  # chosen regardless of the outcome
