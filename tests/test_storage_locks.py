"""playpen.storage.locks: one process per run, results, meter or tournament-match folder (exclusive_folder)."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.storage import exclusive_folder
from tests.helpers import REPO, refused, run_argv


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


def test_second_training_of_a_run_refuses(capsys, clean_cwd, run_inputs):
    run = clean_cwd / "runs" / "sft" / "try2"
    with Holder(run) as other:
        err = refused(capsys, run_argv("sft", clean_cwd / "runs", run_inputs), run)
    assert err == (f"playpen: error: run folder {run} is in use by another playpen train ({other.where}); "
                   f"wait for it to end, or pass run_id=<new id> to start a separate run")


def test_second_eval_into_a_results_folder_refuses(capsys, clean_cwd):
    results = clean_cwd / "res"
    results.mkdir()
    (results / "playpen-tiny.val.json").write_text("{}")  # what an earlier eval left
    with Holder(results) as other:
        err = refused(capsys, ["eval", "playpen-tiny", "-g", "wordle", "--instances", "1", "-L", "8",
                               "-r", str(results)], results)
    assert err == (f"playpen: error: results folder {results} is in use by another playpen eval ({other.where}); "
                   f"wait for it to end, or pick another -r")


def test_two_meters_into_one_folder(capsys, stocked_cwd):
    """The second `playpen meter` into an -o that one holds stops in one line, as a second eval into one -r does."""
    from playpen.storage import exclusive_folder

    (stocked_cwd / "p.jsonl").write_text('{"prompt": "hi"}\n')
    with exclusive_folder(stocked_cwd / "out", "held", "-"):
        err = refused(capsys, ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl",
                               "-o", "out"], stocked_cwd)
    assert "meter folder out is in use by another playpen meter" in err, err


def test_one_process_per_tournament_match(tmp_path):
    """Two processes on one match would write the same episode folders: the second stops in one line."""
    from playpen.config import load_config
    from playpen.debate_tools import tournament
    from playpen.storage import exclusive_folder

    cfg = load_config(tournament.TournamentConfig, "debate/tournament_tiny",
                      [f"output_dir={tmp_path}"])
    seating = tournament.matches(cfg)[0]
    marker = tournament._played_marker(cfg, seating)
    with exclusive_folder(marker.parent, "held", "-", lock_file=f".{marker.stem}.lock"):
        with pytest.raises(PlaypenError, match=rf"^match {' vs '.join(seating)} of tournament tiny is being "
                                               rf"played by another process \(pid \d+ on"):
            tournament.play_match(cfg, seating, {})
    assert not marker.exists()


def test_remove_abandoned_takes_only_this_users_unheld_private_folders(tmp_path):
    """What a killed process left goes; a live process's folder, a link (its target untouched), a file, another
    user's folder, one just made (no lock yet) and other names stay."""
    import os
    import time

    from playpen.storage import LOCK_FILE, STALE_TEMP_S, private_folder, remove_abandoned

    parent = tmp_path / "res"
    parent.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "thesis.tex").write_bytes(b"the only copy")
    dead = parent / ".playing.dead"
    dead.mkdir()
    (dead / LOCK_FILE).write_text("pid 1 on elsewhere".ljust(199) + "\n")  # as a SIGKILL leaves it: no holder
    (dead / "mock" / "wordle").mkdir(parents=True)
    old = parent / ".tables.old"  # a killed run of a playpen whose private folders held no lock
    old.mkdir()
    os.utime(old, (time.time() - STALE_TEMP_S - 60,) * 2)
    young = parent / ".tables.young"  # made a moment ago: its maker takes the lock next
    young.mkdir()
    (parent / ".playing.link").symlink_to(outside)
    (parent / ".playing.file").write_text("x")
    if os.getuid() == 0:  # (only root can give a folder to another user) old and unlocked, but not ours
        theirs = parent / ".playing.theirs"
        theirs.mkdir()
        os.chown(theirs, 12345, 12345)
        os.utime(theirs, (time.time() - STALE_TEMP_S - 60,) * 2)
    (parent / "mock").mkdir()
    with Holder(parent / ".playing.live"), private_folder(parent, ".tables.") as held:
        removed = remove_abandoned(parent, (".playing.", ".tables."))
        assert sorted(p.name for p in removed) == [".playing.dead", ".tables.old"]
        stays = {".playing.link", ".playing.file", ".playing.live", ".tables.young", "mock", held.name}
        assert {p.name for p in parent.iterdir()} == stays | ({".playing.theirs"} if os.getuid() == 0 else set())
    assert sorted(os.listdir(outside)) == ["thesis.tex"] and (outside / "thesis.tex").read_bytes() == b"the only copy"
    assert not held.exists()  # a private folder is removed when its block ends
