"""Checkpoints and resume: find the last complete checkpoint, check it is readable, restore playpen's counters.

The Trainer writes `checkpoints/checkpoint-<step>/` (model or adapter, optimizer, scheduler, RNG per rank,
trainer_state.json). Once a checkpoint is complete, `ResumeState` adds `playpen_state.json` (step + playpen's
own counters, e.g. episodes played): a folder without it was cut off while saving and is skipped with a message;
a complete folder with an unreadable file stops the run with one line naming the file, never a silent restart.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from playpen.reading import DATA_MAX_BYTES, read_bytes, read_json
from playpen.errors import PlaypenError
from playpen.storage import (atomic_write_json, atomic_write_text, checkpoint_step, checkpoints_in, close_to_others,
                             make_folder, not_a_link, read_json_or_none, read_jsonl, remove_tree, share_as_umask)

STATE_FILE = "playpen_state.json"
FULL_CHECK_BYTES = 1 << 30  # zip files above this get a structural check only (CRCs of 10s of GB take minutes)


def _corrupt(path: Path, why: str, checkpoint: Path) -> PlaypenError:
    return PlaypenError(f"checkpoint file {path} is corrupt ({why}); delete {checkpoint} to resume from the "
                        f"checkpoint before it, or pass run_id=<new id> to start a fresh run")


def _check_safetensors(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "shorter than its header"
        (length,) = struct.unpack("<Q", head)
        if length > size:
            return "header longer than the file"
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "unreadable header"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    return None if size == 8 + length + end else f"{size} bytes, header says {8 + length + end}"


def _non_finite(path: Path) -> str | None:
    """The first floating-point tensor holding NaN or inf: such weights train on silently (loss 0.0 or nan
    every step after) and end as a registered model that is all NaN."""
    import torch
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                return f"tensor {name} holds NaN or inf values"
    return None


def _check_zip(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as z:
            if path.stat().st_size <= FULL_CHECK_BYTES and (bad := z.testzip()) is not None:
                return f"bad CRC in {bad}"
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f"not a complete torch archive: {e}"
    return None


def validate_checkpoint(checkpoint: Path) -> None:
    """Every JSON parses, every safetensors file has its full length, every torch archive is intact."""
    if not (checkpoint / "trainer_state.json").is_file():
        raise _corrupt(checkpoint / "trainer_state.json", "missing", checkpoint)
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file() or p.is_symlink()):
        why = None
        if path.is_symlink():
            why = f"a symbolic link (to {os.readlink(path)}), not a file of the checkpoint's own"
        elif path.suffix == ".json":
            try:
                json.loads(read_bytes(path, "checkpoint file", DATA_MAX_BYTES))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                why = f"malformed JSON: {e}"
            except PlaypenError as e:
                why = str(e)
        elif path.suffix == ".safetensors":
            why = _check_safetensors(path) or _non_finite(path)
        elif path.suffix in (".pt", ".pth", ".bin"):
            why = _check_zip(path)
        if why:
            raise _corrupt(path, why, checkpoint)


def _log_rank0(message: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(message, flush=True)


def is_complete(checkpoint: Path) -> bool:
    """The Trainer finished saving `checkpoint` and `ResumeState` marked it (STATE_FILE, written last and
    atomically): only such a checkpoint is resumed from."""
    return (Path(checkpoint) / STATE_FILE).is_file()


def complete_checkpoints(folder: str | Path) -> list[Path]:
    """The complete checkpoints in a run's checkpoints folder, oldest first."""
    return [path for _, path in checkpoints_in(folder) if is_complete(path)]


def find_resume_checkpoint(folder: Path, log=_log_rank0) -> Path | None:
    """The newest complete checkpoint (validated), or None for a fresh run. A link at the checkpoints folder is
    refused: what it points at is not this run's."""
    not_a_link(folder, "run folder")
    stray = [p for p in sorted(folder.glob("checkpoint-*")) if not p.is_dir()] if folder.is_dir() else []
    if stray:  # the Trainer would fail to save (or rotate) a checkpoint of that name mid-run
        raise PlaypenError(f"{stray[0]} is a file, not a checkpoint folder; move it out of {folder} and rerun")
    for _, path in reversed(checkpoints_in(folder)):
        if not is_complete(path):
            log(f"[playpen] skipping incomplete checkpoint {path} (no {STATE_FILE}: the job stopped while saving it)")
            continue
        validate_checkpoint(path)
        return path
    return None


def remove_incomplete(folder: Path, keep: Path | None) -> None:
    """Drop checkpoints newer than the one resumed from: they were cut off and are rewritten on replay."""
    keep_step = checkpoint_step(keep) if keep else -1
    for step, path in checkpoints_in(folder):
        if step > keep_step:
            remove_tree(path, folder)


SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "vocab_size")  # a full-weights checkpoint of another model differs in one of these


def check_fits(checkpoint: Path, planned_steps: int, lora: dict | None, spec: dict) -> None:
    """A checkpoint is resumed or finished from only if it is one of this run's: its step is the one its name and
    its state files say and not past the run's max_steps (`planned_steps` > 0), and its weights are what the run
    trains (a LoRA adapter of the configured rank and alpha, or full weights of the same model). A folder copied
    from another run would otherwise become this run's registered model, silently."""
    def unfit(why: str) -> PlaypenError:
        return PlaypenError(f"checkpoint {checkpoint} does not fit this run: {why}; it is not this run's (copied "
                            f"from another?): delete it, or pass run_id=<new id> to start a separate run")

    step = checkpoint_step(checkpoint)
    state = load_state(checkpoint)
    if state.get("step") != step:
        raise unfit(f"its {STATE_FILE} says step {state.get('step')!r}, its name step {step}")
    trainer_state = read_json(checkpoint / "trainer_state.json", "checkpoint file")
    if not isinstance(trainer_state, dict) or trainer_state.get("global_step") != step:
        raise unfit(f"its trainer_state.json says step {(trainer_state or {}).get('global_step')!r}, its name "
                    f"step {step}")
    reached = state.get("global_step", step)
    if not isinstance(reached, int) or reached < step:
        raise unfit(f"its {STATE_FILE} says global step {reached!r}")
    if 0 < planned_steps < reached:
        raise unfit(f"it is at step {reached}, past the run's max_steps {planned_steps}")
    adapter = checkpoint / "adapter_config.json"
    if lora is None and adapter.is_file():
        raise unfit("it holds a LoRA adapter, and this run trains full weights (lora: null)")
    if lora is not None and not adapter.is_file():
        raise unfit("it holds full weights, and this run trains a LoRA adapter (lora:)")
    if adapter.is_file():
        found = read_json(adapter, "checkpoint file")
        _adapter_fits(checkpoint, found, _expected_adapter(lora, spec), unfit)
        base, trained = str(found.get("base_model_name_or_path") or ""), str(spec.get("huggingface_id") or "")
        if base and trained and Path(base).name != Path(trained).name:  # (paths differ between machines: names)
            raise unfit(f"its adapter sits on {base}, the run trains {trained}")
    else:
        _weights_fit(checkpoint, spec, unfit)


def _expected_adapter(lora: dict, spec: dict) -> dict:
    """The adapter the run trains: the one its model already is (peft_model: trained on), else `lora:` over
    playpen's defaults."""
    from playpen.models.modeling import DEFAULT_LORA

    start = (spec.get("model_config") or {}).get("peft_model")
    if start and (Path(start) / "adapter_config.json").is_file():
        found = read_json(Path(start) / "adapter_config.json", "adapter config")
        return found if isinstance(found, dict) else {}
    return {**DEFAULT_LORA, **lora}


def _adapter_fits(checkpoint: Path, found: dict, expected: dict, unfit) -> None:
    if not isinstance(found, dict):
        raise unfit("its adapter_config.json is not a mapping")
    for key in ("r", "lora_alpha"):
        if key in expected and found.get(key) != expected[key]:
            raise unfit(f"its adapter has {key}={found.get(key)!r}, the run's lora has {key}={expected[key]!r}")
    want, have = expected.get("target_modules"), found.get("target_modules")
    if isinstance(want, (list, tuple)) and isinstance(have, (list, tuple)) and set(want) != set(have):
        raise unfit(f"its adapter targets {sorted(have)}, the run's lora targets {sorted(want)}")
    rank = expected.get("r")
    for weights in checkpoint.glob("adapter_model*.safetensors"):  # the tensors themselves, not only the config
        for name, shape in _safetensors_shapes(weights).items():
            if "lora_A" in name and len(shape) == 2 and shape[0] != rank:
                raise unfit(f"its tensor {name} has rank {shape[0]}, the run's lora has r={rank}")


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return {}
        (length,) = struct.unpack("<Q", head)
        try:
            header = json.loads(f.read(min(length, 1 << 26)))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return {}
    return {k: v.get("shape", []) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


def _weights_fit(checkpoint: Path, spec: dict, unfit) -> None:
    """Full weights: the checkpoint's config.json against the base model's, where the base is a local folder."""
    base = Path(str(spec.get("huggingface_id") or "")).expanduser() / "config.json"
    if not (checkpoint / "config.json").is_file() or not base.is_file():
        return
    mine, theirs = read_json(checkpoint / "config.json", "checkpoint file"), read_json(base, "model config")
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return
    for key in SHAPE_KEYS:
        if key in mine and key in theirs and mine[key] != theirs[key]:
            raise unfit(f"its config.json has {key}={mine[key]!r}, the model trained ({spec.get('model_name')}) "
                        f"{key}={theirs[key]!r}")


TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin", STATE_FILE)


class CheckpointAsFinal:
    """The trainer of a run whose last complete checkpoint is already its last step (the job was killed after
    saving it and before finished.json): resuming would train one step past max_steps, so nothing trains and
    `save_model` copies the checkpoint's model files (weights or adapter, config, tokenizer) as the final model."""

    def __init__(self, checkpoint: Path, global_step: int):
        self.checkpoint = checkpoint
        self.state = SimpleNamespace(global_step=global_step)

    def save_model(self, output_dir: str) -> None:
        if os.environ.get("RANK", "0") != "0":
            return
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.checkpoint.iterdir()):  # (a link there is not the run's: never copied)
            if path.is_file() and not path.is_symlink() and path.name not in TRAINING_STATE \
                    and not path.name.startswith("rng_state"):
                shutil.copy2(path, out / path.name)


def load_state(checkpoint: Path | None) -> dict:
    if checkpoint is None:
        return {"step": 0}
    state = read_json_or_none(checkpoint / STATE_FILE)
    if not isinstance(state, dict):
        raise _corrupt(checkpoint / STATE_FILE, "not a readable JSON mapping", checkpoint)
    return state


def truncate_jsonl(path: Path, step: int) -> None:
    """Keep rows up to `step`: the steps after the resumed checkpoint are logged again on replay."""
    rows = read_jsonl(path)
    kept = [r for r in rows if r.get("step", 0) <= step]
    cut_off = path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    if len(kept) != len(rows) or cut_off:  # (a cut-off line would run into the next row appended)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))


def _make_resume_state_callback():
    from transformers import TrainerCallback

    class ResumeState(TrainerCallback):
        """Marks a checkpoint complete by writing playpen_state.json (step + the counters `extra()` returns)."""

        def __init__(self, extra: Callable[[], dict] = dict, step_offset: int = 0):
            self.extra = extra
            self.step_offset = step_offset

        def on_step_end(self, args, state, control, **kwargs):
            """Before the Trainer saves checkpoint-<step> by name: a folder of that name cannot be this run's
            (newer ones were removed when it resumed), so whatever is there, links included, goes first, and
            the folder is made anew, closed to others' writes (nothing can be planted in it while it is saved)."""
            if control.should_save:
                from playpen.distributed import barrier

                if state.is_world_process_zero:
                    checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                    remove_tree(checkpoint, args.output_dir)
                    close_to_others(make_folder(checkpoint, "checkpoint folder", root=args.output_dir))
                barrier()

        def on_save(self, args, state, control, **kwargs):
            from playpen.distributed import barrier

            barrier()  # every rank has written its shards
            if state.is_world_process_zero:
                checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                share_as_umask(checkpoint, closed=True)  # (safetensors writes 0600: teammates could not load it)
                atomic_write_json(checkpoint / STATE_FILE,
                                  {"step": state.global_step, "global_step": self.step_offset + state.global_step,
                                   **self.extra()})

    return ResumeState


def resume_state_callback(extra: Callable[[], dict] = dict, step_offset: int = 0):
    return _make_resume_state_callback()(extra, step_offset)
