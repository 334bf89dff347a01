"""The experiment trackers cluster users follow runs in, beside playpen's own metrics.jsonl and TensorBoard:
`trainer.report_to: wandb | trackio | mlflow` (or a list) reaches TRL, with the run id as the run's name and the
run's config.yaml attached. Each is checked before training in one line (the package installed here, in the job's
environment), and points at the run folder by default: W&B's files in <run>/wandb, MLflow's in <run>/mlruns.
Where the job's nodes are offline (HF_HUB_OFFLINE=1, as a cluster profile's env: sets it) W&B runs in offline mode
(WANDB_MODE=offline; `wandb sync <run>/wandb/offline-run-*` uploads it later). An API key is never written
anywhere: a profile's env_keep lets WANDB_API_KEY through to a job where nodes have internet.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from playpen.errors import PlaypenError

TRACKERS = {"wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow"}  # report_to name -> package
NOT_HERE = {"tensorboard": "playpen writes TensorBoard itself, to <run>/logs",
            "all": "name the trackers: wandb, trackio, mlflow"}
TRUE = ("1", "true", "yes", "on")


def requested(value, where: str) -> list[str]:
    """`trainer.report_to` as a list of tracker names (none: []), each one playpen lets through."""
    if value in (None, "none", "None", []):
        return []
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise PlaypenError(f"{where}: trainer.report_to must be a tracker name or a list of them, got {value!r}")
    for name in names:
        if name in NOT_HERE:
            raise PlaypenError(f"{where}: trainer.report_to={name}: {NOT_HERE[name]}")
        if name not in TRACKERS:
            raise PlaypenError(f"{where}: trainer.report_to={name} is not one playpen passes to TRL; use "
                               f"{', '.join(TRACKERS)} or none")
    return [n for n in names if n != "none"]


def prepare(names: list[str], run_dir: Path, experiment: str, where: str) -> None:
    """Before the Trainer is built, in the process that trains: each tracker's package is there, and its files go
    to the run folder (values already set in the environment win)."""
    for name in names:
        if importlib.util.find_spec(TRACKERS[name]) is None:
            raise PlaypenError(f"{where}: trainer.report_to={name} needs the {TRACKERS[name]} package, which is not "
                               f"installed here (pip install {TRACKERS[name]}, or report_to none)")
    if "wandb" in names:
        os.environ.setdefault("WANDB_DIR", str(run_dir))
        os.environ.setdefault("WANDB_PROJECT", experiment)
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in TRUE:
            os.environ.setdefault("WANDB_MODE", "offline")
    if "mlflow" in names:
        os.environ.setdefault("MLFLOW_TRACKING_URI", (run_dir / "mlruns").absolute().as_uri())
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", experiment)
    if "trackio" in names:
        os.environ.setdefault("TRACKIO_PROJECT", experiment)


def config_callback(names: list[str], config_file: Path):
    """A TrainerCallback that attaches the run's config.yaml to each tracker's run once it has started, and
    finishes the W&B run when training ends (at the process's exit its service may already be gone)."""
    from transformers import TrainerCallback

    class AttachConfig(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if not state.is_world_process_zero or not config_file.is_file():
                return
            from playpen.config import load_yaml

            config = load_yaml(config_file, "run config")
            if "wandb" in names:
                import wandb

                if wandb.run is not None:
                    wandb.config.update({"playpen": config}, allow_val_change=True)
            if "mlflow" in names:
                import mlflow

                if mlflow.active_run() is not None:
                    mlflow.log_dict(config, "playpen_config.json")

        def on_train_end(self, args, state, control, **kwargs):
            if "wandb" in names and state.is_world_process_zero:  # close the run (its summary, config.yaml)
                import wandb

                if wandb.run is not None:
                    wandb.finish()

    return AttachConfig()
