"""playpen.train.runner on a rerun and resume: a rerun finishes, continues or refuses, never mixing two configs."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from playpen.cli import main
from playpen.storage import RunDir, read_jsonl
from tests.helpers import RUNS, refused, run_argv, snapshot


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory, run_inputs):
    """trained_runs(name) -> storage root holding one finished run of helpers.RUNS[name] (playpen-tiny, 2 steps),
    trained once a module; tests change a copy (`copy_of`)."""
    roots: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in roots:
            root = tmp_path_factory.mktemp(f"trained-{name}") / "runs"
            assert main(run_argv(name, root, run_inputs)) == 0
            roots[name] = root
        return roots[name]

    return get


def copy_of(root: Path, tmp_path: Path) -> Path:
    """A private copy of a storage root (at another path: storage_root is no part of what a run learns)."""
    shutil.copytree(root, tmp_path / "runs")
    return tmp_path / "runs"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# ---------------------------------------------------------------- a finished run

@pytest.mark.parametrize("name", RUNS)
def test_rerunning_a_finished_run_trains_nothing(capsys, clean_cwd, trained_runs, run_inputs, name):
    root = copy_of(trained_runs(name), clean_cwd)
    run = root / name / "try2"
    before = snapshot(run)
    step = json.loads((run / "finished.json").read_text())["global_step"]
    planned = "" if name == "dpo-rollouts" else " of max_steps 2"  # (its max_steps bounds each round)
    capsys.readouterr()
    for threads in ("1", "2"):  # twice, the second time with a knob that changes nothing learned
        assert main([*run_argv(name, root, run_inputs), f"cpu_threads={threads}"]) == 0
        out = capsys.readouterr().out
        assert f"already complete: {run} (step {step}{planned}); final model {run / 'final'}" in out, out
        assert "Nothing trained" in out
    assert snapshot(run) == before
    if name != "dpo-rollouts":
        assert {p.name for p in (run / "checkpoints").glob("checkpoint-*")} == {"checkpoint-2"}


def test_rerun_with_other_values_is_refused_before_anything_loads(capsys, clean_cwd, trained_runs, run_inputs):
    root = copy_of(trained_runs("sft"), clean_cwd)
    run = root / "sft" / "try2"
    base = run_argv("sft", root, run_inputs)
    cases = [  # (extra arguments, what the one line names)
        (["trainer.max_steps=4"], "trainer.max_steps: 2 -> 4"),
        ([f"data={run_inputs['other']}"], 'other.jsonl"'),
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
                           f"data={run_inputs['prefs']}"], root)
    assert f"run {run} was trained with `playpen train sft`, not dpo; pass run_id=<new id>" in err, err
    # config.yaml that cannot be read: refused, not overwritten
    (run / "config.yaml").write_text("# playpen train sft (resolved config)\nmodel: [unclosed\n")
    err = refused(capsys, base, root)
    assert f"{run / 'config.yaml'} is not readable YAML" in err, err


def test_allow_config_change_continues_the_run_and_keeps_the_old_config(capsys, clean_cwd, trained_runs, run_inputs):
    root = copy_of(trained_runs("sft"), clean_cwd)
    run = root / "sft" / "try2"
    old_config = (run / "config.yaml").read_bytes()
    args = [*run_argv("sft", root, run_inputs), "trainer.max_steps=3"]
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


# ---------------------------------------------------------------- a run killed during its final save

@pytest.mark.parametrize("cut", ["no finished.json", "finished.json cut off"])
@pytest.mark.parametrize("name", ["sft", "grpo"])
def test_killed_during_the_final_save_finishes_without_training(capsys, clean_cwd, trained_runs, run_inputs, name,
                                                                cut):
    """checkpoint-2 (= max_steps) is complete; the job died before finished.json: the rerun finishes from the
    checkpoint (final model = its weights, registry entry, finished.json at step 2) and trains no step 3."""
    root = copy_of(trained_runs(name), clean_cwd)
    run = root / name / "try2"
    adapter = (run / "final" / "adapter_model.safetensors").read_bytes()
    for leftover in ("model_registry.json", "learning_curve.png"):
        (run / leftover).unlink()
    if cut == "no finished.json":
        (run / "finished.json").unlink()
        for path in (run / "final").iterdir():
            path.unlink()
        (run / "final").rmdir()
    else:
        (run / "finished.json").write_text('{"global_step": 2, "fin')
    capsys.readouterr()
    assert main(run_argv(name, root, run_inputs)) == 0
    out = capsys.readouterr().out
    assert f"checkpoint-2 is the last step (2); finishing {run} from it, nothing trained" in out, out
    assert json.loads((run / "finished.json").read_text())["global_step"] == 2
    assert {p.name for p in (run / "checkpoints").glob("checkpoint-*")} == {"checkpoint-2"}
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 2
    assert (run / "final" / "adapter_model.safetensors").read_bytes() == adapter  # the checkpoint's weights
    assert "optimizer.pt" not in _files(run / "final")
    assert json.loads((run / "model_registry.json").read_text())[0]["model_name"] == f"{name}-try2"
    assert main(run_argv(name, root, run_inputs)) == 0  # and now it is complete
    assert "already complete" in capsys.readouterr().out


def test_a_reward_model_killed_during_the_final_save_measures_without_training(capsys, clean_cwd):
    """The reward recipe finishes in its own fit (held-out accuracy, score format): from the last checkpoint too."""
    import shutil

    from playpen.train import train

    rows = [{"prompt": f"Describe thing {i % 2}.", "text": text, "label": label}
            for i in range(6) for text, label in (("lovely and bright", 1.0), ("awful and grim", -1.0))]
    (clean_cwd / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["storage_root=runs", "cpu_threads=1", "experiment=rm", "data=labelled.jsonl", "held_out=0.25",
            "run_id=r1", "trainer.max_steps=2", "trainer.save_steps=2", "trainer.per_device_train_batch_size=4"]
    run = train("reward", None, argv).path
    adapter = (run / "final" / "adapter_model.safetensors").read_bytes()
    for leftover in ("finished.json", "model_registry.json", "reward_eval.json"):
        (run / leftover).unlink()
    shutil.rmtree(run / "final")
    capsys.readouterr()
    train("reward", None, argv)
    assert "checkpoint-2 is the last step (2); finishing" in capsys.readouterr().out
    assert json.loads((run / "finished.json").read_text())["global_step"] == 2
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 2
    assert (run / "final" / "adapter_model.safetensors").read_bytes() == adapter
    assert json.loads((run / "reward_eval.json").read_text())["held_out_pairs"] > 0


# ---------------------------------------------------------------- what a rerun resumes from

def test_nan_weights_in_the_newest_checkpoint_stop_the_run(capsys, clean_cwd, trained_runs, run_inputs):
    """Same byte length, NaN values: refused in one line naming the file, before anything is written."""
    root = copy_of(trained_runs("sft"), clean_cwd)
    run = root / "sft" / "try2"
    (run / "finished.json").unlink()
    weights = run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    first = sorted(k for k in header if k != "__metadata__")[0]
    start, end = (8 + length + offset for offset in header[first]["data_offsets"])
    nan = {"F32": b"\x00\x00\xc0\x7f", "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}[header[first]["dtype"]]
    data[start:end] = nan * ((end - start) // len(nan))  # in place: the file keeps its byte length
    weights.write_bytes(bytes(data))
    err = refused(capsys, run_argv("sft", root, run_inputs), run)
    assert f"checkpoint file {weights} is corrupt (tensor {first} holds NaN or inf values); delete " \
           f"{weights.parent} to resume from the checkpoint before it" in err, err


def test_a_huge_iterations_count_does_not_hang_the_resume_check(tmp_path):
    from playpen.train.dpo import DPO
    from playpen.train.rounds import DONE, iter_dir as _iter_dir

    run = RunDir(tmp_path / "run").create()
    cfg = SimpleNamespace(data=None, iterations=1_000_000_000)
    started = time.perf_counter()
    assert DPO().find_resume(cfg, run) == (None, 0)
    _iter_dir(run, 0).mkdir()
    (_iter_dir(run, 0) / DONE).write_text('{"global_step": 3}')
    assert DPO().find_resume(cfg, run) == (None, 3)
    assert not DPO().is_complete(cfg, run, 3)
    assert time.perf_counter() - started < 5


@pytest.mark.slow
def test_ctrl_c_says_which_checkpoint_the_rerun_resumes_from(clean_cwd):
    """Ctrl-C (SIGINT) during training: one line naming the checkpoint the same command resumes from."""
    import signal
    import time

    from playpen.train.checkpoints import complete_checkpoints

    argv = [sys.executable, "-m", "playpen.cli", "train", "grpo", "storage_root=runs", "experiment=int",
            "run_id=r1", "game=arithmetic", "instances=2", "group_size=2", "max_new_tokens=8",
            "trainer.per_device_train_batch_size=2", "trainer.max_steps=400", "trainer.save_steps=1",
            "cpu_threads=1"]
    # output to files, not pipes: a pipe nobody reads fills up and blocks the training process before it saves
    with open(clean_cwd / "out.log", "w") as out, open(clean_cwd / "err.log", "w") as errors:
        # a shell's background job inherits SIGINT ignored, and Python then keeps ignoring it: restore the default
        proc = subprocess.Popen(argv, cwd=clean_cwd, stdout=out, stderr=errors, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        checkpoints = clean_cwd / "runs" / "int" / "r1" / "checkpoints"
        deadline = time.monotonic() + 600
        while not complete_checkpoints(checkpoints) and time.monotonic() < deadline:
            assert proc.poll() is None, (clean_cwd / "err.log").read_text()[-2000:]
            time.sleep(0.2)
        assert complete_checkpoints(checkpoints), "no complete checkpoint within 600 s: " + \
            (clean_cwd / "err.log").read_text()[-2000:]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    err = (clean_cwd / "err.log").read_text()
    stdout = (clean_cwd / "out.log").read_text()
    assert err.strip(), f"nothing on stderr; exit code {proc.returncode}; stdout: {stdout[-2000:]}"
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert last.startswith("playpen: interrupted; rerun the same command to resume from checkpoint-"), last
    step = int(last.rsplit("checkpoint-", 1)[1])
    assert (checkpoints / f"checkpoint-{step}").is_dir()
