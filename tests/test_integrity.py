"""Data integrity: a rerun never trains past a finished run nor mixes two configs in one run, two
processes never write one run or results folder at once, `playpen data` never replaces a dataset with an empty
one, a training or an eval whose partner fails stops in one line, and a folder holding no model is not evaluated.

Every bad input is checked the same way: the exit code, one `playpen: error: ...` line on stderr, and the files
already on disk byte-for-byte as they were. Training runs are playpen-tiny for 2 steps (seconds each)."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from playpen.storage import exclusive_folder
from tests.paths import CLEMBENCH_SAMPLE
from tests.conftest import refused, snapshot

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A clean working folder (no key.json, model_registry.json or runs of other tests)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLAYPEN_STORAGE", raising=False)
    return tmp_path


# ---------------------------------------------------------------- reruns of a training run

@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("inputs")
    turn = [{"role": "user", "content": "Guess a five-letter word. Reply only with: GUESS: <word>"}]
    with (folder / "sft.jsonl").open("w") as f:
        for word in ["apple", "crane", "slate", "house"] * 4:
            f.write(json.dumps({"messages": turn + [{"role": "assistant", "content": f"GUESS: {word}"}]}) + "\n")
    with (folder / "prefs.jsonl").open("w") as f:
        for word in ["apple", "crane", "slate", "house"] * 2:
            f.write(json.dumps({"prompt": turn, "chosen": [{"role": "assistant", "content": f"GUESS: {word}"}],
                                "rejected": [{"role": "assistant", "content": "maybe"}]}) + "\n")
    (folder / "other.jsonl").write_text((folder / "sft.jsonl").read_text())
    return {"sft": str(folder / "sft.jsonl"), "prefs": str(folder / "prefs.jsonl"),
            "other": str(folder / "other.jsonl")}


RUNS = {  # name: (method, its inputs); every run is playpen-tiny for 2 steps (DPO from rollouts: 2 rounds)
    "sft": ("sft", ["data={sft}", "trainer.per_device_train_batch_size=4", "trainer.max_steps=2"]),
    "dpo": ("dpo", ["data={prefs}", "trainer.per_device_train_batch_size=4", "trainer.max_steps=2"]),
    "dpo-rollouts": ("dpo", ["game=wordle", "instances=2", "group_size=3", "iterations=2", "max_new_tokens=8",
                             "temperature=1.5", "trainer.per_device_train_batch_size=2", "trainer.max_steps=1"]),
    "grpo": ("grpo", ["game=arithmetic", "instances=2", "group_size=2", "max_new_tokens=8",
                      "trainer.per_device_train_batch_size=2", "trainer.max_steps=2"]),
}


def run_argv(name: str, root: Path, inputs: dict) -> list[str]:
    method, args = RUNS[name]
    return ["train", method, f"storage_root={root}", f"experiment={name}", "run_id=try2", "cpu_threads=1",
            *(a.format(**inputs) for a in args)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, inputs):
    """trained(name) -> storage root holding one finished run of RUNS[name] (trained once a module)."""
    roots: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in roots:
            root = tmp_path_factory.mktemp(f"trained-{name}") / "runs"
            assert main(run_argv(name, root, inputs)) == 0
            roots[name] = root
        return roots[name]

    return get


def copy_of(root: Path, tmp_path: Path) -> Path:
    """A private copy of a storage root (at another path: storage_root is no part of what a run learns)."""
    shutil.copytree(root, tmp_path / "runs")
    return tmp_path / "runs"


@pytest.mark.parametrize("name", RUNS)
def test_rerunning_a_finished_run_trains_nothing(capsys, home, trained, inputs, name):
    root = copy_of(trained(name), home)
    run = root / name / "try2"
    before = snapshot(run)
    step = json.loads((run / "finished.json").read_text())["global_step"]
    planned = "" if name == "dpo-rollouts" else " of max_steps 2"  # (its max_steps bounds each round)
    capsys.readouterr()
    for threads in ("1", "2"):  # twice, the second time with a knob that changes nothing learned
        assert main([*run_argv(name, root, inputs), f"cpu_threads={threads}"]) == 0
        out = capsys.readouterr().out
        assert f"already complete: {run} (step {step}{planned}); final model {run / 'final'}" in out, out
        assert "Nothing trained" in out
    assert snapshot(run) == before
    if name != "dpo-rollouts":
        assert {p.name for p in (run / "checkpoints").glob("checkpoint-*")} == {"checkpoint-2"}


def test_rerun_with_other_values_is_refused_before_anything_loads(capsys, home, trained, inputs):
    root = copy_of(trained("sft"), home)
    run = root / "sft" / "try2"
    base = run_argv("sft", root, inputs)
    cases = [  # (extra arguments, what the one line names)
        (["trainer.max_steps=4"], "trainer.max_steps: 2 -> 4"),
        ([f"data={inputs['other']}"], 'other.jsonl"'),
        (["lora=null"], "lora: {} -> null"),
        (["seed=7", "trainer.learning_rate=0.1"], "seed: 42 -> 7; trainer.learning_rate: null -> 0.1"),
    ]
    for extra, names in cases:
        err = refused(capsys, [*base, *extra], root)
        assert f"run {run} was trained with other values (" in err and f"{names})" in err, err
        assert err.endswith("pass run_id=<new id> to start a separate run, or allow_config_change=true to "
                            "continue this one with them"), err
    # another method on the same run id: never continued
    err = refused(capsys, ["train", "dpo", f"storage_root={root}", "experiment=sft", "run_id=try2",
                           f"data={inputs['prefs']}"], root)
    assert f"run {run} was trained with `playpen train sft`, not dpo; pass run_id=<new id>" in err, err
    # config.yaml that cannot be read: refused, not overwritten
    (run / "config.yaml").write_text("# playpen train sft (resolved config)\nmodel: [unclosed\n")
    err = refused(capsys, base, root)
    assert f"{run / 'config.yaml'} is not readable YAML" in err, err


def test_allow_config_change_continues_the_run_and_keeps_the_old_config(capsys, home, trained, inputs):
    root = copy_of(trained("sft"), home)
    run = root / "sft" / "try2"
    old_config = (run / "config.yaml").read_bytes()
    args = [*run_argv("sft", root, inputs), "trainer.max_steps=3"]
    assert main([*args, "allow_config_change=true"]) == 0
    assert "allow_config_change: continuing" in capsys.readouterr().out
    assert (run / "config.before-step2.yaml").read_bytes() == old_config
    config = (run / "config.yaml").read_text()
    assert "max_steps: 3" in config and "allow_config_change:" not in config
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r] \
        == [1, 2, 3]
    assert json.loads((run / "finished.json").read_text())["global_step"] == 3
    before = snapshot(run)
    assert main(args) == 0  # the new values are now the run's own: plain reruns find it complete
    assert "already complete" in capsys.readouterr().out and snapshot(run) == before


# ---------------------------------------------------------------- one process per folder

class Holder:
    """Another process holding a folder's lock (as a running `playpen train` or `playpen eval` does)."""

    def __init__(self, folder: Path):
        code = ("import sys; from playpen.storage import exclusive_folder\n"
                f"with exclusive_folder({str(folder)!r}, 'x', 'y'):\n"
                "    print('held', flush=True); sys.stdin.read()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=REPO)
        assert self.proc.stdout.readline().strip() == "held"
        self.where = f"pid {self.proc.pid} on {socket.gethostname().split('.')[0]}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_exclusive_folder_admits_one_holder_at_a_time(tmp_path):
    folder = tmp_path / "results"
    with exclusive_folder(folder, "folder in use", "wait"):
        with pytest.raises(PlaypenError, match=r"^folder in use \(pid \d+ on \S+\); wait$"):
            with exclusive_folder(folder, "folder in use", "wait"):
                pass
    with pytest.raises(RuntimeError):  # an error inside the block releases the folder too
        with exclusive_folder(folder, "folder in use", "wait"):
            raise RuntimeError("boom")
    with exclusive_folder(folder, "folder in use", "wait"):
        pass


def test_second_training_of_a_run_refuses(capsys, home, inputs):
    run = home / "runs" / "sft" / "try2"
    with Holder(run) as other:
        err = refused(capsys, run_argv("sft", home / "runs", inputs), run)
    assert err == (f"playpen: error: run folder {run} is in use by another playpen train ({other.where}); "
                   f"wait for it to end, or pass run_id=<new id> to start a separate run")


def test_second_eval_into_a_results_folder_refuses(capsys, home):
    results = home / "res"
    results.mkdir()
    (results / "playpen-tiny.val.json").write_text("{}")  # what an earlier eval left
    with Holder(results) as other:
        err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "--instances", "1", "-L", "8",
                               "-r", str(results)], results)
    assert err == (f"playpen: error: results folder {results} is in use by another playpen eval ({other.where}); "
                   f"wait for it to end, or pick another -r")


# ---------------------------------------------------------------- playpen data

def test_data_never_replaces_a_dataset_with_an_empty_one(capsys, tmp_path):
    out = tmp_path / "out.jsonl"
    assert main(["data", str(CLEMBENCH_SAMPLE), "-o", str(out), "--game", "wordle", "--outcome", "lose"]) == 0
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


# ---------------------------------------------------------------- a partner that fails

DEAD_BACKEND = '''"""An OpenAI-compatible service that is down: every request fails at once (no retries; clemcore's
openai_compatible backend retries for ~25 s per reply before it gives up the same way)."""
import openai

import clemcore.backends as backends


class DeadPartner(backends.RemoteBackend):
    def __init__(self):
        super().__init__(key_name="dead_partner")

    def _make_api_client(self):
        return openai.OpenAI(base_url=self.key["base_url"], api_key=self.key["api_key"], max_retries=0, timeout=5)

    def get_model_for(self, model_spec):
        return DeadModel(self.client, model_spec)


class DeadModel(backends.Model):
    def __init__(self, client, model_spec):
        super().__init__(model_spec)
        self.client = client

    def generate_response(self, messages):
        reply = self.client.chat.completions.create(model="dead", messages=messages, max_tokens=8)
        return messages, reply.model_dump(), reply.choices[0].message.content
'''


@pytest.fixture
def dead_partner(home) -> str:
    """A registered model behind a closed localhost port; its key is in key.json (present, service unreachable)."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (home / "dead_partner_api.py").write_text(DEAD_BACKEND)
    (home / "key.json").write_text(json.dumps({"dead_partner": {"api_key": "dummy-not-a-secret",
                                                                "base_url": f"http://127.0.0.1:{port}/v1"}}))
    (home / "model_registry.json").write_text(json.dumps([{"model_name": "dead-partner", "backend": "dead_partner",
                                                           "model_id": "dead", "model_config": {}}]))
    return "dead-partner"


def run_cli(home: Path, *argv: str) -> str:
    """The command as a user runs it, in a process of its own (clemcore's logging set up as on the command line).
    It gets as far as playing, so progress lines come first; it must end in exit 2 and one error line."""
    proc = subprocess.run([sys.executable, "-m", "playpen.cli", *argv], capture_output=True, text=True, cwd=home,
                          timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("playpen: error: ") and proc.stderr.count("playpen: error: ") == 1, proc.stderr
    return last


def test_eval_where_no_episode_finished_writes_no_scores(dead_partner, home):
    results = home / "res"
    err = run_cli(home, "eval", dead_partner, "-g", "wordle", "--instances", "2", "-r", str(results))
    assert err == f"playpen: error: no episode of wordle finished; see {results / 'clembench.log'}"
    assert "APIConnectionError" in (results / "clembench.log").read_text()
    assert not list(results.glob("*.val.json")) and not (results / "results.csv").exists()


def test_grpo_stops_when_the_teacher_fails(dead_partner, home):
    err = run_cli(home, "train", "grpo", "storage_root=runs", "experiment=dead", "run_id=r1", "game=taboo",
                  f"partner={dead_partner}", "self_play=false", "instances=2", "group_size=2", "max_new_tokens=8",
                  "trainer.per_device_train_batch_size=2", "trainer.max_steps=2", "cpu_threads=1")
    run = home / "runs" / "dead" / "r1"
    assert err == (f"playpen: error: partner {dead_partner} failed in 2 of 2 episodes of step 0 (partner failed: "
                   f"APIConnectionError: Connection error.); stopped before training on them: check that its "
                   f"service is up and its key.json entry is valid (records: {run / 'playpen-records'})")
    assert len(list((run / "playpen-records").rglob("error.json"))) == 2  # what the teacher answered
    assert not (run / "final").exists() and not (run / "model_registry.json").exists()
    assert not list((run / "checkpoints").glob("checkpoint-*"))


# ---------------------------------------------------------------- folders that hold no model

def test_eval_of_a_folder_that_holds_no_model(capsys, home):
    (home / "model_registry.json").write_text(json.dumps([
        {"model_name": "mine-a", "backend": "huggingface_local", "huggingface_id": "x"},
        {"model_name": "mine-b", "backend": "huggingface_local", "huggingface_id": "y"}]))
    (home / "empty").mkdir()
    cases = [
        ("", "no model given: name a registered model (`playpen list models`), a training run folder or a "
             "checkpoint folder"),
        (".", f"{home} is a folder with a model registry (mine-a, mine-b), not a model; name the model, "
              f"e.g. mine-b"),
        (str(home), f"{home} is a folder with a model registry (mine-a, mine-b), not a model"),
        ("empty", f"no config.json in {home / 'empty'}: the folder holds no model, checkpoint"),
    ]
    for model, message in cases:
        err = refused(capsys, ["eval", model, "-g", "wordle", "-r", str(home / "res")], home / "empty",
                      home / "model_registry.json")
        assert message in err, err
        assert not (home / "res").exists()


def test_a_replay_where_no_episode_finished_keeps_the_earlier_records(dead_partner, home):
    """`playpen eval M -g G -r DIR` replays G; if this time no episode finishes (the model's service is down),
    the records G had in DIR stay and are scored, with a warning: nothing on disk is lost."""
    from playpen.model_registry import resolve_model

    tiny = {**resolve_model("playpen-tiny"), "model_name": "flaky"}
    dead = json.loads((home / "model_registry.json").read_text())[0]
    (home / "model_registry.json").write_text(json.dumps([tiny]))
    first = subprocess.run([sys.executable, "-m", "playpen.cli", "eval", "flaky", "-g", "wordle", "--instances", "2",
                            "-L", "16", "-r", "res"], capture_output=True, text=True, cwd=home, timeout=300)
    assert first.returncode == 0, first.stderr
    before = snapshot(home / "res" / "flaky" / "wordle")
    (home / "model_registry.json").write_text(json.dumps([{**dead, "model_name": "flaky"}]))  # now unreachable
    again = subprocess.run([sys.executable, "-m", "playpen.cli", "eval", "flaky", "-g", "wordle", "--instances", "2",
                            "-L", "16", "-r", "res"], capture_output=True, text=True, cwd=home, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "no episode of wordle finished this time" in again.stderr and "earlier records" in again.stderr
    assert snapshot(home / "res" / "flaky" / "wordle") == before
    assert json.loads((home / "res" / "flaky.val.json").read_text())["games"]["wordle"]["episodes"] == 2
    assert not (home / "res" / ".playing").exists()


def test_ctrl_c_says_which_checkpoint_the_rerun_resumes_from(home):
    """Ctrl-C (SIGINT) during training: one line naming the checkpoint the same command resumes from."""
    import signal
    import time

    argv = [sys.executable, "-m", "playpen.cli", "train", "grpo", "storage_root=runs", "experiment=int",
            "run_id=r1", "game=arithmetic", "instances=2", "group_size=2", "max_new_tokens=8",
            "trainer.per_device_train_batch_size=2", "trainer.max_steps=400", "trainer.save_steps=1",
            "cpu_threads=1"]
    # output to files, not pipes: a pipe nobody reads fills up and blocks the training process before it saves
    with open(home / "out.log", "w") as out, open(home / "err.log", "w") as errors:
        # a shell's background job inherits SIGINT ignored, and Python then keeps ignoring it: restore the default
        proc = subprocess.Popen(argv, cwd=home, stdout=out, stderr=errors, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        checkpoints = home / "runs" / "int" / "r1" / "checkpoints"
        deadline = time.monotonic() + 600
        while not list(checkpoints.glob("checkpoint-*/playpen_state.json")) and time.monotonic() < deadline:
            assert proc.poll() is None, (home / "err.log").read_text()[-2000:]
            time.sleep(0.2)
        assert list(checkpoints.glob("checkpoint-*")), "no checkpoint within 600 s: " + \
            (home / "err.log").read_text()[-2000:]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    err = (home / "err.log").read_text()
    stdout = (home / "out.log").read_text()
    assert err.strip(), f"nothing on stderr; exit code {proc.returncode}; stdout: {stdout[-2000:]}"
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert last.startswith("playpen: interrupted; rerun the same command to resume from checkpoint-"), last
    step = int(last.rsplit("checkpoint-", 1)[1])
    assert (checkpoints / f"checkpoint-{step}").is_dir()
