"""The end of a training: the final model in <run>/final, its registry entry (<run>/model_registry.json, what
`playpen eval RUN` loads), the learning curve, and finished.json last.
"""
from __future__ import annotations

import copy
from pathlib import Path

from playpen.storage import atomic_write_json, replace_folder, staging_folder
from playpen.train.metrics import CURVE_FILE, plot_curve
from playpen.train.recipe import Session
from playpen.train.reruns import FINAL_DIR, FINISHED_FILE, REGISTRY_FILE


def registry_entry(session: Session, final_dir: Path, adapter: bool) -> dict:
    """clemcore ModelSpec for the trained model: the base model plus peft_model, or the full weights."""
    from playpen.models import service

    spec = copy.deepcopy(session.spec)
    raw = service.registered_entry(session.cfg.model)
    if raw and "{" in str(raw.get("huggingface_id", "")):  # a placeholder such as {playpen_models}
        spec["huggingface_id"] = raw["huggingface_id"]  # stays valid on other machines / containers
    name = session.run.model_name
    model_config = dict(spec.get("model_config") or {})
    if adapter:
        model_config["peft_model"] = str(final_dir.absolute())
    else:
        spec["huggingface_id"] = str(final_dir.absolute())
        model_config.pop("peft_model", None)
        model_config.pop("requires_api_key", None)  # a local folder now
    model_config.pop("load_in_4bit", None)
    model_config.pop("load_in_8bit", None)
    if session.cfg.quantization and adapter:
        model_config[f"load_in_{session.cfg.quantization}"] = True
    spec.update(model_name=name, model_config=model_config,
                trained_from=session.cfg.model, method=session.recipe.name, run_dir=str(session.run.path))
    return spec


def finish(session: Session, trainer) -> None:
    run = session.run
    final_dir = run.path / FINAL_DIR
    # the libraries write the model's files by name: into a private folder, which then replaces final/ whole
    staged = staging_folder(final_dir, run.path, create=session.is_main)
    trainer.save_model(str(staged))  # collective under DeepSpeed; writes on rank 0
    if not session.is_main:
        return
    session.tokenizer.save_pretrained(str(staged))
    for name, content in session.final_files.items():
        atomic_write_json(staged / name, content)
    replace_folder(staged, final_dir, run.path)
    adapter = (final_dir / "adapter_config.json").is_file()
    plot_curve(run.metrics, run.path / CURVE_FILE, title=f"{session.recipe.name}: {run.name}")
    name = None
    if session.cfg.register:
        spec = registry_entry(session, final_dir, adapter)
        atomic_write_json(run.path / REGISTRY_FILE, [spec])  # (a run's registry holds its own model only)
        name = spec["model_name"]
        print(f"[playpen] registered model {name} in {run.path / REGISTRY_FILE}")
        if session.recipe.next_step:
            print(f"[playpen] next: {session.recipe.next_step.format(name=name)}")
    # last: a rerun of the same command finds the run complete only once everything above is on disk
    atomic_write_json(run.path / FINISHED_FILE, {"global_step": session.recipe.final_step(session, trainer),
                                                 "final": str(final_dir), "model_name": name})
    print(f"[playpen] done: {run.path} (curve: {run.path / CURVE_FILE})")
