"""`playpen doctor` and `python -m playpen.submit doctor`: every section checked for real on this machine, each
failure made by taking the feature away (a missing package, an unwritable root, a wrong gloo interface name), the
ranks' reports merged, and the job on the local executor and on the 2-node SLURM dev cluster (gloo)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playpen.cli import main as playpen
from playpen.doctor import collective, features, software, storage
from playpen.doctor.report import FAILED, OK, SKIPPED, WARN, Check, attempt, streaming, table

REPO = Path(__file__).resolve().parents[1]
ALL_FEATURES = [a for f in features.FEATURES for a in ("--skip", f)]


def by_name(checks) -> dict:
    return {c["name"] if isinstance(c, dict) else c.name: c for c in checks}


@pytest.fixture(scope="module")
def local_report(tmp_path_factory):
    """`playpen doctor` once, in this process (every feature tried), with its exit code, screen and JSON."""
    root = tmp_path_factory.mktemp("doctor") / "runs"
    start = time.perf_counter()
    code = playpen(["doctor", "--storage-root", str(root)])
    seconds = time.perf_counter() - start
    [path] = root.glob("doctor/*-local-*/doctor.json")
    print(f"playpen doctor here: {seconds:.1f} s")
    return code, json.loads(path.read_text()), root


@pytest.mark.slow
def test_doctor_checks_every_section_here(local_report, capsys):
    code, report, root = local_report
    assert code == 0 and report["overall"] in (OK, WARN), table([Check(**c) for c in report["checks"]])
    checks = by_name(report["checks"])
    assert {c["section"] for c in report["checks"]} == {"software", "device", "storage", "feature"}
    for name in ("torch", "transformers", "trl", "peft", "clemcore", "submitit", "deepspeed", "bitsandbytes"):
        assert checks[name]["status"] == OK and "(= lock)" in checks[name]["detail"], checks[name]
    assert checks["image"]["status"] == SKIPPED and checks["gpu"]["status"] == SKIPPED  # a CPU venv
    assert "bf16 products" in checks["cpu"]["detail"] or "no bf16 instructions" in checks["cpu"]["detail"]
    assert checks["storage_root"]["data"]["path"] == str(root) and checks["file locks"]["status"] == OK
    assert checks["bf16 matmul"]["data"]["tflops"] > 0
    assert checks["4-bit load"]["status"] == OK and "4-bit playpen-tiny" in checks["4-bit load"]["detail"]
    ds = checks["deepspeed zero-2"]
    assert ds["status"] == OK and ds["data"]["losses"][1] < ds["data"]["losses"][0]
    assert checks["rollout episode"]["status"] == OK and checks["rollout episode"]["data"]["turns"] >= 1
    if checks["vllm"]["status"] == OK:  # (installed: the lock has it)
        assert checks["vllm generation"]["status"] == OK and checks["vllm generation"]["data"]["tokens"] >= 1
    assert "RANK" not in os.environ and "MASTER_PORT" not in os.environ  # DeepSpeed's one-rank group is gone


def test_table_is_one_line_per_check_with_advice_under_problems():
    checks = [Check("storage", "storage_root", FAILED, "storage root /x is not writable", "set storage_root"),
              Check("feature", "bf16 matmul", OK, "1 TFLOP/s", seconds=2.5)]
    text = table(checks)
    assert "FAILED   storage root /x is not writable" in text and "→ set storage_root" in text
    assert "(2.5 s)" in text and text.splitlines()[-1] == "1 OK, 1 FAILED; overall FAILED"


def test_doctor_prints_each_row_as_its_check_ends(tmp_path, capsys):
    """The screen, each time a check ends: the header at once, every earlier row, none of the later ones; at the
    end the same table as the report makes."""
    screens = []
    with streaming(lambda check: screens.append(capsys.readouterr().out)):
        code = playpen(["doctor", "--storage-root", str(tmp_path / "runs"), *ALL_FEATURES])
    [path] = (tmp_path / "runs").glob("doctor/*-local-*/doctor.json")
    checks = [Check(**c) for c in json.loads(path.read_text())["checks"]]
    assert code == 0 and len(screens) == len(checks)
    assert screens[0].startswith("section ") and "python" not in screens[0]
    for before, check in zip(screens[1:], checks):  # a row is on screen before the next check ends
        assert f"  {check.name}  " in before or f"  {check.name} " in before, (check.name, before)
    whole = "".join(screens) + capsys.readouterr().out
    assert whole.startswith(table(checks) + "\ndoctor: "), whole


def test_a_crashing_check_is_one_failed_line_and_prints_nothing(capfd):
    def crash():
        print("library noise")
        raise RuntimeError("CUDA error: no kernel image is available\nmore lines")

    check = attempt("feature", "x", crash)
    assert check.status == FAILED and check.detail == "RuntimeError: CUDA error: no kernel image is available"
    assert check.data["output"] == ["library noise"] and capfd.readouterr().out == ""


def test_missing_packages_fail_with_the_pip_line(monkeypatch):
    real = software.installed_version
    monkeypatch.setattr(software, "installed_version",
                        lambda name: None if name in ("bitsandbytes", "deepspeed") else real(name))
    checks = by_name(software.software_checks())
    assert checks["bitsandbytes"].status == FAILED
    assert checks["bitsandbytes"].advice == "pip install bitsandbytes==0.50.2"
    found = by_name(features.feature_checks(skip=("bf16", "rollout", "vllm")))
    assert found["4-bit load"].status == FAILED and "bitsandbytes is not installed" in found["4-bit load"].detail
    assert "pip install bitsandbytes==0.50.2" in found["4-bit load"].advice
    assert found["deepspeed zero-2"].status == FAILED and "deepspeed==0.19.8" in found["deepspeed zero-2"].advice
    assert found["bf16 matmul"].status == SKIPPED


def test_a_version_other_than_the_lock_is_named(monkeypatch):
    real = software.installed_version
    monkeypatch.setattr(software, "installed_version", lambda name: "1.15.9" if name == "trl" else real(name))
    trl = by_name(software.software_checks())["trl"]
    assert trl.status == WARN and trl.detail == "1.15.9, lock pins 1.16.0" and "trl==1.16.0" in trl.advice


def test_unwritable_storage_root_and_scratch_fail(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("HF_HOME", str(blocker / "hf"))
    checks = by_name(storage.storage_checks(str(blocker / "runs")))
    assert checks["storage_root"].status == FAILED and "cannot be created" in checks["storage_root"].detail
    assert "file locks" not in checks  # nowhere to try them
    assert checks["HF_HOME"].status == FAILED and "is a file" in checks["HF_HOME"].detail
    code = playpen(["doctor", "--storage-root", str(blocker / "runs"), *ALL_FEATURES])
    out = capsys.readouterr().out
    assert code == 1 and "report: not written (the storage root is not writable)" in out


def test_flock_that_does_not_exclude_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(storage.fcntl, "flock", lambda fd, op: None)  # a filesystem that ignores locks
    check = attempt("storage", "file locks", lambda: storage.flock_works(tmp_path))
    assert check.status == FAILED and "does not exclude" in check.detail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gloo_rendezvous_and_all_reduce_here_and_a_wrong_interface(monkeypatch):
    import torch.distributed as dist

    for name, value in {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nope0")
    bad = attempt("distributed", "rendezvous", collective.rendezvous(False, 10))
    assert bad.status == FAILED and "Unable to find address for: nope0" in bad.detail
    assert "GLOO_SOCKET_IFNAME=nope0" in bad.advice and "lo" in bad.advice.split("here: ")[1]
    assert not dist.is_initialized()
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    try:
        good = attempt("distributed", "rendezvous", collective.rendezvous(False, 10))
        assert good.status == OK and good.data["backend"] == "gloo"
        reduced = attempt("distributed", "all-reduce", collective.all_reduce_bandwidth)
        assert reduced.status == OK and [r["bytes"] for r in reduced.data["sizes"]] == [2**20, 2**24]
    finally:
        dist.destroy_process_group()


def rank_report(rank: int, host: str, status: str = OK) -> dict:
    checks = [{"section": "storage", "name": "HF_HOME", "status": status, "detail": "x", "advice": "",
               "seconds": 0.0, "data": {}}]
    return {"rank": rank, "local_rank": 0, "host": host, "device": "cpu", "start_latency_s": 1.5 + rank,
            "seconds": 3.0, "checks": checks}


def test_merge_names_missing_ranks_and_what_differs_between_nodes():
    merged = by_name(collective.merge([rank_report(0, "node1"), rank_report(1, "node2", FAILED)], 3, 0.0))
    assert merged["shared storage"].status == FAILED and "[2]" in merged["shared storage"].detail
    assert merged["HF_HOME (rank 1, node2)"].status == FAILED and merged["HF_HOME"].status == OK
    assert "2 rank(s) on 2 node(s)" in merged["ranks"].detail and "2.5 s" in merged["start latency"].detail


def run_submit(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playpen.submit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_submit_doctor_dry_run_and_bad_input(tmp_path):
    dry = run_submit("doctor", "--nodes", "2", "--cluster", "devcluster", "--dry-run",
                     "--storage-root", str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --nodes=2" in dry.stdout and "#SBATCH --time=15" in dry.stdout
    assert "#SBATCH --job-name=playpen-doctor" in dry.stdout and not (tmp_path / "doctor").exists()
    bad = run_submit("doctor", "--dry-run", "trainer.max_steps=3")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "no key=value" in bad.stderr


@pytest.mark.slow
def test_submit_doctor_as_a_local_job(tmp_path):
    proc = run_submit("doctor", "--executor", "local", "--wait", "--storage-root", str(tmp_path), *ALL_FEATURES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [path] = tmp_path.glob("doctor/*-job-*/doctor.json")
    report = json.loads(path.read_text())
    checks = by_name(report["checks"])
    assert checks["rendezvous"]["status"] == SKIPPED and checks["start latency"]["status"] == OK
    assert report["world_size"] == 1 and "rendezvous" in proc.stdout and f"report: {path}" in proc.stdout


@pytest.mark.slurm
@pytest.mark.slow
def test_submit_doctor_on_two_slurm_nodes_and_with_a_wrong_interface(devcluster, tmp_path):
    """Two jobs at once: the whole doctor on 2 nodes (DeepSpeed's step over the job's gloo group), and one whose
    profile names an interface no node has (the rendezvous fails in one line on both ranks)."""
    profile = (REPO / "playpen" / "configs" / "cluster" / "devcluster.yaml").read_text()
    bad_profile = tmp_path / "badnet.yaml"
    bad_profile.write_text(profile + "nccl:\n  GLOO_SOCKET_IFNAME: nope0\n")
    started = time.monotonic()
    good = subprocess.Popen([sys.executable, "-m", "playpen.submit", "doctor", "--cluster", "devcluster",
                             "--nodes", "2", "--wait", "--storage-root", str(tmp_path / "good")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bad = run_submit("doctor", "--cluster", str(bad_profile), "--nodes", "2", "--wait", "--timeout", "20",
                     "--storage-root", str(tmp_path / "bad"), *ALL_FEATURES, timeout=300)
    out, _ = good.communicate(timeout=420)
    print(f"2-node doctor: submit → CLI exit {time.monotonic() - started:.1f} s")
    assert good.returncode == 0, out
    [path] = (tmp_path / "good").glob("doctor/*-job-*/doctor.json")
    report = json.loads(path.read_text())
    checks = by_name(report["checks"])
    print(checks["all-reduce"]["detail"], "|", checks["start latency"]["detail"], "|",
          checks["deepspeed zero-2"]["detail"])
    assert report["world_size"] == 2 and checks["rendezvous"]["status"] == OK
    assert sorted(checks["ranks"]["data"]["hosts"]) == ["node1", "node2"]
    assert checks["all-reduce"]["data"]["sizes"][-1]["busbw_gbs"] > 0
    assert checks["shared storage"]["status"] == OK
    assert checks["deepspeed zero-2"]["status"] == OK and checks["deepspeed zero-2"]["data"]["world_size"] == 2
    assert bad.returncode == 1, bad.stdout + bad.stderr
    [path] = (tmp_path / "bad").glob("doctor/*-job-*/doctor.json")
    failed = by_name(json.loads(path.read_text())["checks"])["rendezvous"]
    assert failed["status"] == FAILED and "nope0" in failed["detail"] and "GLOO_SOCKET_IFNAME" in failed["advice"]
    assert "FAILED" in bad.stdout
