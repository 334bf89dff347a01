"""What a name or folder means: registry names, training runs and their checkpoints, Hugging Face model folders
(the one rule for eval, sweeps, training, teachers, the meter; playpen.models.service resolves through it).

A checkpoint (`<run>/checkpoints/checkpoint-<step>/`, TRL's layout) is its base model plus the adapter in it
(adapter_config.json), or the full weights in it (config.json). The base is the run's registered model
(`<run>/model_registry.json`), else the registry entry whose weights the adapter names.
"""
from __future__ import annotations

import json
from pathlib import Path

from playpen.reading import read_json
from playpen.errors import PlaypenError
from playpen.model_registry import MODEL_REGISTRY_FILE, PAIR_SEPARATOR, ModelEntry, model_entries, resolve_model
from playpen.storage import NAME_RULE, check_name, checkpoint_step, checkpoints_in, is_run_dir

def is_checkpoint(path: Path) -> bool:
    return (path / "adapter_config.json").is_file() or (path / "config.json").is_file()


def base_spec_for(ckpt: Path) -> dict:
    """The model a checkpoint was trained from: its run's registered spec, else the registry entry whose
    weights the adapter names (adapter_config.json: base_model_name_or_path)."""
    run_dir = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None
    if run_dir is not None and (run_dir / "model_registry.json").is_file():
        return resolve_model(str(run_dir))
    adapter_config = ckpt / "adapter_config.json"
    adapter = read_json(adapter_config, "adapter config") if adapter_config.is_file() else {}
    base = adapter.get("base_model_name_or_path") if isinstance(adapter, dict) else None
    if base:
        for entry in model_entries():
            # a trained adapter registered on the same base weights is not the base model itself
            if not entry.spec.get("huggingface_id") or (entry.spec.get("model_config") or {}).get("peft_model"):
                continue
            spec = resolve_model(entry.name)
            if spec["huggingface_id"] == base or Path(spec["huggingface_id"]) == Path(base):
                return spec
        return {"model_name": Path(base).name, "backend": "huggingface_local", "huggingface_id": base,
                "model_config": {}}
    raise PlaypenError(f"cannot tell which model checkpoint {ckpt} belongs to: its run has no model_registry.json "
                       f"and it has no adapter_config.json naming the base model")


def checkpoint_spec(ckpt: str | Path, base_spec: dict | None = None, name: str | None = None) -> dict:
    """A ModelSpec for one training checkpoint: the base model with this adapter (or these full weights)."""
    ckpt = Path(ckpt).expanduser().absolute()
    if not is_checkpoint(ckpt):
        raise PlaypenError(f"{ckpt} holds no adapter (adapter_config.json) or model (config.json); "
                           f"is the checkpoint complete?")
    spec = json.loads(json.dumps(base_spec if base_spec is not None else base_spec_for(ckpt)))
    config = dict(spec.get("model_config") or {})
    if (ckpt / "adapter_config.json").is_file():
        config["peft_model"] = str(ckpt)
    else:
        config.pop("peft_model", None)
        spec["huggingface_id"] = str(ckpt)
    spec["model_config"] = config
    step = checkpoint_step(ckpt)
    spec["model_name"] = name or f"{spec['model_name']}-{f'step{step}' if step is not None else ckpt.name}"
    return spec


def resolve_eval_model(model: str | dict, entries: list[ModelEntry] | None = None) -> dict:
    """Registry name, run directory (its registered model, else its latest checkpoint), checkpoint folder or Hugging
    Face model folder → ModelSpec dict (a dict is taken as is). Any other folder is refused, even one holding a model
    registry (`playpen eval .` in a project folder): which of its models was meant is not for playpen to guess.
    `entries`: the registries as already read."""
    if isinstance(model, dict):
        if not isinstance(model.get("model_name"), str) or "backend" not in model:
            raise PlaypenError("a model spec needs 'model_name' and 'backend' (clemcore ModelSpec format)")
        return json.loads(json.dumps(model))
    if not model.strip():
        raise PlaypenError("no model given: name a registered model (`playpen list models`), a training run folder "
                           "or a checkpoint folder")
    entries = entries if entries is not None else model_entries()
    path = Path(model).expanduser()
    if not path.is_dir() or model in {e.name for e in entries}:
        return resolve_model(model, entries=entries)
    if is_run_dir(path) and (path / MODEL_REGISTRY_FILE).is_file():
        return resolve_model(str(path), entries=entries)  # the model the run registered
    if (path / "config.json").is_file() and not (path / "adapter_config.json").is_file() \
            and path.parent.name != "checkpoints":  # a Hugging Face model folder, not a training checkpoint
        return {"model_name": path.absolute().name, "backend": "huggingface_local",
                "huggingface_id": str(path.absolute()), "model_config": {}}
    if is_checkpoint(path):
        return checkpoint_spec(path)
    steps = checkpoints_in(path / "checkpoints")
    if steps:  # a run that has not registered its final model (yet): its latest checkpoint
        return checkpoint_spec(steps[-1][1])
    registry = path / MODEL_REGISTRY_FILE
    if registry.is_file():
        names = [e.name for e in model_entries(cwd=path) if e.source == str(registry)]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise PlaypenError(f"{path.absolute()} is a folder with a model registry ({shown or 'empty'}), not a model; "
                           f"name the model, e.g. {names[-1] if names else '<model>'}")
    raise PlaypenError(f"no config.json in {path.absolute()}: the folder holds no model, checkpoint "
                       f"(checkpoints/checkpoint-<step>/) or training run; name a registered model "
                       f"(`playpen list models`), a Hugging Face model folder or one of those folders")


def model_folder(spec: dict) -> str:
    """The results folder clemcore names after a single player model (its model_name)."""
    name = spec["model_name"]
    try:
        check_name(name, "model name")
    except PlaypenError:
        raise PlaypenError(f"model name {name!r} cannot name a results folder; use {NAME_RULE} in the registry "
                           f"entry's model_name") from None
    if PAIR_SEPARATOR in name:  # its folder would be the one of a model played with a partner
        raise PlaypenError(f"model name {name!r} holds {PAIR_SEPARATOR!r}, which joins a model and its partner in "
                           f"results folders (`a--b`: a with partner b); rename the model or its folder")
    return name
