"""Reruns of a run id: what makes a run complete, and which config changes a rerun may make (see runner).

A run dir holds one training: rerunning a finished run trains and rewrites nothing ("already complete"); a rerun
with other values is refused before anything loads, naming the keys, unless allow_config_change is set.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import yaml

from playpen.config import dump_yaml, read_text, to_dict, yaml_value
from playpen.errors import PlaypenError
from playpen.storage import RunDir, read_json_or_none

if TYPE_CHECKING:
    from playpen.train.recipe import Recipe

FINAL_DIR = "final"
REGISTRY_FILE = "model_registry.json"
FINISHED_FILE = "finished.json"  # written last by a run that ended: its step, final model and registered name
# keys that say where or how fast a run goes, not what it learns: a rerun may change them freely
NOT_COMPARED = ("run_id", "storage_root", "cpu_threads", "allow_config_change")


def _comparable(config: dict) -> dict[str, Any]:
    """Dotted key -> value of a resolved config, as YAML stores it (so 2e-4 and 0.0002 compare equal)."""
    flat: dict[str, Any] = {}

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk({k: v for k, v in yaml.safe_load(dump_yaml(config)).items() if k not in NOT_COMPARED}, "")
    return flat


def config_changes(run: RunDir, method: str, cfg) -> dict[str, tuple]:
    """What this config changes in the run dir's config.yaml, {key: (old, new)}. A run holds one training: other
    values would mix games or data in one run and overwrite its config.yaml, so they are refused here, before
    the model loads, unless allow_config_change is set; another method is always refused."""
    if not run.config.is_file():
        return {}
    text = read_text(run.config, "run config")
    trained_with = re.match(r"# playpen train (\w+)", text)
    if trained_with and trained_with.group(1) != method:
        raise PlaypenError(f"run {run.path} was trained with `playpen train {trained_with.group(1)}`, not {method}; "
                           f"pass run_id=<new id> to start a separate run")
    try:
        stored = yaml_value(text)  # (without aliases: anyone can write into a run folder on shared storage)
    except yaml.YAMLError as e:
        raise PlaypenError(f"{run.config} is not readable YAML ({' '.join(str(e).split())}); restore it, or pass "
                           f"run_id=<new id> to start a separate run") from None
    old, new = _comparable(stored if isinstance(stored, dict) else {}), _comparable(to_dict(cfg))
    changes = {k: (old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)}
    if changes and not cfg.allow_config_change:
        shown = "; ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in list(changes.items())[:4])
        more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
        raise PlaypenError(f"run {run.path} was trained with other values ({shown}{more}); pass run_id=<new id> "
                           f"to start a separate run, or allow_config_change=true to continue this one with them")
    return changes


def _short(value: Any) -> str:
    """A value for a one-line message; long ones (paths) keep their end, where they differ most often."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else "..." + text[-57:]


def finished_run(recipe: Recipe, cfg, run: RunDir) -> dict | None:
    """finished.json of a run that already trained what `cfg` asks for (its final model and registry entry still
    there), else None. Runs finished before finished.json existed count by their final/ folder, registry entry
    and last checkpoint."""
    marker = run.path / FINISHED_FILE
    if not (run.path / FINAL_DIR).is_dir():
        return None
    if marker.is_file():
        record = read_json_or_none(marker)
        if not isinstance(record, dict):
            return None  # cut off while written: the run finishes again from its last checkpoint
    elif (run.path / REGISTRY_FILE).is_file():
        record = {"global_step": recipe.find_resume(cfg, run)[1], "model_name": f"{cfg.experiment}-{run.path.name}"}
    else:
        return None
    if cfg.register and not _registered(run, record.get("model_name")):
        return None  # registering was cut off (or the entry removed): finishing again writes it
    return record if recipe.is_complete(cfg, run, int(record.get("global_step", 0))) else None


def _registered(run: RunDir, name: str | None) -> bool:
    entries = read_json_or_none(run.path / REGISTRY_FILE) or []
    if not isinstance(entries, list):
        return False
    return any(isinstance(e, dict) and e.get("model_name") == name for e in entries)


def already_complete(recipe: Recipe, cfg, run: RunDir, finished: dict) -> str:
    planned = recipe.planned_steps(cfg)
    target = f" of max_steps {planned}" if planned > 0 else ""
    name = f", registered as {finished['model_name']}" if cfg.register and finished.get("model_name") else ""
    return (f"[playpen] already complete: {run.path} (step {finished.get('global_step')}{target}); final model "
            f"{run.path / FINAL_DIR}{name}. Nothing trained; to train on, raise trainer.max_steps with "
            f"allow_config_change=true, or pass run_id=<new id>")
