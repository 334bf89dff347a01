"""Pytest helper for the local SLURM dev cluster (slurm/devcluster.sh): a real 2-node cluster on this machine.

conftest.py provides the fixture to every test module::

    @pytest.mark.slurm
    def test_something(devcluster, tmp_path):
        # os.environ["SLURM_CONF"] points at the dev cluster for the whole session
        ...

The session fixture starts the cluster when it is not running yet (installing SLURM with apt-get on a fresh
machine); the last test session using a cluster that tests started stops it (sessions hold leases, so parallel
sessions share one cluster). A cluster started by hand (`make devcluster`) stays running. Where the machine
cannot run it (not root, no apt-get and no SLURM installed, no namespaces), the fixture skips, or fails when
CI=true: CI must run these tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "devcluster.sh"
# Partitions of the dev cluster: `debug` is the default (both nodes, MaxNodes=2); `urgent` has a higher priority
# tier on the same nodes and preempts `debug` jobs by requeueing them.
DEFAULT_PARTITION = "debug"
URGENT_PARTITION = "urgent"
NODES = ("node1", "node2")


class DevClusterError(RuntimeError):
    """slurm/devcluster.sh failed; the message carries its output."""


def state_dir() -> Path:
    return Path(os.environ.get("PLAYPEN_DEVCLUSTER_DIR", "/tmp/playpen-devcluster"))


def cluster_env() -> dict[str, str]:
    """The variables a client needs to talk to the dev cluster (what `devcluster.sh env` exports)."""
    return {
        "SLURM_CONF": str(state_dir() / "etc" / "slurm.conf"),
        "PLAYPEN_DEVCLUSTER_DIR": str(state_dir()),
    }


def _run(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def unavailable_reason() -> str | None:
    """Why this machine cannot run the dev cluster, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the SLURM dev cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return (
            "the SLURM dev cluster must be started as root "
            "(run the tests as root, or start it first with: sudo make devcluster)"
        )
    if shutil.which("unshare") is None:
        return "the SLURM dev cluster needs unshare (util-linux) to give each node its own hostname"
    probe = subprocess.run(["unshare", "--uts", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return (
            "the SLURM dev cluster needs namespaces (unshare --uts --mount): "
            "root with CAP_SYS_ADMIN (a VM or a privileged container)"
        )
    have_slurm = all(
        shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        for b in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch", "sacct")
    )
    if not have_slurm and shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install it"
    return None


def is_running() -> bool:
    """True when all daemons of the dev cluster run (`devcluster.sh status` exits 0)."""
    return _run("status", timeout=60).returncode == 0


def start_devcluster(timeout: float = 900) -> dict[str, str]:
    """Start the dev cluster (idempotent; installs SLURM on first use) and return its client environment."""
    proc = _run("start", timeout=timeout)
    if proc.returncode != 0:
        raise DevClusterError(
            f"bash slurm/devcluster.sh start failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return cluster_env()


def stop_devcluster(timeout: float = 120) -> None:
    """Stop every process the dev cluster started (state and logs stay in the state dir)."""
    proc = _run("stop", timeout=timeout)
    if proc.returncode != 0:
        raise DevClusterError(
            f"bash slurm/devcluster.sh stop failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


class _Leases:
    """Which pytest sessions use a cluster that a fixture started.

    Several sessions (engineers on one machine, xdist workers) may share the cluster. Each holds a lease file
    (its pid) while it runs; the last one to finish stops the cluster, and only when a fixture started it
    (marker file): a cluster started by hand (`make devcluster`) is never stopped by the tests. Lease
    bookkeeping is serialised by a lock of its own (devcluster.sh takes $STATE/.lock while it runs).
    """

    def __init__(self) -> None:
        self.dir = state_dir() / "leases"
        self.marker = state_dir() / "run" / "started-by-pytest"
        self.mine = self.dir / str(os.getpid())

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        state_dir().mkdir(parents=True, exist_ok=True)
        with open(state_dir() / ".pytest-lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def others_alive(self) -> bool:
        alive = False
        for lease in self.dir.glob("*"):
            if lease == self.mine:
                continue
            try:
                os.kill(int(lease.name), 0)
                alive = True
            except (ValueError, ProcessLookupError):
                lease.unlink(missing_ok=True)  # a session that died without teardown
            except PermissionError:
                alive = True  # alive, another user's
        return alive


@pytest.fixture(scope="session")
def devcluster() -> Iterator[dict[str, str]]:
    """Session fixture: a running dev cluster; os.environ[SLURM_CONF] points at it while the session lasts.

    Yields the client environment (SLURM_CONF, PLAYPEN_DEVCLUSTER_DIR). Starts the cluster when it is not
    running (root only, installing SLURM on a fresh machine); the last session using a cluster that tests
    started stops it. A cluster started by hand (`make devcluster`) is used as it is, by any user, and left
    running.
    """
    leases: _Leases | None = None
    if is_running() and os.geteuid() != 0:
        pass  # use it; only root can start or stop it, so no lease
    else:
        reason = unavailable_reason()
        if reason is not None:
            if _in_ci():
                pytest.fail(f"CI=true but the SLURM dev cluster cannot run here: {reason}", pytrace=False)
            pytest.skip(reason)
        leases = _Leases()
        with leases.locked():
            if not is_running():
                try:
                    start_devcluster()
                except (DevClusterError, subprocess.TimeoutExpired) as e:
                    pytest.fail(str(e), pytrace=False)
                leases.marker.touch()
            leases.dir.mkdir(exist_ok=True)
            leases.mine.touch()
    env = cluster_env()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if leases is not None:
            with leases.locked():
                leases.mine.unlink(missing_ok=True)
                if leases.marker.exists() and not leases.others_alive():
                    leases.marker.unlink()
                    stop_devcluster()


def wait_until(predicate, timeout: float, what, interval: float = 0.2):
    """Poll predicate until truthy; `what` (a string, or a callable giving the current state) names it on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")
