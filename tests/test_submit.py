"""`python -m playpen.submit` without SLURM: profiles, --dry-run scripts, bad input (one line, exit 2, nothing
submitted), a real training job on the local executor, and the clean job environment."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playpen.submit import jobs, plan
from playpen.submit.cli import main
from playpen.submit.profiles import available, load_profile, parse_time_min
from tests.helpers import assert_clean, printed, submit_cli, submit_probe, write_sft_config

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = str(Path(sys.executable).parent)  # python, no sbatch/srun/apptainer


# ---------------------------------------------------------------- profiles

def test_shipped_profiles_load():
    assert {"local", "devcluster", "example_gpu"} <= set(available())
    for name in available():
        load_profile(name)
    gpu = load_profile("example_gpu")
    assert gpu.time_min == 1440 and gpu.gpus_per_node == 4 and gpu.container.image.endswith(".sif")
    assert load_profile("devcluster").partition == "debug"


@pytest.mark.parametrize("value,minutes", [(90, 90), ("90", 90), ("02:00:00", 120), ("1-00:00:00", 1440),
                                           ("30:30", 31), ("1-02", 1560)])
def test_time_formats(value, minutes):
    assert parse_time_min(value, "t") == minutes


# Values that reach the job script inside double quotes may name variables ($NAME, ${NAME}) and nothing else a
# shell evaluates: each of these would run on the compute node.
SHELL = {"command": "/x/$(touch marker)", "arithmetic": "/x/$((1+1))", "default": "/x/${HOME:-$(touch marker)}",
         "backquotes": "/x/`touch marker`", "bare dollar": "/x/$"}
SHELL_FIELDS = {"env": {"env": {"HF_HOME": "{v}"}}, "nccl": {"nccl": {"NCCL_DEBUG": "{v}"}},
                "scratch": {"scratch": "{v}"}, "container.image": {"container": {"image": "{v}"}},
                "container.python": {"container": {"python": "{v}"}},
                "container.binds": {"container": {"binds": ["{v}"]}}}


def _profile(tmp_path: Path, values: dict) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(values))
    return path


@pytest.mark.parametrize("form", SHELL)
@pytest.mark.parametrize("field", SHELL_FIELDS)
def test_profile_values_may_name_variables_and_nothing_else(tmp_path, field, form):
    from playpen.errors import PlaypenError

    values = json.loads(json.dumps(SHELL_FIELDS[field]).replace("{v}", SHELL[form]))
    with pytest.raises(PlaypenError, match=rf"p.yaml: {field.split('.')[0]}.*holds .*nothing else a shell "
                                           rf"evaluates"):
        load_profile(str(_profile(tmp_path, values)))
    allowed = json.loads(json.dumps(SHELL_FIELDS[field]).replace("{v}", "/scratch/$USER/${SLURM_JOB_ID}"))
    load_profile(str(_profile(tmp_path, allowed)))


@pytest.mark.parametrize("form", SHELL)
def test_a_container_flag_may_name_variables_and_nothing_else(tmp_path, capsys, form):
    config = write_sft_config(tmp_path)
    assert main(["sft", "--config", str(config), "--container", SHELL[form], "--dry-run"]) == 2
    assert "--container: " in capsys.readouterr().err and not (tmp_path / "marker").exists()


@pytest.mark.parametrize("options,message", [
    ({"chdir=/x --comment": "y"}, "'chdir=/x --comment' is not an sbatch option name"),
    ({"--comment": "y"}, "'--comment' is not an sbatch option name"),
    ({"comment": None}, "comment: None is not a value"),
    ({"comment": False}, "comment: False is not a value"),
    ({"comment": ["a", "b"]}, "expected one value"),
])
def test_sbatch_keys_are_option_names_and_values_one_value(tmp_path, options, message):
    from playpen.errors import PlaypenError

    with pytest.raises(PlaypenError, match=re.escape(message)):
        load_profile(str(_profile(tmp_path, {"sbatch": options})))


@pytest.mark.parametrize("values,message", [
    ({"time": 10**9}, "time: 1000000000 is more than a year"),
    ({"time": "9999-00:00:00"}, "is more than a year"),
    ({"signal_delay_s": 10**12}, "signal_delay_s: must be at most"),
])
def test_profile_times_are_bounded(tmp_path, values, message):
    from playpen.errors import PlaypenError

    with pytest.raises(PlaypenError, match=message):
        load_profile(str(_profile(tmp_path, values)))


def test_a_job_inherits_an_allow_list_of_variables():
    from playpen.submit.profiles import ClusterProfile
    from playpen.submit.send import job_submission_env

    shell = {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "HF_HOME": "/hf", "OMP_NUM_THREADS": "1",
             "SLURM_CONF": "/etc/slurm.conf", "SSHPASS": "x", "GITHUB_PAT": "x", "AWS_CREDS": "x",
             "DATABASE_URL": "postgres://u:p@h/db", "OPENAI_API_KEY": "x", "HF_TOKEN": "x", "SLURM_JOB_ID": "7",
             "RANK": "3", "CUDA_VISIBLE_DEVICES": "0", "MY_SERVICE": "x"}
    assert sorted(job_submission_env(shell, ClusterProfile())) == ["HF_HOME", "HOME", "LANG", "OMP_NUM_THREADS",
                                                                   "PATH", "SLURM_CONF"]
    kept = job_submission_env(shell, ClusterProfile(env_keep=["OPENAI_API_KEY", "MY_SERVICE"]))
    assert {"OPENAI_API_KEY", "MY_SERVICE"} <= set(kept) and "SSHPASS" not in kept
    # allow-listed prefixes with a secret in the name without a `_` boundary, or in the value
    secrets = {"HF_AUTHTOKEN": "x", "HF_HUB_APITOKEN": "x", "PYTHONSECRET": "x", "PLAYPEN_DB_URL": "postgres://u:pw@h",
               "HF_SIGNED_URL": "https://h/f?sig=abc", "PLAYPEN_MIRROR": "https://u:pw@h/simple",
               "TORCH_HOME": "https://h/f?X-Amz-Signature=1"}
    plain = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_CACHE": "/hf/hub", "PLAYPEN_HOME": "/scratch/playpen"}
    assert job_submission_env({**secrets, **plain}, ClusterProfile()) == plain


def test_a_cut_off_submission_record_is_one_line(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "submissions.json").write_text('[{"kind": "sft", "job_ids": ["1"')
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "submissions.json:1:" in err and "malformed JSON" in err and "\n" not in err, err


# ---------------------------------------------------------------- --dry-run (no SLURM on PATH)

def test_dry_run_prints_the_gpu_cluster_script(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", VENV_BIN)  # no sbatch/srun/apptainer: the script is rendered without SLURM
    config = write_sft_config(tmp_path)
    code = main(["sft", "--config", str(config), "--cluster", "example_gpu", "--nodes", "2", "--dry-run",
                 "storage_root=/project/my-project/playpen/runs"])
    out = capsys.readouterr().out
    assert code == 0, out
    for line in ["#SBATCH --partition=gpu", "#SBATCH --account=my-project", "#SBATCH --qos=normal",
                 "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=1440", "#SBATCH --mem=480G", "#SBATCH --cpus-per-task=16",
                 "#SBATCH --signal=USR2@300", "#SBATCH --requeue", "#SBATCH --mail-type=FAIL",
                 "module load apptainer", 'export HF_HOME="/scratch/$USER/hf"', 'export NCCL_SOCKET_IFNAME="ib0"',
                 'export PLAYPEN_STORAGE="/project/my-project/playpen/runs"']:
        assert line in out.splitlines(), f"{line!r} missing from:\n{out}"
    srun = next(line for line in out.splitlines() if line.startswith("srun "))
    assert "--cpu-bind=none" in srun
    exec_line = ('apptainer exec --nv --bind "/project/my-project/playpen/runs,/scratch/$USER,'
                 '/project/my-project/data" /project/my-project/containers/playpen.sif python -u -m '
                 'playpen.submit.start -u -m submitit.core._submit /project/my-project/playpen/runs/submit-test/')
    assert exec_line in srun, srun
    assert not Path("/project").exists()  # nothing created, nothing submitted


def test_dry_run_gres_and_no_gpu_flags(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", VENV_BIN)
    profile = tmp_path / "typed.yaml"
    text = (REPO / "playpen/configs/cluster/example_gpu.yaml").read_text()  # (a second gres: key is refused)
    profile.write_text(re.sub(r"(?m)^gres:.*$", 'gres: "gpu:a100:4"', text))
    config = write_sft_config(tmp_path)
    assert main(["sft", "--config", str(config), "--cluster", str(profile), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --gres=gpu:a100:4" in out and "--gpus-per-node" not in out
    # --gpus-per-node 0: one CPU task per node, no --nv; --container none: this venv's python
    assert main(["sft", "--config", str(config), "--cluster", "example_gpu", "--gpus-per-node", "0",
                 "--container", "none", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --ntasks-per-node=1" in out and "--nv" not in out and "apptainer exec" not in out
    assert f"{sys.executable} -u -m playpen.submit.start -u -m submitit.core._submit" in out
    # the local executor's plan: the job's variables and command, and nothing created
    assert main(["sft", "--config", str(config), "--executor", "local", "--cluster", "devcluster", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "OMP_NUM_THREADS=1" in out
    assert f"{sys.executable} -u -m playpen.submit.start -u -m submitit.core._submit" in out
    assert not (tmp_path / "runs").exists()


def test_dry_run_of_a_sweep_is_one_job_array(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", VENV_BIN)
    monkeypatch.chdir(tmp_path)
    code = main(["sweep", "--config", str(REPO / "playpen/configs/sweeps/tiny.yaml"), "--cluster", "devcluster",
                 "--dry-run", f"storage_root={tmp_path / 'runs'}"])
    out = capsys.readouterr().out
    assert code == 0, out
    array = next(line for line in out.splitlines() if line.startswith("#SBATCH --array="))
    cells = int(array.split("=")[1].split("-")[1].split("%")[0]) + 1
    assert cells >= 2 and array.endswith("%4"), array  # array_parallelism of the devcluster profile
    assert "#SBATCH --nodes=1" in out


# the rendered job of each kind of plan, against a recorded file (tests/data/golden/; the training job's own is
# tests/test_submit_script.py's): a job array, a one-task GPU job without an image, the local executor's job
GOLDEN_JOBS = {
    "sweep_array.sbatch": ["sweep", "--config", "sweeps/tiny", "--cluster", "devcluster",
                           "storage_root=/project/x/runs"],
    "tournament_array.sbatch": ["tournament", "--config", "debate/tournament_tiny", "--cluster", "devcluster"],
    "eval_gpu_no_image.sbatch": ["eval", "--config", "eval/tiny", "--cluster", "example_gpu", "--container", "none",
                                "--gpus-per-node", "2", "storage_root=/project/x/runs"],
    "eval_local.txt": ["eval", "--config", "eval/tiny", "--executor", "local", "--cluster", "devcluster",
                       "storage_root=/project/x/runs"],
}


@pytest.mark.parametrize("name", GOLDEN_JOBS)
def test_rendered_jobs_match_the_recorded_ones(name, tmp_path, monkeypatch, capsys):
    """The recorded files are never rewritten by the test: a change to one is a change to the jobs playpen
    submits, reviewed as such."""
    monkeypatch.setenv("PATH", VENV_BIN)
    monkeypatch.setenv("PLAYPEN_STORAGE", "/project/x/runs")
    monkeypatch.chdir(tmp_path)
    recorded = REPO / "tests" / "data" / "golden" / name
    assert main([*GOLDEN_JOBS[name], "--dry-run"]) == 0
    out = capsys.readouterr().out
    for value, placeholder in ((str(tmp_path.resolve()), "<TMP>"), (str(tmp_path), "<TMP>"),
                               (sys.executable, "<PYTHON>")):
        out = out.replace(value, placeholder)
    out = re.sub(r"\d{8}-\d{6}(-\d+-[0-9a-f]{8})?", lambda m: "<STAMP>" if m.group(1) else "<TIME>", out)
    assert recorded.is_file(), f"{recorded} is missing: record it by hand from the command in this test"
    assert out.splitlines() == recorded.read_text().splitlines()
    assert not Path("/project").exists() and not any(tmp_path.iterdir())  # a dry run creates nothing


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing submitted

BAD_INPUTS = {
    "unknown profile": (["--cluster", "nope"], {}, "unknown cluster profile 'nope'; available: devcluster, "),
    "nodes above the profile": (["--cluster", "devcluster", "--nodes", "3", "--executor", "local"], {},
                                "--nodes 3 is above the cluster profile devcluster's max_nodes=2"),
    "several nodes, local executor": (["--executor", "local", "--nodes", "2"], {}, "--nodes 2 needs SLURM"),
    "missing image": (["--executor", "local", "--container", "/nonexistent/playpen.sif"], {},
                      "container image /nonexistent/playpen.sif not found"),
    "missing runtime": (["--executor", "local", "--container", "{image}"], {"PATH": VENV_BIN},
                        "neither apptainer nor singularity is on PATH"),
    "no sbatch": (["--executor", "slurm"], {"PATH": VENV_BIN}, "--executor slurm, but there is no sbatch/srun"),
    "storage not writable": (["--executor", "local", "storage_root=/proc/playpen-runs"], {},
                             "storage root /proc/playpen-runs cannot be created"),
    "config key": (["--executor", "local", "learning_rate=3"], {}, "unknown key 'learning_rate'"),
    "override syntax": (["--executor", "local", "trainer.max_steps"], {}, "must look like key=value"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_submits_nothing(case, tmp_path, monkeypatch, capsys):
    args, env, message = BAD_INPUTS[case]
    image = tmp_path / "image.sif"
    image.write_bytes(b"SIF")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = write_sft_config(tmp_path)
    code = main(["sft", "--config", str(config), *[a.format(image=image) for a in args]])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("playpen: error: ") and message in lines[0], captured.err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_without_config_the_embedded_default_is_submitted(tmp_path):
    """The card's own command: `python -m playpen.submit grpo --nodes 2` takes the demo config and says so."""
    proc = submit_cli("grpo", "--nodes", "2", "--dry-run", f"storage_root={tmp_path / 'runs'}")
    assert proc.returncode == 0, proc.stderr
    default = REPO / "playpen" / "configs" / "grpo" / "demo.yaml"  # the packaged copy of configs/grpo/demo.yaml
    assert proc.stderr.strip() == f"playpen: no --config: submitting the default {default}"
    assert "#SBATCH --nodes=2" in proc.stdout and "grpo-demo" in proc.stdout
    for command, default in (("sft", "sft/tiny_lora.yaml"), ("eval", "eval/tiny.yaml")):
        proc = submit_cli(command, "--dry-run", f"storage_root={tmp_path / 'runs'}")
        assert proc.returncode == 0 and str(REPO / "playpen" / "configs" / default) in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_an_eval_job_with_a_partner_is_checked_and_named_by_the_pair(tmp_path):
    """`partner:` in an eval spec: its games checked before submitting (a two-player game plays), and the default
    results folder named MODEL--PARTNER as clem names the records inside it."""
    spec = tmp_path / "e.yaml"
    spec.write_text("model: playpen-tiny\npartner: mock\ngames: [taboo]\n")
    proc = submit_cli("eval", "--config", str(spec), "--executor", "local", "--dry-run",
                   f"storage_root={tmp_path / 'runs'}")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"eval dir \S+/runs/eval/playpen-tiny--mock-\d{8}-\d{6}\b", proc.stdout), proc.stdout
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_progress_line_from_metrics(tmp_path):
    from playpen.train.metrics import progress_line

    metrics = tmp_path / "metrics.jsonl"
    assert progress_line(metrics) is None
    metrics.write_text("".join(json.dumps(row) + "\n" for row in [
        {"step": 1, "time": 100.0, "max_steps": 11, "loss": 0.5, "reward": 0.1, "kl": 0.0},
        {"step": 2, "time": 101.0, "max_steps": 11, "validation_score": 3.0},  # no training values: not a step
        {"step": 3, "time": 120.0, "max_steps": 11, "loss": 0.25, "reward": 0.3, "kl": 0.002}]))
    assert progress_line(metrics) == "step 3/11 (27 %)  reward 0.3  loss 0.25  kl 0.002  ETA 1m20s"


def test_missing_config_file_and_status_of_a_non_run(tmp_path, capsys):
    assert main(["grpo", "--config", str(tmp_path / "nope.yaml"), "--executor", "local"]) == 2
    assert "config file" in capsys.readouterr().err
    assert main(["status", str(tmp_path)]) == 2
    assert "holds no submission record" in capsys.readouterr().err


# ---------------------------------------------------------------- real jobs on the local executor

@pytest.mark.slow
def test_local_executor_trains_and_status_reports_it(tmp_path):
    config = write_sft_config(tmp_path, steps=4, save_steps=2)
    t0 = time.monotonic()
    proc = submit_cli("sft", "--config", str(config), "--executor", "local", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"local SFT job, submit → result: {time.monotonic() - t0:.1f} s")
    run_dir = Path(printed(proc.stdout, "run dir"))
    assert printed(proc.stdout, "cancel").startswith("kill -INT ")
    assert "tail -f " in proc.stdout and "finished: {'run_dir': " in proc.stdout
    assert run_dir.parent == tmp_path / "runs" / "submit-test"
    assert (run_dir / "checkpoints" / "checkpoint-4").is_dir() and (run_dir / "final").is_dir()
    assert [m["step"] for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())][:4] == \
        [1, 2, 3, 4]
    events = [e["event"] for e in jobs.job_events(run_dir / "logs")]
    assert events == ["started", "finished"]
    assert "  step 4/4 (100 %)  loss " in proc.stdout  # --wait streamed the run's progress from its metrics
    status = submit_cli("status", str(run_dir))
    assert status.returncode == 0 and "FINISHED" in status.stdout and "0 requeue(s) (max 3)" in status.stdout
    assert "progress: step 4/4 (100 %)  loss " in status.stdout
    short = subprocess.run([sys.executable, "-m", "playpen.cli", "status", str(run_dir)], capture_output=True,
                           text=True, timeout=60)
    assert short.stdout.splitlines()[:4] == status.stdout.splitlines()[:4]  # `playpen status` is the same command
    assert "latest checkpoint-4" in status.stdout and "[playpen] done" in status.stdout
    logs = submit_cli("logs", str(run_dir))
    assert "Job completed successfully" in logs.stdout


def test_local_job_environment_is_clean(tmp_path, monkeypatch):
    seen, folder = submit_probe("local", tmp_path, monkeypatch)
    assert_clean(seen, folder)


def test_job_runs_behind_the_container_exec_line(tmp_path, monkeypatch):
    """apptainer cannot be installed here: a stand-in `apptainer` on PATH records the exec line submitit runs
    and then runs the command after the image itself, so the real job machinery goes through that line."""
    image, argv_log, bin_dir = tmp_path / "playpen.sif", tmp_path / "apptainer-argv", tmp_path / "bin"
    image.write_bytes(b"SIF")
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_log}\n'
        f'while [ "$1" != "{image}" ]; do shift; done\nshift\nexec "$@"\n')
    (bin_dir / "apptainer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin")
    text = (REPO / "playpen/configs/cluster/devcluster.yaml").read_text()
    profile_file = tmp_path / "container.yaml"
    profile_file.write_text(text + f"container:\n  image: {image}\n  binds: [/data/$USER]\n"
                                   f"  python: {sys.executable}\n")
    profile = plan.check_container(load_profile(str(profile_file)))
    monkeypatch.setenv("USER", "alice")
    seen, folder = submit_probe("local", tmp_path, monkeypatch, profile)
    assert_clean(seen, folder)
    argv = argv_log.read_text().splitlines()
    assert argv[:4] == ["exec", "--bind", f"{tmp_path / 'runs'},/data/alice", str(image)]  # no --nv on CPU
    assert argv[4:] == [sys.executable, "-u", "-m", "playpen.submit.start", "-u", "-m", "submitit.core._submit",
                        str(folder)]


def test_train_job_pins_the_run_id():
    job = jobs.TrainJob("sft", "c.yaml", ["run_id=old", "x=1"], "r1", "/nonexistent", max_requeues=1)
    assert job.overrides == ["x=1", "run_id=r1"] and job.requeues == 0


@pytest.mark.slow
def test_meter_runs_as_a_job(tmp_path):
    """`playpen meter` as a submitted job: the YAML's keys are meter's own flags (checked by its parser before
    anything is submitted), the results land under <storage_root>/meter/."""
    proc = submit_cli("meter", "--executor", "local", "--wait", f"storage_root={tmp_path / 'runs'}", "samples=2",
                   "limit=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = Path(printed(proc.stdout, "meter dir"))
    summary = json.loads((folder / "playpen-tiny.summary.json").read_text())
    assert folder.parent == tmp_path / "runs" / "meter" and summary["n"] == 6 and summary["samples_per_prompt"] == 2
    assert (folder / "histogram.png").is_file() and "finished: {'results_dir': " in proc.stdout
    bad = submit_cli("meter", "--executor", "local", f"storage_root={tmp_path / 'runs'}", "sampels=2", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("playpen: error: ")
    assert "unknown key 'sampels'" in bad.stderr and len(list((tmp_path / "runs" / "meter").iterdir())) == 1


def test_a_planted_submission_record_naming_another_process_is_no_running_job(tmp_path, capsys):
    """A submissions.json planted in a (predictable) run folder naming pid 1: the pid is not a playpen job of this
    user, so a real submission is not refused and `status` does not call it RUNNING; this user's own controller
    for that job folder still is."""
    import subprocess
    import sys

    from playpen.submit import plan, watch

    folder = tmp_path / "logs" / "submitit" / "1"
    folder.mkdir(parents=True)
    record = {"kind": "train", "what": "sft", "executor": "local", "profile": "local", "job_ids": ["1"],
              "folder": str(folder), "directory": str(tmp_path), "tasks": 1, "max_requeues": 0}
    (tmp_path / "logs" / "submissions.json").write_text(json.dumps([record]))
    assert watch.job_states(watch.load_submissions(tmp_path)[-1]) == {"1": ("ENDED_WITHOUT_RESULT", "localhost")}
    plan.refuse_concurrent(tmp_path)  # (no "already has job 1 RUNNING")
    assert "job 1: RUNNING" not in watch.render_status(tmp_path)

    controller = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "submitit.local._local",
                                   str(folder)])
    try:
        record["job_ids"] = [str(controller.pid)]
        (tmp_path / "logs" / "submissions.json").write_text(json.dumps([record]))
        cmdline = Path("/proc", str(controller.pid), "cmdline")
        for _ in range(200):  # until the child has exec'd: before that /proc shows pytest's own command line
            if b"submitit.local._local" in cmdline.read_bytes():
                break
            time.sleep(0.05)
        assert watch.local_state(watch.load_submissions(tmp_path)[-1], str(controller.pid)) == "RUNNING"
    finally:
        controller.kill()
        controller.wait()
