"""What several test files share: the tiny model as a folder, a (model, tokenizer) pair, a policy and an engine;
a training call into a scratch storage root; and the checks of bad input (one error line, nothing written)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devcluster import devcluster  # noqa: F401  (session fixture: the local SLURM dev cluster)


@pytest.fixture(scope="session")
def tiny() -> Path:
    """The bundled playpen-tiny model's folder (built on first use)."""
    from playpen.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="module")
def tiny_model(tiny):
    """(model, tokenizer) of playpen-tiny, on one thread, as clemcore's huggingface backend runs: on a shared
    2-core machine the tiny model's many small ops are many times slower with two threads competing for cores."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield AutoModelForCausalLM.from_pretrained(tiny).eval(), AutoTokenizer.from_pretrained(tiny)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def policy(tiny_model):
    from playpen.rollout import LocalPolicy

    return LocalPolicy(*tiny_model, name="playpen-tiny")


def engine(policy, **settings):
    """A quiet RolloutEngine with short greedy replies unless `settings` say otherwise."""
    from playpen.rollout import RolloutEngine

    return RolloutEngine(policy, **{"max_new_tokens": 12, "temperature": 0.0, "batch_size": 8, "progress": False,
                                    **settings})


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    """A scratch working folder; the storage root of training runs under it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def train(method: str, storage: Path, *overrides: str, cpu_threads: int | None = 1):
    """`playpen train METHOD` with the method's default config and `overrides`, into `storage`."""
    from playpen.train import train as run

    threads = [f"cpu_threads={cpu_threads}"] if cpu_threads else []
    return run(method, None, [f"storage_root={storage}", *threads, *overrides])


def fails(capsys, argv: list[str], storage: Path | None = None, nothing_at_all: bool = False) -> str:
    """`playpen ARGV` exits 2 with one `playpen: error:` line, which is returned; under `storage` no folder was
    made (with `nothing_at_all`, no file either)."""
    from playpen.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("playpen: error: ") and "\n" not in err, err
    if storage is not None and storage.exists():
        written = [p for p in storage.rglob("*") if nothing_at_all or p.is_dir()]
        assert not written, written
    return err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file (its content hash) and folder under `folder`."""
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def refused(capsys, argv: list[str], *unchanged: Path) -> str:
    """Run the command; it must exit 2 with one error line and leave `unchanged` folders/files as they were."""
    before = [snapshot(p) if p.is_dir() else p.read_bytes() for p in unchanged]
    err = fails(capsys, argv)
    assert [snapshot(p) if p.is_dir() else p.read_bytes() for p in unchanged] == before
    return err


def run_ok(cwd: Path, *argv: str, timeout: int = 600) -> str:
    """A command (clem, playpen, ...) that must succeed; its stdout. The failure message shows both streams."""
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def playpen_ok(cwd: Path, *argv: str) -> str:
    """`playpen ARGS` in a fresh process (as a user runs it) that must succeed; its stdout."""
    return run_ok(cwd, sys.executable, "-m", "playpen.cli", *argv)


@pytest.fixture(scope="session")
def numberguess_player(tmp_path_factory) -> Path:
    """playpen-tiny taught numberguess's format by 60 full-weight SFT steps on the expert's transcripts: it plays
    (100 % well-formed) and sometimes wins when sampled, which expert iteration and distillation tests need. The
    model folder (with its tokenizer)."""
    import json

    from playpen.games import demonstrations

    folder = tmp_path_factory.mktemp("numberguess-player")
    data = folder / "expert.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n"
                            for m in demonstrations(300, 0, games=("numberguess",))))
    run = train("sft", folder / "runs", "experiment=numberguess", f"data={data}", "lora=null",
                "trainer.max_steps=60", "trainer.learning_rate=2e-3", "trainer.per_device_train_batch_size=8",
                "trainer.save_steps=60")
    return run.path / "final"


def numberguess_messages(record: Path) -> list[dict]:
    """The guesser's view of one recorded numberguess episode (interactions.json): the game master's messages as
    user turns, the player's replies as assistant turns."""
    import json

    messages = []
    for events in json.loads((record / "interactions.json").read_text())["turns"]:
        for e in events:
            if e["from"] == "GM" and e["to"] != "GM":
                messages.append({"role": "user", "content": e["action"]["content"]})
            elif e["to"] == "GM" and e["from"] != "GM":
                messages.append({"role": "assistant", "content": e["action"]["content"]})
    return messages


def play_scripted(game: str, experiment: dict, instance: dict, responses: list[str], models=None):
    """Feeds scripted replies through a game master (every seat a stand-in model unless `models`) in schedule
    order, recorded as clemcore's runner does; returns the master, (role, context) of each reply, and the episode
    scores `clem score` would write."""
    import json

    from clemcore.backends import CustomResponseModel
    from clemcore.clemgame import GameInteractionsRecorder

    from playpen import games

    benchmark = games.load_benchmark(game)
    master = benchmark.create_game_master(experiment, models or [CustomResponseModel()])
    master.setup(**instance)
    recorder = GameInteractionsRecorder(game, experiment["name"], instance["game_id"], "test", {})
    for player in master.get_players():
        recorder.log_player(player.name, player.game_role, player.model.name)
    master.register(recorder)
    master.before_game()
    seen, done = [], False
    for response in responses:
        assert not done, "the game ended before all scripted replies were used"
        player = master.current_player
        seen.append((player.game_role, master.get_context_for(player)["content"]))
        done, _ = master.step(response)
    assert done, "the game did not end after the scripted replies"
    scorer = benchmark.create_game_scorer(experiment, instance)
    scorer.compute_scores(json.loads(json.dumps(recorder.interactions)))
    return master, seen, scorer.scores["episode scores"]
