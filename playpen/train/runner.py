"""A training run's life cycle, the one every method shares (torchtune-style), top to bottom in this module:

    check      config keys, model, quantization, DeepSpeed file, the method's own inputs (data, game, teacher,
               key), reruns of the run id, the last checkpoint: all before anything is written, each failure one
               PlaypenError line
    run folder the run id, the lock rank 0 holds while it trains, the resolved config and cut-off checkpoints
    build      TRL arguments (before the model, so ZeRO-3 partitions it at load), tokenizer, model, LoRA
    fit        the method's recipe (`sft.py`, `dpo.py`, `grpo.py`, ...) builds its TRL trainer and trains,
               resuming from the last complete checkpoint
    register   final model/adapter in <run>/final, <run>/model_registry.json entry, learning curve, finished.json

The run id defaults to `<method>-<hash of the resolved config>`, so rerunning the same command finds the same
run dir and resumes; `run_id=...` names it explicitly. A run dir holds one training:
    - rerunning a finished run (finished.json, final/, its registry entry, max_steps reached) trains nothing and
      rewrites nothing: it says "already complete" and exits 0;
    - rerunning a run id with other config values (other game, data, max_steps, ...) is refused before anything
      loads, naming the keys; `allow_config_change=true` continues the run with the new values (the old
      config.yaml is kept as config.before-step<N>.yaml), a new run_id starts a separate run;
    - two trainings of one run dir at once: the second stops (a lock held by rank 0 while it trains);
    - a run killed after its last checkpoint (max_steps) and before finished.json finishes from that checkpoint
      without training (resuming would train one step past max_steps).

Not here: what a method does (its recipe, over the API in `recipe.py`), TRL's arguments (`trl_args.py`), finding
and validating checkpoints (`checkpoints.py`), metrics and the curve (`metrics.py`), the run folder's layout
(playpen.storage.RunDir). Heavy libraries (torch, transformers, TRL) are imported inside the functions.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from playpen import distributed
from playpen.config import dump_yaml, find_config, load_config, read_text, to_dict, yaml_value
from playpen.errors import PlaypenError
from playpen.models import modeling, service
from playpen.storage import (RunDir, atomic_write_json, atomic_write_text, checkpoints_in, exclusive_folder,
                             read_json_or_none, replace_folder, staging_folder, storage_full)
from playpen.train import METHODS, trl_args
from playpen.train.checkpoints import (CheckpointAsFinal, check_fits, load_state, remove_incomplete,
                                       truncate_jsonl)
from playpen.train.metrics import CURVE_FILE, plot_curve
from playpen.train.recipe import Recipe, Session

FINAL_DIR = "final"
REGISTRY_FILE = "model_registry.json"
FINISHED_FILE = "finished.json"  # written last by a run that ended: its step, final model and registered name
# keys that say where or how fast a run goes, not what it learns: a rerun may change them freely
NOT_COMPARED = ("run_id", "storage_root", "cpu_threads", "allow_config_change")


def keys_help(method: str) -> str:
    """Where every config key of `method` is described, for a message refusing an unknown one."""
    return f"every key: `playpen train {method} --help`"


def load_recipe(method: str) -> Recipe:
    if method not in METHODS:
        raise PlaypenError(f"unknown method '{method}'; choose one of: {', '.join(METHODS)}")
    return importlib.import_module(METHODS[method]).RECIPE


# ---------------------------------------------------------------- the life cycle

@service.once  # the learner and the teacher are resolved once per run (checked, loaded, registered)
def run(method: str, config_path: str | None, overrides: list[str]) -> RunDir:
    recipe = load_recipe(method)
    config_path = find_config(config_path) if config_path else None  # a file, or a shipped config's name
    cfg = load_config(recipe.Config, config_path, overrides, keys_help=keys_help(method),
                      sections=trl_args.nested_sections(recipe.trl_config))
    where = str(config_path) if config_path else "overrides"
    # ---- check: nothing is written before all of this passed
    deepspeed = check_config(recipe, cfg, where)
    modeling.check_quantization(cfg.quantization)
    spec = modeling.resolve_model_spec(cfg.model)
    from playpen.model_registry import check_remote_key

    check_remote_key(spec, "model")  # a hub model not cached while offline, a gated one without its key
    recipe.check(cfg, where)
    run_dir = RunDir.for_experiment(cfg.storage_root, cfg.experiment, run_id_of(method, cfg))
    changes = config_changes(run_dir, method, cfg)
    if finished := finished_run(recipe, cfg, run_dir):
        if distributed.dist_info()[0] == 0:
            print(already_complete(recipe, cfg, run_dir, finished), flush=True)
        return run_dir
    resume, reached = recipe.find_resume(cfg, run_dir)
    if resume is not None:  # (one copied from another run would become this run's model)
        check_fits(resume, recipe.planned_steps(cfg), cfg.lora, spec)
    quiet_libraries()
    if resume is not None and recipe.finishes_from_checkpoint and 0 < recipe.planned_steps(cfg) <= reached:
        _finish_from_checkpoint(Session(recipe, cfg, where, run_dir, spec, deepspeed, resume=resume,
                                        state={**load_state(resume), "global_step": reached}))
        return run_dir
    set_threads(cfg.cpu_threads)
    owns_group = distributed.init_deepspeed_distributed() if deepspeed else False
    try:
        session = Session(recipe, cfg, where, run_dir, spec, deepspeed, resume=resume,
                          state={**load_state(resume), "global_step": reached}, config_changes=changes)
        _build(session)  # ---- build
        with hold_run_dir(session):  # ---- run folder
            prepare_run_dir(session)
            trainer = _fit(session)  # ---- fit
            finish(session, trainer)  # ---- register
    finally:
        if owns_group or distributed.dist_info()[1] > 1:
            teardown_distributed()
    return run_dir


# ---------------------------------------------------------------- check: the config, before anything is written

def check_config(recipe: Recipe, cfg, where: str) -> str | None:
    """What the config says, checked without loading or writing anything (`playpen submit` runs this before it
    sends a job, the job again): `trainer:` and `lora:` keys and the TRL config built from them, the DeepSpeed
    file, and the key.json entry of a remote partner. Returns the DeepSpeed file's path."""
    trl_args.check_trainer(recipe.trl_config, cfg.trainer, cfg.lora, where, seed=cfg.seed,
                           defaults=recipe.trainer_defaults(cfg), forced=recipe.forced(cfg))
    if cfg.quantization and cfg.lora is None:
        raise PlaypenError(f"{where}: quantization: {cfg.quantization} trains adapters only; set lora: {{}} "
                           f"(QLoRA) or quantization: null")
    for role in ("partner", "teacher"):  # (programmatic: the built-in games' experts)
        if getattr(cfg, role, None) and getattr(cfg, role) != "programmatic":
            service.resolve(getattr(cfg, role), role)
    return modeling.resolve_deepspeed(cfg.deepspeed, where)


# ---------------------------------------------------------------- check: reruns of a run id
# A run dir holds one training: rerunning a finished run trains and rewrites nothing ("already complete"); a rerun
# with other values is refused before anything loads, naming the keys, unless allow_config_change is set.

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


# ---------------------------------------------------------------- the run folder

def run_id_of(method: str, cfg) -> str:
    """A run's identity: `run_id=` when given, else the method and a hash of the resolved config, so the same
    command (here, in a job, after a requeue, in `make demo`'s evaluation) always finds the same run folder."""
    return cfg.run_id or default_run_id(method, cfg)


def default_run_id(method: str, cfg) -> str:
    data = to_dict(cfg)
    for key in ("run_id", "storage_root", "allow_config_change"):  # (cpu_threads stays: existing ids keep)
        data.pop(key, None)
    digest = hashlib.sha1(f"{method}\n{dump_yaml(data)}".encode()).hexdigest()[:8]
    return f"{method}-{digest}"


@contextmanager
def hold_run_dir(session: Session):
    """Rank 0 holds the run dir while it trains, so a second `playpen train` of the same run stops in one line (the
    other ranks of this job are this training, not a second one). The checks in `run` read the run dir without the
    lock, before the model loaded: if another training of it moved on meanwhile, its newer checkpoints must not be
    taken for cut-off ones and deleted, so the run dir is read again under the lock."""
    if not session.is_main:
        yield
        return
    run = session.run
    with exclusive_folder(run.path, f"run folder {run.path} is in use by another playpen train",
                          "wait for it to end, or pass run_id=<new id> to start a separate run"):
        if session.recipe.find_resume(session.cfg, run) != (session.resume, session.state["global_step"]) \
                or finished_run(session.recipe, session.cfg, run):
            raise PlaypenError(f"run {run.path} changed while the model loaded (another playpen train of it "
                               f"ended?); run the same command again to continue from where it is now")
        yield


def prepare_run_dir(session: Session) -> None:
    """What is written into the run folder before training starts: the resolved config (the old one kept when
    allow_config_change changed it), metrics and checkpoints cut back to the step it resumes from."""
    run, resume = session.run, session.resume
    if session.is_main:
        run.create()
        resolved = {**to_dict(session.cfg), "run_id": run.path.name}
        resolved.pop("allow_config_change")  # a permission for this rerun, not part of what the run learns
        text = f"# playpen train {session.recipe.name} (resolved config)\n{dump_yaml(resolved)}"
        if session.config_changes:
            kept = run.path / f"config.before-step{session.state['global_step']}.yaml"
            atomic_write_text(kept, read_text(run.config, "run config"))
            print(f"[playpen] allow_config_change: continuing {run.path} at step {session.state['global_step']} with "
                  f"new {', '.join(session.config_changes)} (the old config is kept as {kept.name})")
        atomic_write_text(run.config, text)
        truncate_jsonl(run.metrics, session.state["global_step"])
        remove_incomplete(run.checkpoints, resume)
        if resume:
            print(f"[playpen] resuming {run.path} from {resume.name}")
        else:
            print(f"[playpen] training {session.recipe.name} into {run.path}")
    session.barrier()


# ---------------------------------------------------------------- build: the process, then model and tokenizer

def quiet_libraries() -> None:
    """Library warnings and progress bars kept off the screen (one-line errors stay the last line)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    for message in (".*kernels.*", ".*all_gather_into_tensor.*",
                    ".*reduce_scatter_tensor.*", ".*torch.distributed.*is deprecated.*"):
        warnings.filterwarnings("ignore", message=message)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no "unable to detect a GPU" warning per process
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would break one-line errors


def set_threads(threads: int | None) -> None:
    import torch

    if threads and not torch.cuda.is_available():
        torch.set_num_threads(int(threads))


def _build(session: Session) -> None:
    import transformers

    cfg = session.cfg
    spec = session.spec
    model_config = spec.get("model_config", {})
    cfg.quantization = quantization = service.quantization(spec, cfg.quantization)  # decided once, here
    session.args = session.make_args()  # (after quantization is known: it decides bf16 autocast on CPU)
    _ = session.args.device  # initializes the process group under torchrun (gloo on CPU)
    transformers.set_seed(cfg.seed)
    dtype = modeling.model_dtype(cfg.dtype, cfg.lora is None, session.deepspeed is not None)
    session.tokenizer = modeling.load_tokenizer(spec["huggingface_id"])
    adapter = model_config.get("peft_model")
    session.model = session.recipe.load_model(session, spec["huggingface_id"], quantization, dtype, adapter)
    if adapter and cfg.lora is None:
        raise PlaypenError(f"{session.where}: model {cfg.model} is an adapter (peft_model); full-weight training "
                           f"needs lora: {{}} or a merged model")
    session.peft_config = None if adapter else modeling.lora_config(cfg.lora, session.model, session.where)


# ---------------------------------------------------------------- fit

def _fit(session: Session):
    """The recipe trains; what stops it ends in one line saying how the same command goes on."""
    run_dir = session.run
    try:
        return session.recipe.fit(session)
    except PlaypenError:  # e.g. the teacher failed: the message is the last line, not a progress bar
        close_progress_bars()
        raise
    except Exception as e:
        if (why := storage_full(e)) is None:
            raise
        close_progress_bars()
        # a checkpoint cut off here has no playpen_state.json: the rerun skips it and resumes before it
        raise PlaypenError(f"cannot write into {run_dir.path} ({why}); free space (or raise the quota or "
                           f"`ulimit -f`) and rerun the same command to resume from the last complete "
                           f"checkpoint") from None
    except KeyboardInterrupt:  # Ctrl-C: say where the same command picks up
        close_progress_bars()
        saved = checkpoints_in(run_dir.checkpoints)
        raise KeyboardInterrupt(f"rerun the same command to resume from {saved[-1][1].name}" if saved
                                else "no checkpoint yet: rerun the same command to start again") from None


def close_progress_bars() -> None:
    """End the Trainer's progress bar (tqdm draws it again when the process exits, after any message)."""
    from tqdm import tqdm

    for bar in list(tqdm._instances):
        bar.close()


# ---------------------------------------------------------------- register: final model, registry entry, finished

def registry_entry(session: Session, final_dir: Path, adapter: bool) -> dict:
    """clemcore ModelSpec for the trained model: the base model plus peft_model, or the full weights."""
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
    """The end of a training: the final model in <run>/final, its registry entry (<run>/model_registry.json, what
    `playpen eval RUN` loads), the learning curve, and finished.json last."""
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
    replace_folder(staged, final_dir, run.path, closed=True)
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


def _finish_from_checkpoint(session: Session) -> None:
    """The job was killed after its last checkpoint (max_steps) and before finished.json: finish from that
    checkpoint (final model, registry entry, curve) without training a step more."""
    session.tokenizer = modeling.load_tokenizer(session.spec["huggingface_id"])
    with hold_run_dir(session):
        session.log(f"[playpen] {session.resume} is the last step ({session.state['global_step']}); finishing "
                    f"{session.run.path} from it, nothing trained")
        finish(session, CheckpointAsFinal(session.resume, session.state["global_step"]))


# ---------------------------------------------------------------- the end of the process

def teardown_distributed() -> None:
    distributed.teardown()
    try:
        from accelerate.state import AcceleratorState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
    except Exception:
        pass
