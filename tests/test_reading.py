"""playpen.reading, and every reader that goes through it: every file playpen reads is a regular file under a size
bound before it is read (a FIFO or a link to /dev/zero named or planted where a file belongs is one line, never a
hang or a machine out of memory), and YAML comes without aliases (a 566-byte alias bomb), deep nesting or duplicate
keys. Each reader is the command as a user types it, in a working folder of its own: exit 2 and one
`playpen: error:` line naming the file; a registry someone else left under the storage root is skipped with a
warning instead. Nothing here loads a model."""
from __future__ import annotations

import os
import time
from pathlib import Path

import clemcore  # noqa: F401  (importing it opens ./clembench.log: done here, outside the folders compared)
import pytest

from playpen.cli import main
from playpen.reading import load_yaml, parse_json, read_text
from playpen.errors import PlaypenError

REPO = Path(__file__).resolve().parents[1]
SPECIAL = ("fifo", "devzero")


def special(path: Path, kind: str) -> Path:
    """A FIFO (reading it waits for a writer forever) or a link to /dev/zero (reading it never ends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


def refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    started = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("playpen: error: ") and "\n" not in err, err
    assert time.perf_counter() - started < 30
    return err


# ---------------------------------------------------------------- the readers

@pytest.mark.parametrize("kind", SPECIAL)
def test_reading_a_fifo_or_a_device_never_blocks(tmp_path, kind):
    path = special(tmp_path / "c.yaml", kind)
    with pytest.raises(PlaypenError, match="is not a regular file"):
        read_text(path, "config file")


def test_a_file_above_its_size_bound_is_refused_unread(tmp_path):
    path = tmp_path / "c.yaml"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # sparse: nothing is really written
    with pytest.raises(PlaypenError, match="above the 16 MiB"):
        read_text(path, "config file")


READERS = {  # what the user names (or playpen finds) -> (the file's name, the command)
    "--config": ("c.yaml", ["train", "sft", "--config", "c.yaml"]),
    "--cluster": ("c.yaml", ["submit", "sft", "--config", "sft.yaml", "--cluster", "c.yaml", "--dry-run"]),
    "data=": ("d.jsonl", ["train", "sft", "experiment=x", "data=d.jsonl", "storage_root=runs", "cpu_threads=1"]),
    "--prompts": ("p.jsonl", ["meter", "playpen-tiny", "--classifier", "vader", "--prompts", "p.jsonl"]),
    "./key.json": ("key.json", ["eval", "gpt-4o", "-g", "wordle", "-r", "res"]),
    "./model_registry.json": ("model_registry.json", ["eval", "mock", "-g", "wordle", "-r", "res"]),
    "deepspeed=": ("ds.json", ["train", "sft", "experiment=x", "data=sft.jsonl", "deepspeed=ds.json",
                               "storage_root=runs"]),
    "tournament config": ("t.yaml", ["debate", "tournament", "t.yaml"]),
    "sweep file": ("s.yaml", ["submit", "sweep", "--config", "s.yaml", "--dry-run"]),
}


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("reader", READERS)
def test_every_file_named_is_checked_before_it_is_read(capsys, stocked_cwd, reader, kind):
    name, argv = READERS[reader]
    special(stocked_cwd / name, kind)
    err = refused(capsys, argv)
    assert name in err and "is not a regular file" in err, err
    assert not (stocked_cwd / "runs").exists() and not (stocked_cwd / "res").exists()


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_registry_planted_under_the_storage_root_is_skipped_with_a_warning(capsys, stocked_cwd, kind):
    run = stocked_cwd / "runs" / "exp" / kind  # (a warning is said once per process: one path per case)
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("# playpen train sft (resolved config)\nexperiment: exp\n")
    special(run / "model_registry.json", kind)
    special(stocked_cwd / "runs" / "any" / "folder" / "model_registry.json", kind)  # not a run: never even read
    capsys.readouterr()
    assert main(["list", "models"]) == 0  # (every user of this root, every command that resolves a model)
    out, err = capsys.readouterr()
    assert "playpen-tiny" in out
    assert f"skipping a run's model registry: model registry runs/exp/{kind}/model_registry.json is not a " \
           f"regular file" in err, err


# ---------------------------------------------------------------- YAML: aliases, nesting, duplicate keys

# eight levels of ten aliases: 566 bytes that PyYAML's safe loader expands to 10^8 values
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(7))
DEEP = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize("text,message", [
    (BOMB, r"aliases \(\*a\) are not allowed"),
    ("k: " + DEEP, "nested deeper than 64 levels"),
    ("experiment: x\nexperiment: y\n", "duplicate key 'experiment'"),
])
def test_yaml_without_aliases_deep_nesting_or_duplicate_keys(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(PlaypenError, match=r"c.yaml:\d+:\d+: " + message):
        load_yaml(path)
    assert time.perf_counter() - started < 2


def _nested(key: str, value: str) -> str:
    """`value` (YAML text) under `key`, a free-form mapping of a config (`lora.x`, `trainer.x`, ...)."""
    return f"{key}:\n  x: {value}\n" if key else f"x: {value}\n"


LOADERS = {  # every YAML playpen reads, and every free-form mapping in one: (file, the YAML around it, command)
    "train config": ("c.yaml", "experiment: x\ndata: sft.jsonl\n", "", ["train", "sft", "--config", "c.yaml"]),
    "lora:": ("c.yaml", "experiment: x\ndata: sft.jsonl\n", "lora", ["train", "sft", "--config", "c.yaml"]),
    "trainer:": ("c.yaml", "experiment: x\ndata: sft.jsonl\n", "trainer", ["train", "sft", "--config", "c.yaml"]),
    "generate:": ("c.yaml", "experiment: x\ngame: arithmetic\n", "generate", ["train", "grpo", "--config", "c.yaml"]),
    "meters:": ("s.yaml", "name: s\nmodels: [mock]\ngames: [wordle]\nmeters:\n  - classifier: vader\n", "",
                ["submit", "sweep", "--config", "s.yaml", "--dry-run"]),
    "cluster profile": ("p.yaml", "partition: x\n", "env", ["submit", "sft", "--config", "sft.yaml", "--cluster",
                                                             "p.yaml", "--dry-run"]),
    "tournament": ("t.yaml", "name: t\n", "", ["debate", "tournament", "t.yaml"]),
}


@pytest.mark.parametrize("bomb", ["aliases", "depth"])
@pytest.mark.parametrize("loader", LOADERS)
def test_every_yaml_loader_refuses_alias_bombs_and_deep_nesting(capsys, stocked_cwd, loader, bomb):
    name, head, key, argv = LOADERS[loader]
    if bomb == "aliases":
        body = head + BOMB.replace("a: &a", "zz: &a") + _nested(key, "*h")
    else:
        body = head + _nested(key, DEEP)
    (stocked_cwd / name).write_text(body)
    err = refused(capsys, argv)
    assert name in err and ("aliases (*" in err or "nested deeper than 64" in err), err


def test_an_override_with_an_alias_or_deep_nesting_is_one_line(capsys, stocked_cwd):
    err = refused(capsys, ["train", "sft", "--config", "sft.yaml", "lora.x=" + DEEP])
    assert "override 'lora.x=" in err and "nested deeper than 64 levels" in err, err[:200]


# ---------------------------------------------------------------- JSON nested too deep

def test_json_nested_too_deep_is_one_line():
    with pytest.raises(PlaypenError, match="nested too deep"):
        parse_json("[" * 100_000 + "]" * 100_000, "rows.json")


@pytest.mark.parametrize("what", ["data row", "instances file", "model registry", "key.json"])
def test_deep_json_in_any_file_is_one_line(capsys, stocked_cwd, what):
    deep = "[" * 100_000 + "]" * 100_000
    if what == "data row":
        (stocked_cwd / "d.jsonl").write_text('{"messages": ' + deep + "}\n")
        err = refused(capsys, ["train", "sft", "experiment=x", "data=d.jsonl", "storage_root=runs"])
    elif what == "instances file":
        (stocked_cwd / "i.json").write_text(deep)
        instances = str(stocked_cwd / "i.json")
        err = refused(capsys, ["eval", "mock", "-g", "wordle", "--instance_set", instances, "-r", "r"])
    elif what == "model registry":
        (stocked_cwd / "model_registry.json").write_text(deep)
        err = refused(capsys, ["eval", "mock", "-g", "wordle", "-r", "res"])
    else:
        (stocked_cwd / "key.json").write_text(deep)
        err = refused(capsys, ["eval", "gpt-4o", "-g", "wordle", "-r", "res"])
    assert "nested too deep" in err, err
