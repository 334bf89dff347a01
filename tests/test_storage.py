"""playpen.storage, the one way playpen writes under a folder on shared storage, and every writer that uses it.

A neighbour with write access to the storage root plants a symbolic link or a hard link to a file of yours
(`victim`) at a name playpen writes (a lock, a log, a table, metrics, the final model, meter outputs and their
old temporary names, tournament and sweep files, a folder on the way); afterwards the victim is byte for byte what
it was, and playpen either replaced the name with a file of its own or stopped in one line. (The readers' side,
FIFOs and devices where a file is read, is tests/test_reading.py's.) Nothing here loads a model; the eval cases
play clemcore's `mock` (a second each)."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import clemcore  # noqa: F401  (importing it opens ./clembench.log: done here, outside the folders compared)
import pytest

from playpen.cli import main
from playpen.errors import PlaypenError
from playpen.model_registry import playpen_home
from playpen.storage import (LOCK_FILE, STALE_TEMP_S, RunDir, append_jsonl, atomic_write_json, atomic_write_text,
                             check_location, check_output_file, exclusive_folder, make_folder, open_append,
                             private_folder, read_jsonl, replace_folder, resolve_storage_root, write_output)

VICTIM = b"\\documentclass{thesis} the only copy\n"
LINKS = ("symlink", "hardlink")


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of yours outside every folder playpen writes."""
    path = tmp_path / "elsewhere" / "thesis.tex"
    path.parent.mkdir()
    path.write_bytes(VICTIM)
    return path


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A working folder, a home without key.json, the packaged models where they are."""
    monkeypatch.setenv("PLAYPEN_HOME", str(playpen_home()))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("PLAYPEN_STORAGE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def plant(at: Path, victim: Path, kind: str) -> Path:
    """What the neighbour does: `at` becomes a symbolic or a hard link to the victim."""
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        at.symlink_to(victim)
    else:
        os.link(victim, at)
    return at


def own_file(path: Path) -> bool:
    """`path` is now a regular file of its own (the planted name was replaced, not written through)."""
    info = os.lstat(path)
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("playpen: error: ") and "\n" not in err, err
    return err


# ---------------------------------------------------------------- the primitives

@pytest.mark.parametrize("kind", LINKS)
def test_an_atomic_write_replaces_a_planted_link(tmp_path, victim, kind):
    target = plant(tmp_path / "out" / "val.json", victim, kind)
    atomic_write_json(target, {"ok": 1})
    assert victim.read_bytes() == VICTIM and own_file(target) and json.loads(target.read_text()) == {"ok": 1}


def test_an_atomic_write_never_enters_a_linked_folder(tmp_path, victim):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "final").symlink_to(victim.parent)
    with pytest.raises(PlaypenError, match=r"final is a symbolic link \(to .*elsewhere\)"):
        atomic_write_text(tmp_path / "run" / "final" / "thesis.tex", "overwritten")
    with pytest.raises(PlaypenError, match=r"run/final is a symbolic link"):  # a level further up, with root
        atomic_write_text(tmp_path / "run" / "final" / "sub" / "x.json", "{}", root=tmp_path / "run")
    assert victim.read_bytes() == VICTIM and sorted(os.listdir(victim.parent)) == ["thesis.tex"]


def test_make_folder_checks_every_level_below_its_root(tmp_path, victim):
    root = tmp_path / "sweep"
    assert make_folder(root / "cells" / "a@step1" / "wordle", root=root).is_dir()
    (root / "plots").symlink_to(victim.parent)
    with pytest.raises(PlaypenError, match="plots is a symbolic link"):
        make_folder(root / "plots" / "x", root=root)
    (root / "file").write_text("")
    with pytest.raises(PlaypenError, match="file is a file, not a folder"):
        make_folder(root / "file" / "x", root=root)
    with pytest.raises(PlaypenError, match="is not inside"):
        make_folder(tmp_path / "other", root=root)


@pytest.mark.parametrize("kind", LINKS)
def test_appending_refuses_a_planted_link(tmp_path, victim, kind):
    target = plant(tmp_path / "run" / "metrics.jsonl", victim, kind)
    reason = "is a symbolic link" if kind == "symlink" else "has 2 hard links"
    with pytest.raises(PlaypenError, match=reason):
        append_jsonl(target, {"step": 1})
    assert victim.read_bytes() == VICTIM


def test_appending_refuses_a_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "log")
    with pytest.raises(PlaypenError, match="is not a regular file"):
        os.close(open_append(tmp_path / "log"))


@pytest.mark.parametrize("kind", LINKS)
def test_a_planted_lock_file_is_refused_and_never_truncated(tmp_path, victim, kind):
    plant(tmp_path / "res" / ".playpen.lock", victim, kind)
    with pytest.raises(PlaypenError, match="lock file .*(symbolic link|2 hard links)"):
        with exclusive_folder(tmp_path / "res", "in use", "-"):
            pass
    assert victim.read_bytes() == VICTIM


def test_a_lock_file_holding_anything_else_is_not_overwritten(tmp_path):
    lock = tmp_path / "res" / ".playpen.lock"
    lock.parent.mkdir()
    lock.write_text("someone's notes\n")
    with pytest.raises(PlaypenError, match="holds something other than playpen's lock record"):
        with exclusive_folder(tmp_path / "res", "in use", "-"):
            pass
    assert lock.read_text() == "someone's notes\n"
    lock.write_text("pid 12 on oldhost\n")  # an earlier playpen's record: taken over, whole
    with exclusive_folder(tmp_path / "res", "in use", "-"):
        assert lock.read_text().strip() == f"pid {os.getpid()} on {os.uname().nodename.split('.')[0]}"


def test_temporary_files_a_killed_writer_left_are_removed(tmp_path):
    stale, fresh = tmp_path / ".out.jsonl.abc.tmp", tmp_path / ".out.jsonl.def.tmp"
    for path in (stale, fresh):
        path.write_text("half")
    os.utime(stale, (time.time() - STALE_TEMP_S - 5,) * 2)
    atomic_write_text(tmp_path / "out.jsonl", "{}\n")
    assert not stale.exists() and fresh.exists()  # (a fresh one may be another writer's, still writing)


def test_what_a_library_writes_privately_is_moved_into_place_readable(tmp_path, victim):
    old = os.umask(0o002)
    try:
        root = tmp_path / "run"
        plant(root / "final" / "adapter_model.safetensors", victim, "symlink")  # planted inside the old final/
        with private_folder(root, ".x.") as staged:
            assert stat.S_IMODE(staged.stat().st_mode) == 0o700
            (staged / "adapter_model.safetensors").write_bytes(b"weights")
            os.chmod(staged / "adapter_model.safetensors", 0o600)  # as safetensors writes it
            replace_folder(staged, root / "final", root)
        final = root / "final"
        assert own_file(final / "adapter_model.safetensors") and victim.read_bytes() == VICTIM
        assert stat.S_IMODE(final.stat().st_mode) == 0o775
        assert stat.S_IMODE((final / "adapter_model.safetensors").stat().st_mode) == 0o664
        assert not [p for p in root.iterdir() if p.name.startswith(".x.")]
    finally:
        os.umask(old)


def test_a_path_that_is_not_utf8_is_refused_before_anything_runs():
    with pytest.raises(PlaypenError, match="bytes that are not UTF-8"):
        check_location(os.fsdecode(b"res-\xff"), "-r")


# ---------------------------------------------------------------- eval: the lock, clembench.log, the tables

EVAL = ["eval", "mock", "-g", "wordle", "--instances", "1", "-r", "res"]


@pytest.mark.parametrize("kind", LINKS)
@pytest.mark.parametrize("name", [".playpen.lock", "clembench.log"])
def test_eval_refuses_a_planted_lock_or_log(capsys, work, victim, kind, name):
    plant(work / "res" / name, victim, kind)
    err = one_line(capsys, EVAL)
    assert name in err and ("symbolic link" in err or "2 hard links" in err), err
    assert victim.read_bytes() == VICTIM and not (work / "res" / "mock").exists()


@pytest.mark.parametrize("kind", LINKS)
def test_eval_replaces_planted_tables_and_val_json(capsys, work, victim, kind):
    names = ("raw.csv", "results.csv", "results.html", "mock.val.json")
    for name in names:
        plant(work / "res" / name, victim, kind)
    (work / "res" / ".playing").symlink_to(victim.parent)  # the old fixed staging name
    assert main(EVAL) == 0
    assert victim.read_bytes() == VICTIM and sorted(os.listdir(victim.parent)) == ["thesis.tex"]
    assert all(own_file(work / "res" / name) for name in names)
    assert "mock" in (work / "res" / "results.csv").read_text()
    assert not [p for p in (work / "res").iterdir() if p.name.startswith((".playing", ".tables"))
                and not p.is_symlink()]
    assert os.readlink(work / "res" / ".playing") == str(victim.parent)  # a link playpen did not make stays


def test_eval_never_enters_a_linked_game_folder(capsys, work, victim):
    (work / "res" / "mock").mkdir(parents=True)
    (work / "res" / "mock" / "wordle").symlink_to(victim.parent)
    err = one_line(capsys, EVAL)
    assert "game folder res/mock/wordle is a symbolic link" in err, err
    assert sorted(os.listdir(victim.parent)) == ["thesis.tex"]


# ---------------------------------------------------------------- a training run: metrics, curve, final/

def _metrics_row(run: Path):
    from playpen.train.metrics import metrics_callback

    callback = metrics_callback(run / "metrics.jsonl", run / "logs")
    state = SimpleNamespace(global_step=1, max_steps=3, is_world_process_zero=True)
    callback.on_log(SimpleNamespace(output_dir=str(run / "checkpoints")), state, None, logs={"loss": 0.5})


@pytest.mark.parametrize("kind", LINKS)
def test_metrics_are_never_appended_through_a_link(tmp_path, victim, kind):
    run = tmp_path / "runs" / "x" / "r1"
    plant(run / "metrics.jsonl", victim, kind)
    with pytest.raises(PlaypenError, match="metrics.jsonl"):
        _metrics_row(run)
    assert victim.read_bytes() == VICTIM


@pytest.mark.parametrize("kind", LINKS)
def test_the_learning_curve_replaces_a_planted_link(tmp_path, victim, kind):
    from playpen.train.metrics import plot_curve

    run = tmp_path / "run"
    _metrics_row(run)
    plant(run / ".learning_curve.png.tmp.png", victim, kind)  # the old fixed temporary name
    plant(run / "learning_curve.png", victim, "symlink" if kind == "hardlink" else "hardlink")
    plot_curve(run / "metrics.jsonl", run / "learning_curve.png")
    assert victim.read_bytes() == VICTIM and own_file(run / "learning_curve.png")


class _Trainer:
    """What registration.finish needs of a trainer: save_model (an adapter, written 0600 as safetensors does)."""

    state = SimpleNamespace(global_step=3)

    def save_model(self, folder: str) -> None:
        Path(folder, "adapter_config.json").write_text(json.dumps({"r": 4}))
        Path(folder, "adapter_model.safetensors").write_bytes(b"weights")
        os.chmod(Path(folder, "adapter_model.safetensors"), 0o600)


def _finish(run_path: Path) -> None:
    from playpen.model_registry import resolve_model
    from playpen.storage import RunDir
    from playpen.train.runner import finish

    run = RunDir(run_path)
    tokenizer = SimpleNamespace(save_pretrained=lambda folder: Path(folder, "tokenizer.json").write_text("{}"))
    session = SimpleNamespace(run=run, is_main=True, tokenizer=tokenizer, final_files={"extra.json": {"a": 1}},
                              spec=resolve_model("playpen-tiny"), cfg=SimpleNamespace(
                                  model="playpen-tiny", experiment=run_path.parent.name, quantization=None,
                                  register=True),
                              recipe=SimpleNamespace(name="sft", next_step=None, final_step=lambda s, t: 3))
    finish(session, _Trainer())


@pytest.mark.parametrize("kind", LINKS)
def test_the_final_model_is_written_whole_into_a_real_folder(tmp_path, victim, kind, capsys):
    run = tmp_path / "runs" / "x" / "r1"
    for name in ("adapter_model.safetensors", "tokenizer.json", "extra.json"):
        plant(run / "final" / name, victim, kind)  # planted inside an earlier final/
    plant(run / "model_registry.json", victim, "symlink")
    plant(run / "finished.json", victim, "hardlink")
    old = os.umask(0o002)
    try:
        _finish(run)
    finally:
        os.umask(old)
    final = run / "final"
    assert victim.read_bytes() == VICTIM and not final.is_symlink()
    assert all(own_file(final / n) for n in ("adapter_model.safetensors", "tokenizer.json", "extra.json"))
    assert stat.S_IMODE((final / "adapter_model.safetensors").stat().st_mode) == 0o664  # teammates load it
    registered = json.loads((run / "model_registry.json").read_text())
    assert registered[-1]["model_name"] == "x-r1" and registered[-1]["model_config"]["peft_model"] == str(final)
    assert own_file(run / "finished.json") and not (run / ".final.partial").exists()


def test_the_final_model_replaces_a_linked_final_folder(tmp_path, victim):
    run = tmp_path / "runs" / "x" / "r1"
    run.mkdir(parents=True)
    (run / "final").symlink_to(victim.parent)
    _finish(run)
    assert (run / "final").is_dir() and not (run / "final").is_symlink()
    assert sorted(os.listdir(victim.parent)) == ["thesis.tex"] and victim.read_bytes() == VICTIM


# ---------------------------------------------------------------- meter: its outputs and old temporary names

@pytest.mark.parametrize("kind", LINKS)
def test_meter_outputs_replace_planted_links(tmp_path, victim, kind):
    from playpen.reward.meter import _write_model, plot_histogram

    folder = tmp_path / "meter"
    names = ["m.completions.csv", ".m.completions.csv.tmp", "m.summary.json", "m.labelled.jsonl", "histogram.png",
             ".histogram.png.tmp.png"]
    for name in names:
        plant(folder / name, victim, kind)
    prompts = [[{"role": "user", "content": "hi"}]]
    summary = {"n": 2, "mean": 0.5, "stderr": 0.1}
    _write_model(folder, "m", prompts, [(0, 0, "a"), (0, 1, "b")], [0.2, 0.8], summary)
    plot_histogram([("m", [0.2, 0.8], summary)], folder / "histogram.png", "t")
    assert victim.read_bytes() == VICTIM
    assert all(own_file(folder / n) for n in names if not n.startswith("."))
    assert (folder / "m.completions.csv").read_text().splitlines()[0] == "prompt_index,sample,prompt,completion,score"


# ---------------------------------------------------------------- tournament: played/, records/, results.md

def _tournament(work: Path, **overrides):
    from playpen.config import load_config
    from playpen.debate_tools.tournament import TournamentConfig

    values = {"name": "t", "debaters": ["programmatic"], "judges": ["programmatic"], "self_play": True,
              "max_instances": 1, "output_dir": str(work / "tournaments"), **overrides}
    return load_config(TournamentConfig, None, [f"{k}={json.dumps(v)}" for k, v in values.items()])


@pytest.mark.parametrize("name", ["played", "records"])
def test_a_tournament_never_enters_a_linked_folder(work, victim, name):
    from playpen.debate_tools import tournament

    (victim.parent / "scores.json").write_text("{}")  # a stale-looking file outside: never deleted
    plant(work / "tournaments" / "t" / name, victim.parent, "symlink")
    cfg = _tournament(work)
    with pytest.raises(PlaypenError, match=f"t/{name} is a symbolic link"):
        tournament.play_match(cfg, tournament.matches(cfg)[0], {})
    assert sorted(os.listdir(victim.parent)) == ["scores.json", "thesis.tex"]


@pytest.mark.parametrize("kind", LINKS)
def test_a_tournament_replaces_planted_files(work, victim, kind):
    from playpen.debate_tools import tournament

    folder = work / "tournaments" / "t"
    for name in ("results.md", "matches.json", "heatmap.png", "played/programmatic__programmatic__programmatic.json"):
        plant(folder / name, victim, kind)
    result = tournament.run(_tournament(work), log=lambda m: None)
    assert result["judges"]["programmatic"]["episodes"] == 1
    assert victim.read_bytes() == VICTIM and own_file(folder / "results.md") and own_file(folder / "heatmap.png")
    assert own_file(folder / "played" / "programmatic__programmatic__programmatic.json")


# ---------------------------------------------------------------- sweep: cells/, plots/

def _sweep(work: Path):
    from playpen.eval.sweep import load_sweep

    path = work / "s.yaml"
    path.write_text(json.dumps({"name": "s", "models": ["mock"], "games": ["wordle"], "max_instances": 1,
                                "output_dir": str(work / "sweep")}))
    sweep = load_sweep(path)
    sweep.write_manifest()
    return sweep


def test_a_sweep_cell_never_enters_a_linked_folder(work, victim):
    from playpen.eval.sweep import run_cell

    sweep = _sweep(work)
    (sweep.dir / "cells").symlink_to(victim.parent)
    with pytest.raises(PlaypenError, match="sweep/cells is a symbolic link"):
        run_cell(sweep.dir, sweep.cells[0])
    assert sorted(os.listdir(victim.parent)) == ["thesis.tex"]


@pytest.mark.parametrize("kind", LINKS)
def test_a_sweep_replaces_planted_files_and_refuses_linked_plots(work, victim, kind):
    from playpen.eval.sweep import aggregate, run_cell

    sweep = _sweep(work)
    cell = sweep.cells[0]
    for name in ("state.json", "result.json"):
        plant(sweep.dir / "cells" / cell.key / name, victim, kind)
    plant(sweep.dir / "sweep.csv", victim, kind)
    run_cell(sweep.dir, cell)
    aggregate(sweep.dir)
    assert victim.read_bytes() == VICTIM and own_file(sweep.dir / "sweep.csv")
    assert own_file(sweep.dir / "cells" / cell.key / "result.json")
    (sweep.dir / "plots").rename(sweep.dir / "plots.old")
    (sweep.dir / "plots").symlink_to(victim.parent)
    with pytest.raises(PlaypenError, match="plots is a symbolic link"):
        aggregate(sweep.dir)
    assert sorted(os.listdir(victim.parent)) == ["thesis.tex"]


def test_jsonl_rows_split_at_newlines_only(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"text": "a\u2028b\u0085c"}, ensure_ascii=False) + "\n")
    assert read_jsonl(path) == [{"text": "a\u2028b\u0085c"}]


# ---------------------------------------------------------------- run folders and the storage root

def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_run_dir_layout_and_atomic_writes(tmp_path):
    run = RunDir.for_experiment(tmp_path, "exp", "r1").create()
    assert [p.name for p in (run.checkpoints, run.records, run.logs)] == ["checkpoints", "playpen-records", "logs"]
    atomic_write_json(run.path / "a.json", {"x": 1})
    assert json.loads((run.path / "a.json").read_text()) == {"x": 1}
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]


def test_storage_root_not_writable(tmp_path):
    blocker = write(tmp_path / "file", "")
    with pytest.raises(PlaypenError, match="storage root .* cannot be created"):
        resolve_storage_root(blocker / "runs")


def test_a_link_inside_a_run_folder_is_not_followed(tmp_path):
    from playpen.storage import RunDir

    run = RunDir(tmp_path / "runs" / "x" / "r1")
    run.path.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    run.checkpoints.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PlaypenError, match=r"run folder .*/r1/checkpoints is a symbolic link"):
        run.create()


def test_atomic_writes_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        os.umask(0o077)
        atomic_write_text(tmp_path / "b.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o600


# ---------------------------------------------------------------- what the libraries write by name

NEIGHBOUR_UID = 65534  # nobody: a folder the neighbour made at a predictable name (chown: the tests run as root)


def test_a_run_folder_is_closed_to_others_writes_under_a_group_umask(tmp_path):
    run = RunDir(tmp_path / "runs" / "x" / "r1")
    old = os.umask(0o002)
    try:
        run.create()
    finally:
        os.umask(old)
    for folder in (run.path, run.checkpoints, run.records, run.logs):  # the Trainer writes README.md, checkpoint-N
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder  # teammates read; nobody else adds a name


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user's needs root")
def test_a_run_folder_someone_else_made_is_refused(tmp_path, victim):
    run = RunDir(tmp_path / "runs" / "x" / "r1")
    plant(run.checkpoints / "README.md", victim, "symlink")  # the model card's name, planted before the run
    os.chown(run.path, NEIGHBOUR_UID, -1)
    with pytest.raises(PlaypenError, match=r"run folder .*/r1 belongs to another user \(uid 65534\)"):
        run.create()
    assert victim.read_bytes() == VICTIM


@pytest.mark.parametrize("kind", LINKS)
def test_a_link_planted_in_a_run_folder_of_ones_own_is_refused(tmp_path, victim, kind):
    run = RunDir(tmp_path / "runs" / "x" / "r1")
    plant(run.checkpoints / "README.md", victim, kind)  # while the folder was open to the group
    with pytest.raises(PlaypenError, match=r"checkpoints/README.md is (a symbolic link|a file playpen did not make)"):
        run.create()
    assert victim.read_bytes() == VICTIM


def test_clemcore_rescores_into_place_never_through_a_replanted_link(capsys, work, victim, monkeypatch):
    """`--skip-gameplay` rescores the records in place: a neighbour plants scores.json again after playpen
    removed the old ones (here: at the last moment before clemcore scores), which clemcore would write through."""
    from playpen.eval import evaluation

    assert main(EVAL) == 0
    listed = evaluation.interactions_files

    def replant(game_dir, finished=False):
        found = listed(game_dir, finished)
        for path in found:
            if not os.path.lexists(path.parent / "scores.json"):
                plant(path.parent / "scores.json", victim, "symlink")
        return found

    monkeypatch.setattr(evaluation, "interactions_files", replant)
    assert main([*EVAL, "--skip-gameplay"]) == 0
    scores = list((work / "res" / "mock").rglob("scores.json"))
    assert scores and all(own_file(p) for p in scores) and victim.read_bytes() == VICTIM
    assert json.loads(scores[0].read_text())["episode scores"]


# ---------------------------------------------------------------- locks: every lock is the storage lock

@pytest.mark.parametrize("kind", LINKS)
def test_the_model_build_lock_is_never_truncated_through_a_link(capsys, tmp_path, victim, kind):
    from playpen.models.tiny import ensure_tiny_model

    out = tmp_path / "models" / "playpen-tiny"
    plant(out.parent / ".playpen-tiny.lock", victim, kind)
    with pytest.raises(PlaypenError, match=r"lock file .*\.playpen-tiny\.lock (is a symbolic link|has 2 hard links)"):
        ensure_tiny_model(out)
    assert victim.read_bytes() == VICTIM and not out.exists()


def test_a_held_build_lock_is_waited_for_with_the_holders_pid(tmp_path):
    class Waited(Exception):
        pass

    def waiting(holder: str):
        raise Waited(holder)  # (the lock would be waited for here; the test only needs to see it said)

    with exclusive_folder(tmp_path, "in use", "wait", lock_file=".m.lock"):
        with pytest.raises(Waited, match=rf"pid {os.getpid()} on "):
            with exclusive_folder(tmp_path, "in use", "wait", lock_file=".m.lock", waiting=waiting):
                pass


def test_a_socket_at_a_lock_file_is_named(tmp_path):
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / LOCK_FILE))
    try:
        with pytest.raises(PlaypenError, match=r"lock file .*\.playpen\.lock is not a regular file"):
            with exclusive_folder(tmp_path, "in use", "wait"):
                pass
    finally:
        server.close()


def test_doctor_beside_a_held_lock_neither_fails_nor_removes_it(tmp_path):
    from playpen.doctor.storage import flock_works

    held = tmp_path / ".playpen-doctor.lock"
    fd = open_append(held)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        message, _ = flock_works(tmp_path)
    finally:
        os.close(fd)
    assert "refuses a second holder" in message and held.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".playpen-doctor.lock"]


def test_doctor_on_a_full_disk_prints_its_table(capsys, tmp_path, monkeypatch):
    import errno

    import playpen.doctor
    import playpen.storage
    from playpen.doctor.report import Check, ended

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    check = Check("storage", "storage_root", "OK", f"{tmp_path}: writable", data={"path": str(tmp_path)})
    monkeypatch.setattr(playpen.doctor, "local_checks", lambda *args: [ended(check)])  # (its row prints as it ends)
    monkeypatch.setattr(playpen.storage, "atomic_write_text", full)
    assert main(["doctor", "--storage-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "storage_root" in out and "report: not written (No space left on device)" in out


# ---------------------------------------------------------------- --out: a folder of the user's is not the tool's

def test_build_tiny_never_deletes_a_folder_it_did_not_write(capsys, tmp_path):
    mine = make_folder(tmp_path / "mine")
    write(mine / "notes.txt", "the only copy")
    err = one_line(capsys, ["models", "build-tiny", "--out", str(mine)])
    assert "holds files this tool did not write (no playpen_build.json)" in err, err
    assert (mine / "notes.txt").read_text() == "the only copy" and os.listdir(mine) == ["notes.txt"]


def test_convert_smol_never_deletes_a_folder_it_did_not_write(capsys, tmp_path):
    mine = make_folder(tmp_path / "mine")
    write(mine / "notes.txt", "the only copy")
    err = one_line(capsys, ["models", "convert-smol", "--out", str(mine)])
    assert "holds files this tool did not write (no playpen_conversion.json)" in err, err
    assert (mine / "notes.txt").read_text() == "the only copy"


# ---------------------------------------------------------------- -o, --out, DEST: one checked writer

@pytest.fixture
def char_device(tmp_path) -> Path:
    """A character device like /dev/null (mknod c 1 3), made where a user could name it."""
    if os.getuid() != 0:
        pytest.skip("mknod needs root")
    path = tmp_path / "null"
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


def test_an_output_through_a_symbolic_link_is_refused(tmp_path, victim):
    out = plant(tmp_path / "out.jsonl", victim, "symlink")
    with pytest.raises(PlaypenError, match="is a symbolic link"):
        write_output(out, "rows\n", "-o")
    assert victim.read_bytes() == VICTIM


def test_an_output_at_a_hard_link_replaces_the_name(tmp_path, victim):
    out = plant(tmp_path / "out.jsonl", victim, "hardlink")
    write_output(check_output_file(out, "-o"), "rows\n", "-o")
    assert victim.read_bytes() == VICTIM and own_file(out) and out.read_text() == "rows\n"


def test_an_output_to_a_device_is_streamed_never_renamed_over(tmp_path, char_device):
    write_output(check_output_file(char_device, "-o"), "rows\n", "-o")
    assert stat.S_ISCHR(os.lstat(char_device).st_mode) and os.listdir(tmp_path) == ["null"]


def test_an_output_to_a_fifo_is_streamed_and_one_without_reader_refused(tmp_path):
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(PlaypenError, match="a FIFO nobody reads"):
        write_output(fifo, "rows\n", "-o")
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    for _ in range(100):  # (until the reader has opened its end)
        try:
            write_output(fifo, "rows\n", "-o")
            break
        except PlaypenError:
            time.sleep(0.05)
    reader.join(5)
    assert read == ["rows\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("kind", LINKS)
def test_debate_pairs_output_is_never_written_through_a_link(capsys, tmp_path, victim, kind):
    out = plant(tmp_path / "pairs.jsonl", victim, kind)
    records = make_folder(tmp_path / "records")
    if kind == "symlink":
        assert "is a symbolic link" in one_line(capsys, ["debate", "pairs", str(records), "-o", str(out)])
    else:  # checked, then no choice is found in the empty records: nothing written either way
        assert "no best-of-n choice" in one_line(capsys, ["debate", "pairs", str(records), "-o", str(out)])
    assert victim.read_bytes() == VICTIM


def test_debate_pairs_output_a_folder_is_one_line(capsys, tmp_path):
    err = one_line(capsys, ["debate", "pairs", str(tmp_path), "-o", str(tmp_path)])
    assert "is a folder; give a file" in err, err


def test_data_output_a_device_is_written_to_not_replaced(capsys, work, char_device):
    assert main(EVAL) == 0
    assert main(["data", "res", "-o", str(char_device)]) in (0, 2)  # (rows or none: never a rename)
    assert stat.S_ISCHR(os.lstat(char_device).st_mode)


def test_configs_copy_onto_a_device_streams_into_it(capsys, tmp_path, char_device):
    assert main(["configs", "copy", "sft/tiny_lora", str(char_device), "--force"]) == 0
    assert stat.S_ISCHR(os.lstat(char_device).st_mode) and os.listdir(tmp_path) == ["null"]
