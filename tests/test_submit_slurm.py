"""`python -m playpen.submit` on the local SLURM dev cluster (2 nodes): real training jobs, 2-node DDP over gloo,
preemption → requeue → resume, partition limits from SLURM, the clean job environment, the requeue budget."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from playpen.storage import make_private_folder
from playpen.submit import jobs, plan, render, send, watch
from playpen.submit.cli import main
from playpen.submit.jobs import TaskInfo
from playpen.submit.profiles import load_profile
from playpen.train.checkpoints import complete_checkpoints
from tests.devcluster import wait_until
from tests.helpers import assert_clean, printed, submit_cli, submit_probe, write_sft_config

pytestmark = pytest.mark.slurm
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # jobs unpickle this module's classes by value


GRPO_STEPS = 8  # a tiny step takes ~1 s on a quiet machine: enough steps left to preempt after the first checkpoint


def write_grpo_config(tmp_path: Path, steps: int = GRPO_STEPS) -> Path:
    """GRPO+LoRA self-play on playpen-tiny: 2 arithmetic instances × group of 2 per step, a checkpoint per step."""
    config = tmp_path / "grpo.yaml"
    config.write_text(f"experiment: submit-grpo\ngame: arithmetic\ninstances: 8\ngroup_size: 2\n"
                      f"max_new_tokens: 16\nrollout_batch_size: 8\nstorage_root: {tmp_path / 'runs'}\n"
                      f"trainer:\n  max_steps: {steps}\n  save_steps: 1\n  save_total_limit: 1\n"
                      f"  per_device_train_batch_size: 4\n")
    return config


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def run_summary(run_dir: Path) -> dict:
    """What must be equal between an interrupted and an uninterrupted run."""
    steps = [m["step"] for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if "loss" in m]
    tags = sorted(p.name for p in (run_dir / "playpen-records").glob("*/step_*"))
    episodes = {t: len(list((run_dir / "playpen-records").glob(f"*/{t}/**/interactions.json"))) for t in tags}
    state = json.loads(next((run_dir / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())
    return {"steps": steps, "episodes": episodes, "global_step": state["global_step"]}


class Launched:
    """A CLI submission started in the background (`--wait` ones finish in their own time)."""

    def __init__(self, out: Path, *args: str):
        self.out, self.name = out, out.stem
        self.proc = subprocess.Popen([sys.executable, "-m", "playpen.submit", *args], stdout=self.out.open("w"),
                                     stderr=subprocess.STDOUT, text=True)
        self.started = time.monotonic()
        wait_until(lambda: "cancel:" in self.out.read_text() or self.proc.poll() is not None, 60, "the submission")
        text = self.out.read_text()
        assert "cancel:" in text, text
        self.run_dir, self.job_id = Path(printed(text, "run dir")), printed(text, "cancel").split()[1]

    def finish(self, timeout: float = 300) -> str:
        """The CLI's whole output once it exited (0); prints how long submit → result took."""
        self.proc.wait(timeout=timeout)
        text = self.out.read_text()
        assert self.proc.returncode == 0, text
        print(f"{self.name}: submit → CLI exit {time.monotonic() - self.started:.1f} s")
        return text


@pytest.fixture(scope="module")
def launched(devcluster, tmp_path_factory):
    """Three real jobs at once (the dev nodes have 2 CPU slots each and the jobs use one core each):
    an uninterrupted 1-node GRPO run (--wait), the same run to be preempted, and a 2-node SFT run (--wait)."""
    tmp = tmp_path_factory.mktemp("launched")
    config = write_grpo_config(tmp)
    (tmp / "ddp").mkdir()
    sft = write_sft_config(tmp / "ddp", steps=DDP["steps"], save_steps=3, rows=DDP["rows"])
    runs = {  # the run to preempt goes last, so its test starts watching it right after it is submitted
        "reference": Launched(tmp / "reference.out", "grpo", "--config", str(config), "--cluster", "devcluster",
                              "--wait"),
        "ddp": Launched(tmp / "ddp.out", "sft", "--config", str(sft), "--cluster", "devcluster",
                        "--nodes", "2", "--wait"),
        "preempted": Launched(tmp / "preempted.out", "grpo", "--config", str(config), "--cluster", "devcluster",
                              "run_id=preempted"),
    }
    yield runs
    for run in runs.values():
        if run.proc.poll() is None:
            run.proc.kill()
            sh("scancel", run.job_id)


DDP = {"rows": 32, "batch": 4, "steps": 6}


@pytest.mark.slow
def test_preempted_job_requeues_and_resumes_to_the_same_run(launched):
    run = launched["preempted"]
    # a complete checkpoint, as the resumed job judges it: a USR2 while the first one is still being saved would
    # rightly leave it skipped, and the job would train from step 0
    wait_until(lambda: complete_checkpoints(run.run_dir / "checkpoints"), 240, "a first complete checkpoint")
    sh("scancel", "--signal=USR2", run.job_id)
    sub = watch.load_submissions(run.run_dir)[-1]
    final = wait_until(lambda: (s := watch.job_states(sub)[run.job_id][0]) in ("COMPLETED", "FAILED") and s,
                       300, "the requeued job to finish", interval=1)
    print(f"preempted GRPO job: submit → COMPLETED {time.monotonic() - run.started:.1f} s")
    assert final == "COMPLETED", submit_cli("status", str(run.run_dir), "-n", "30").stdout
    events = [(e["event"], e["attempt"]) for e in jobs.job_events(run.run_dir / "logs")]
    assert events == [("started", 0), ("requeued", 0), ("started", 1), ("finished", 1)]
    log = sub.log_paths(run.job_id)[0].read_text()
    assert "resuming" in log and "from checkpoint-" in log
    reference = launched["reference"]
    reference.finish()
    assert run_summary(run.run_dir) == run_summary(reference.run_dir)  # same steps and records, no preemption
    assert "REQUEUED" in sh("sacct", "-n", "-X", "-D", "-P", "-j", run.job_id, "-o", "State").split()
    assert "2 start(s), 1 requeue(s) (max 3)" in submit_cli("status", str(run.run_dir)).stdout


@pytest.mark.slow
def test_one_node_grpo_job_leaves_checkpoints_records_metrics(launched):
    run = launched["reference"]
    out = run.finish()
    assert "(slurm, cluster profile devcluster, 1 node(s) × 1 task(s))" in out
    assert "/logs/submitit/" in printed(out, "logs") and printed(out, "follow").startswith("tail -f ")
    assert f"job {run.job_id} finished: {{'run_dir': '{run.run_dir}'" in out
    summary = run_summary(run.run_dir)
    assert summary["steps"] == list(range(1, GRPO_STEPS + 1)) and summary["global_step"] == GRPO_STEPS
    assert list(summary["episodes"]) == [f"step_{i:05d}" for i in range(GRPO_STEPS)]
    assert set(summary["episodes"].values()) == {4}  # 2 instances × group_size 2
    assert (run.run_dir / "final" / "adapter_config.json").is_file()
    assert (run.run_dir / "model_registry.json").is_file()
    wait_until(lambda: sh("sacct", "-n", "-X", "-P", "-j", run.job_id, "-o", "State").strip() == "COMPLETED",
               20, "sacct to record the job")
    text = submit_cli("status", str(run.run_dir)).stdout
    assert f"job {run.job_id}: COMPLETED on node" in text and "1 start(s), 0 requeue(s) (max 3)" in text


@pytest.mark.slow
def test_two_node_ddp_job_trains_one_model_on_node1_and_node2(launched):
    run = launched["ddp"]
    out = run.finish()
    assert "(slurm, cluster profile devcluster, 2 node(s) × 1 task(s))" in out
    start = jobs.job_events(run.run_dir / "logs")[0]
    assert start["world_size"] == 2 and start["master"].startswith("node1:")
    results = eval(out.split("finished: ", 1)[1].splitlines()[0])  # noqa: S307  (the CLI's repr of the results)
    assert sorted((r["host"], r["rank"], r["world_size"]) for r in results) == [("node1", 0, 2), ("node2", 1, 2)]
    # One run dir, one set of checkpoints, saved by rank 0; both ranks' gradients went into them (DDP): each
    # optimizer step consumed 2 × batch rows, so the epoch counter advanced twice as fast as on one rank.
    ckpts = sorted(p.name for p in (run.run_dir / "checkpoints").glob("checkpoint-*"))
    assert ckpts == ["checkpoint-3", "checkpoint-6"]
    state = json.loads((run.run_dir / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == DDP["steps"]
    assert state["epoch"] == pytest.approx(DDP["steps"] * DDP["batch"] * 2 / DDP["rows"])
    assert (run.run_dir / "final" / "adapter_model.safetensors").is_file()
    sub = watch.load_submissions(run.run_dir)[-1]
    assert "Job completed successfully" in sub.log_paths(run.job_id, task=1)[0].read_text()


class Spin(jobs.PlaypenJob):
    """Runs until signalled: a stand-in for a long training job."""

    def run(self, task: TaskInfo) -> str:
        Path(self.log_dir, "running").touch()
        time.sleep(120)
        return "not preempted"


def test_requeues_are_bounded_by_the_profile(devcluster, tmp_path):
    profile = load_profile("devcluster")
    folder = make_private_folder(tmp_path / "jobs", "job folder", root=tmp_path)  # (as send.make_job_folder)
    launch = plan.launch("slurm", folder, profile, tmp_path / "runs", "spin")
    ex = render.executor(launch)
    with send.submission_env(launch):
        job = ex.submit(Spin(str(tmp_path), max_requeues=0))
    wait_until(lambda: (tmp_path / "running").exists(), 30, "the job to start")
    sh("scancel", "--signal=USR2", job.job_id)
    wait_until(job.done, 30, "the job to end")
    with pytest.raises(Exception, match="checkpoint function returned None"):
        job.result()
    events = jobs.job_events(tmp_path)
    assert [e["event"] for e in events] == ["started", "gave-up", "failed"]  # failed: ended, not requeued
    assert "max_requeues=0" in events[1]["reason"]


def test_nodes_above_the_partition_limit_are_refused(devcluster, tmp_path, capsys):
    config = write_sft_config(tmp_path)
    # the `local` profile sets no max_nodes: the limit comes from SLURM (debug: MaxNodes=2)
    assert main(["sft", "--config", str(config), "--executor", "slurm", "--nodes", "3"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("playpen: error: --nodes 3 is above what partition debug (the default) allows "
                           "(2 nodes, from scontrol)")
    assert main(["sft", "--config", str(config), "--executor", "slurm", "--cluster", str(_profile(tmp_path))]) == 2
    assert "partition 'nope' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "bad-partition.yaml"
    path.write_text("partition: nope\n")
    return path


def test_slurm_job_environment_is_clean(devcluster, tmp_path, monkeypatch):
    seen, folder = submit_probe("slurm", tmp_path, monkeypatch)
    assert_clean(seen, folder)
    assert seen["SLURM_CONF"]  # kept: the job must reach its own controller (scontrol requeue)

