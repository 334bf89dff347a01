"""The life cycle every method shares (torchtune-style): check → run dir → build → fit → register.

    check   config keys, model, quantization, DeepSpeed file, the method's own inputs (data, game, teacher, key),
            the last checkpoint of the run dir: all before anything is written, each failure one PlaypenError line
    build   TRL arguments (before the model, so ZeRO-3 partitions it at load), tokenizer, model, LoRA
    fit     the method's recipe (`sft.py`, `dpo.py`, `grpo.py`) builds its TRL trainer and trains, resuming
            from the last complete checkpoint
    end     final model/adapter in <run>/final, <run>/model_registry.json entry, learning curve PNG

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
Which reruns are complete or allowed is `reruns.py`'s.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from playpen.config import bounded, dump_yaml, load_config, to_dict
from playpen.errors import PlaypenError
from playpen.models import service
from playpen.storage import (Location, Name, RunDir, atomic_write_json, atomic_write_text, checkpoints_in,
                             exclusive_folder, storage_full)
from playpen.train import METHODS, distributed, modeling, trl_args
from playpen.train.checkpoints import (CheckpointAsFinal, find_resume_checkpoint, load_state, remove_incomplete,
                                       resume_state_callback, truncate_jsonl)
from playpen.train.metrics import CURVE_FILE, metrics_callback, plot_curve
from playpen.train.reruns import (FINAL_DIR, FINISHED_FILE, NOT_COMPARED, REGISTRY_FILE,  # noqa: F401 (re-exported)
                                  already_complete, config_changes, finished_run)



@dataclass
class TrainConfig:
    """Keys every method shares. Method configs add their own (data, game, ...)."""

    experiment: Name                     # run dir: <storage_root>/<experiment>/<run_id>
    model: str = "playpen-tiny"          # registry name (`playpen list models`) or a local Hugging Face folder
    run_id: Name | None = None           # default: <method>-<hash of this config>, so a rerun resumes
    storage_root: Location | None = None  # default: $PLAYPEN_STORAGE, else ./runs
    seed: int = bounded(42, ge=0)     # numpy and torch take seeds >= 0
    lora: dict | None = field(default_factory=dict)  # LoraConfig keys over the seed default; null = full weights
    quantization: str | None = None      # null | 4bit | 8bit (bitsandbytes; QLoRA with lora)
    dtype: str = "auto"                  # auto | float32 | bfloat16 | float16 (weights as loaded)
    deepspeed: str | None = None         # e.g. configs/deepspeed/zero2.json
    register: bool = True                # write <run>/model_registry.json for `playpen eval`
    allow_config_change: bool = False    # rerun an existing run id with other values (e.g. more max_steps);
                                         # refused without it, so one run never mixes two configs
    cpu_threads: int | None = bounded(None, ge=1)  # CPU only: torch intra-op threads (1 is fastest for tiny
                                         # models on a busy machine); null = torch's default
    trainer: dict = field(default_factory=dict)  # the TRL config's own keys (max_steps, learning_rate, ...)


class Recipe:
    """One training method. Subclasses set `name`, `Config`, `trl_config` and implement `fit`."""

    name = ""
    Config: type = TrainConfig
    trl_config = ""  # class name in trl
    next_step = "playpen eval {name}"  # what to do with the registered model ({name}); None: nothing to say
    finishes_from_checkpoint = True  # a last checkpoint at max_steps is the final model (False: fit writes more)

    def check(self, cfg, where: str) -> None:
        """Validate the method's own inputs (files, game, teacher); must not write anything."""

    def trainer_defaults(self, cfg) -> dict:
        return {}

    def forced(self, cfg) -> dict:
        """TRL keys derived from playpen keys (e.g. num_generations from group_size): not settable in trainer:."""
        return {}

    def find_resume(self, cfg, run: RunDir) -> tuple[Path | None, int]:
        """(checkpoint to resume from or None, global step reached so far); validates the checkpoint."""
        checkpoint = find_resume_checkpoint(run.checkpoints)
        state = load_state(checkpoint)
        return checkpoint, state.get("global_step", state["step"])

    def planned_steps(self, cfg) -> int:
        """The global step a complete run of `cfg` ends at: trainer.max_steps as TRL reads it; <= 0 when it is not
        known before training (num_train_epochs)."""
        return int({**self.trainer_defaults(cfg), **cfg.trainer}.get("max_steps", -1))

    def final_step(self, session: "Session", trainer) -> int:
        """The optimizer step the finished training ended at (recorded in finished.json)."""
        return trainer.state.global_step

    def is_complete(self, cfg, run: RunDir, final_step: int) -> bool:
        """Whether a finished run already did what `cfg` asks: resuming it would train past max_steps (TRL runs one
        more step when resumed at max_steps). Runs without a planned step count are done once finished."""
        planned = self.planned_steps(cfg)
        return planned <= 0 or final_step >= planned

    def load_model(self, session: "Session", path: str, quantization: str | None, dtype, adapter: str | None):
        """The model `fit` trains: a causal LM (the reward recipe loads a sequence classifier instead)."""
        return modeling.load_model(path, quantization, dtype, peft_model=adapter)

    def fit(self, session: "Session") -> Any:
        """Train; return the trainer whose model is saved as final."""
        raise NotImplementedError


@dataclass
class Session:
    """Everything a recipe needs, built by `run`."""

    recipe: Recipe
    cfg: Any
    where: str
    run: RunDir
    spec: dict
    deepspeed: str | None
    tokenizer: Any = None
    model: Any = None
    peft_config: Any = None
    args: Any = None
    resume: Path | None = None
    state: dict = field(default_factory=dict)
    config_changes: dict = field(default_factory=dict)  # {key: (old, new)} allowed by allow_config_change
    _bf16: bool | None = None  # autocast_bf16(), decided once

    @property
    def rank(self) -> int:
        return distributed.dist_info()[0]

    @property
    def world_size(self) -> int:
        return distributed.dist_info()[1]

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str) -> None:
        if self.is_main:
            print(message, flush=True)

    def make_args(self, output_dir: Path | None = None, **extra):
        import trl

        cls = getattr(trl, self.recipe.trl_config)
        defaults = {**self.recipe.trainer_defaults(self.cfg), "bf16": self.autocast_bf16()}
        return trl_args.trl_arguments(
            cls, {**self.cfg.trainer, **extra}, self.where, output_dir=output_dir or self.run.checkpoints,
            seed=self.cfg.seed, deepspeed=self.deepspeed, defaults=defaults, forced=self.recipe.forced(self.cfg))

    def autocast_bf16(self) -> bool:
        """bf16 autocast or not (trainer.bf16 when set; modeling.autocast_bf16 decides otherwise), said once."""
        if self._bf16 is None:
            self._bf16 = modeling.autocast_bf16(self.cfg.trainer.get("bf16"), self.spec["huggingface_id"],
                                                self.cfg.quantization, self.deepspeed is not None)
            if self._bf16 and not distributed.has_cuda():
                self.log("[playpen] training under bf16 autocast (this CPU computes bf16 natively; "
                         "trainer.bf16=false trains in float32)")
        return self._bf16

    def callbacks(self, extra_state=dict, step_offset: int = 0, resumed_step: int = 0) -> list:
        return [metrics_callback(self.run.metrics, self.run.logs, resumed_step, step_offset),
                resume_state_callback(extra_state, step_offset)]

    def barrier(self) -> None:
        distributed.barrier()


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


def _quiet_libraries() -> None:
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


def _set_threads(threads: int | None) -> None:
    import torch

    if threads and not torch.cuda.is_available():
        torch.set_num_threads(int(threads))


def load_recipe(method: str) -> Recipe:
    if method not in METHODS:
        raise PlaypenError(f"unknown method '{method}'; choose one of: {', '.join(METHODS)}")
    return importlib.import_module(METHODS[method]).RECIPE


def check_config(recipe: Recipe, cfg, where: str) -> str | None:
    """What the config says, checked without loading or writing anything (`playpen submit` runs this before it
    sends a job, the job again): `trainer:` and `lora:` keys and the TRL config built from them, the DeepSpeed
    file, and the key.json entry of a remote partner. Returns the DeepSpeed file's path."""
    trl_args.check_trainer(recipe.trl_config, cfg.trainer, cfg.lora, where, seed=cfg.seed,
                           defaults=recipe.trainer_defaults(cfg), forced=recipe.forced(cfg))
    if cfg.quantization and cfg.lora is None:
        raise PlaypenError(f"{where}: quantization: {cfg.quantization} trains adapters only; set lora: {{}} "
                           f"(QLoRA) or quantization: null")
    if getattr(cfg, "teacher", None) and cfg.teacher != "programmatic":  # (the built-in games' experts)
        from playpen.models.service import resolve

        resolve(cfg.teacher, "teacher")
    return modeling.resolve_deepspeed(cfg.deepspeed, where)


@service.once  # the learner and the teacher are resolved once per run (checked, loaded, registered)
def run(method: str, config_path: str | None, overrides: list[str]) -> RunDir:
    recipe = load_recipe(method)
    cfg = load_config(recipe.Config, config_path, overrides)
    where = str(config_path) if config_path else "overrides"
    # ---- check: nothing is written before all of this passed
    deepspeed = check_config(recipe, cfg, where)
    modeling.check_quantization(cfg.quantization)
    spec = modeling.resolve_model_spec(cfg.model)
    from playpen.registry import check_remote_key

    check_remote_key(spec, "model")  # a hub model not cached while offline, a gated one without its key
    recipe.check(cfg, where)
    run_dir = RunDir.for_experiment(cfg.storage_root, cfg.experiment, run_id_of(method, cfg))
    changes = config_changes(run_dir, method, cfg)
    if finished := finished_run(recipe, cfg, run_dir):
        if distributed.dist_info()[0] == 0:
            print(already_complete(recipe, cfg, run_dir, finished), flush=True)
        return run_dir
    resume, reached = recipe.find_resume(cfg, run_dir)
    _quiet_libraries()
    if resume is not None and recipe.finishes_from_checkpoint and 0 < recipe.planned_steps(cfg) <= reached:
        _finish_from_checkpoint(Session(recipe, cfg, where, run_dir, spec, deepspeed, resume=resume,
                                        state={**load_state(resume), "global_step": reached}))
        return run_dir
    _set_threads(cfg.cpu_threads)
    owns_group = distributed.init_deepspeed_distributed() if deepspeed else False
    try:
        session = Session(recipe, cfg, where, run_dir, spec, deepspeed, resume=resume,
                          state={**load_state(resume), "global_step": reached}, config_changes=changes)
        _build(session)
        with _hold_run_dir(session):
            _prepare_run_dir(session)
            try:
                trainer = recipe.fit(session)
            except PlaypenError:  # e.g. the teacher failed: the message is the last line, not a progress bar
                _close_progress_bars()
                raise
            except Exception as e:
                if (why := storage_full(e)) is None:
                    raise
                _close_progress_bars()
                # a checkpoint cut off here has no playpen_state.json: the rerun skips it and resumes before it
                raise PlaypenError(f"cannot write into {run_dir.path} ({why}); free space (or raise the quota or "
                                   f"`ulimit -f`) and rerun the same command to resume from the last complete "
                                   f"checkpoint") from None
            except KeyboardInterrupt:  # Ctrl-C: say where the same command picks up
                _close_progress_bars()
                saved = checkpoints_in(run_dir.checkpoints)
                raise KeyboardInterrupt(f"rerun the same command to resume from {saved[-1][1].name}" if saved
                                        else "no checkpoint yet: rerun the same command to start again") from None
            _finish(session, trainer)
    finally:
        if owns_group or distributed.dist_info()[1] > 1:
            _teardown_distributed()
    return run_dir


@contextmanager
def _hold_run_dir(session: Session):
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


def _finish_from_checkpoint(session: Session) -> None:
    """The job was killed after its last checkpoint (max_steps) and before finished.json: finish from that
    checkpoint (final model, registry entry, curve) without training a step more."""
    session.tokenizer = modeling.load_tokenizer(session.spec["huggingface_id"])
    with _hold_run_dir(session):
        session.log(f"[playpen] {session.resume} is the last step ({session.state['global_step']}); finishing "
                    f"{session.run.path} from it, nothing trained")
        _finish(session, CheckpointAsFinal(session.resume, session.state["global_step"]))


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


def _prepare_run_dir(session: Session) -> None:
    run, resume = session.run, session.resume
    if session.is_main:
        run.create()
        resolved = {**to_dict(session.cfg), "run_id": run.path.name}
        resolved.pop("allow_config_change")  # a permission for this rerun, not part of what the run learns
        text = f"# playpen train {session.recipe.name} (resolved config)\n{dump_yaml(resolved)}"
        if session.config_changes:
            kept = run.path / f"config.before-step{session.state['global_step']}.yaml"
            atomic_write_text(kept, run.config.read_text())
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


def registry_entry(session: Session, final_dir: Path, adapter: bool) -> dict:
    """clemcore ModelSpec for the trained model: the base model plus peft_model, or the full weights."""
    spec = copy.deepcopy(session.spec)
    raw = service.registered_entry(session.cfg.model)
    if raw and "{" in str(raw.get("huggingface_id", "")):  # a placeholder such as {playpen_models}
        spec["huggingface_id"] = raw["huggingface_id"]  # stays valid on other machines / containers
    name = f"{session.cfg.experiment}-{session.run.path.name}"
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


def _finish(session: Session, trainer) -> None:
    from playpen.registry import register_model

    run = session.run
    final_dir = run.path / FINAL_DIR
    trainer.save_model(str(final_dir))  # collective under DeepSpeed; writes on rank 0
    if not session.is_main:
        return
    session.tokenizer.save_pretrained(str(final_dir))
    adapter = (final_dir / "adapter_config.json").is_file()
    plot_curve(run.metrics, run.path / CURVE_FILE, title=f"{session.recipe.name}: {run.name}")
    name = None
    if session.cfg.register:
        spec = registry_entry(session, final_dir, adapter)
        register_model(spec, run.path / REGISTRY_FILE)
        name = spec["model_name"]
        print(f"[playpen] registered model {name} in {run.path / REGISTRY_FILE}")
        if session.recipe.next_step:
            print(f"[playpen] next: {session.recipe.next_step.format(name=name)}")
    # last: a rerun of the same command finds the run complete only once everything above is on disk
    atomic_write_json(run.path / FINISHED_FILE, {"global_step": session.recipe.final_step(session, trainer),
                                                 "final": str(final_dir), "model_name": name})
    print(f"[playpen] done: {run.path} (curve: {run.path / CURVE_FILE})")


def _close_progress_bars() -> None:
    """End the Trainer's progress bar (tqdm draws it again when the process exits, after any message)."""
    from tqdm import tqdm

    for bar in list(tqdm._instances):
        bar.close()


def _teardown_distributed() -> None:
    distributed.teardown()
    try:
        from accelerate.state import AcceleratorState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
    except Exception:
        pass
