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
from playpen.storage import (STALE_TEMP_S, RunDir, append_jsonl, atomic_write_json, atomic_write_text, check_location,
                             exclusive_folder, make_folder, open_append, private_folder, read_jsonl, replace_folder,
                             resolve_storage_root)

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
