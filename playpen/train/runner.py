"""The life cycle every method shares (torchtune-style): check → run dir → build → fit → register.

    check   config keys, model, quantization, DeepSpeed file, the method's own inputs (data, game, teacher, key),
            the last checkpoint of the run dir: all before anything is written, each failure one PlaypenError line
    build   TRL arguments (before the model, so ZeRO-3 partitions it at load), tokenizer, model, LoRA
    fit     the method's recipe (`sft.py`, `dpo.py`, `grpo.py`) builds its TRL trainer and trains, resuming
            from the last complete checkpoint
    end     final model/adapter in <run>/final, <run>/model_registry.json entry, learning curve PNG

The run id defaults to `<method>-<hash of the resolved config>`, so rerunning the same command finds the same
run dir and resumes; `run_id=...` names it explicitly.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playpen.config import dump_yaml, load_config, to_dict
from playpen.errors import PlaypenError
from playpen.storage import RunDir, atomic_write_text
from playpen.train import METHODS, builders
from playpen.train.checkpoints import (find_resume_checkpoint, load_state, remove_incomplete,
                                       resume_state_callback, truncate_jsonl)
from playpen.train.metrics import CURVE_FILE, metrics_callback, plot_curve

FINAL_DIR = "final"
REGISTRY_FILE = "model_registry.json"


@dataclass
class TrainConfig:
    """Keys every method shares. Method configs add their own (data, game, ...)."""

    experiment: str                      # run dir: <storage_root>/<experiment>/<run_id>
    model: str = "playpen-tiny"          # registry name (`playpen list models`) or a local Hugging Face folder
    run_id: str | None = None            # default: <method>-<hash of this config>, so a rerun resumes
    storage_root: str | None = None      # default: $PLAYPEN_STORAGE, else ./runs
    seed: int = 42
    lora: dict | None = field(default_factory=dict)  # LoraConfig keys over the seed default; null = full weights
    quantization: str | None = None      # null | 4bit | 8bit (bitsandbytes; QLoRA with lora)
    dtype: str = "auto"                  # auto | float32 | bfloat16 | float16 (weights as loaded)
    deepspeed: str | None = None         # e.g. configs/deepspeed/zero2.json
    register: bool = True                # write <run>/model_registry.json for `playpen eval`
    cpu_threads: int | None = None       # CPU only: torch intra-op threads (1 is fastest for tiny models on a
                                         # busy machine); null = torch's default
    trainer: dict = field(default_factory=dict)  # the TRL config's own keys (max_steps, learning_rate, ...)


class Recipe:
    """One training method. Subclasses set `name`, `Config`, `trl_config` and implement `fit`."""

    name = ""
    Config: type = TrainConfig
    trl_config = ""  # class name in trl

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

    @property
    def rank(self) -> int:
        return builders.dist_info()[0]

    @property
    def world_size(self) -> int:
        return builders.dist_info()[1]

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str) -> None:
        if self.is_main:
            print(message, flush=True)

    def make_args(self, output_dir: Path | None = None, **extra):
        import trl

        cls = getattr(trl, self.recipe.trl_config)
        return builders.trl_arguments(
            cls, {**self.cfg.trainer, **extra}, self.where, output_dir=output_dir or self.run.checkpoints,
            seed=self.cfg.seed, deepspeed=self.deepspeed, defaults=self.recipe.trainer_defaults(self.cfg),
            forced=self.recipe.forced(self.cfg))

    def callbacks(self, extra_state=dict, step_offset: int = 0, resumed_step: int = 0) -> list:
        return [metrics_callback(self.run.metrics, self.run.logs, resumed_step, step_offset),
                resume_state_callback(extra_state, step_offset)]

    def barrier(self) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def default_run_id(method: str, cfg) -> str:
    data = to_dict(cfg)
    data.pop("run_id", None)
    data.pop("storage_root", None)
    digest = hashlib.sha1(f"{method}\n{dump_yaml(data)}".encode()).hexdigest()[:8]
    return f"{method}-{digest}"


def _quiet_libraries() -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    for message in (".*kernels.*", ".*is_gradient_checkpointing.*", ".*all_gather_into_tensor.*",
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


def run(method: str, config_path: str | None, overrides: list[str]) -> RunDir:
    import logging

    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)  # "pip install kernels" noise
    recipe = load_recipe(method)
    cfg = load_config(recipe.Config, config_path, overrides)
    where = str(config_path) if config_path else "overrides"
    # ---- check: nothing is written before all of this passed
    builders.check_sections(recipe.trl_config, cfg.trainer, cfg.lora, recipe.forced(cfg), where)
    builders.check_quantization(cfg.quantization)
    if cfg.quantization and cfg.lora is None:
        raise PlaypenError(f"{where}: quantization: {cfg.quantization} trains adapters only; set lora: {{}} "
                           f"(QLoRA) or quantization: null")
    deepspeed = builders.resolve_deepspeed(cfg.deepspeed, where)
    spec = builders.resolve_model_spec(cfg.model)
    recipe.check(cfg, where)
    run_dir = RunDir.for_experiment(cfg.storage_root, cfg.experiment, cfg.run_id or default_run_id(method, cfg))
    resume, reached = recipe.find_resume(cfg, run_dir)
    _quiet_libraries()
    _set_threads(cfg.cpu_threads)
    owns_group = builders.init_deepspeed_distributed() if deepspeed else False
    try:
        session = Session(recipe, cfg, where, run_dir, spec, deepspeed, resume=resume,
                          state={**load_state(resume), "global_step": reached})
        _build(session)
        _prepare_run_dir(session)
        trainer = recipe.fit(session)
        _finish(session, trainer)
    finally:
        if owns_group or builders.dist_info()[1] > 1:
            _teardown_distributed()
    return run_dir


def _build(session: Session) -> None:
    import transformers

    cfg = session.cfg
    session.args = session.make_args()
    _ = session.args.device  # initializes the process group under torchrun (gloo on CPU)
    transformers.set_seed(cfg.seed)
    spec = session.spec
    model_config = spec.get("model_config", {})
    quantization = cfg.quantization or ("4bit" if model_config.get("load_in_4bit") else
                                        "8bit" if model_config.get("load_in_8bit") else None)
    if quantization != cfg.quantization:
        builders.check_quantization(quantization)
        cfg.quantization = quantization
    dtype = builders.model_dtype(cfg.dtype, cfg.lora is None, session.deepspeed is not None)
    session.tokenizer = builders.load_tokenizer(spec["huggingface_id"])
    adapter = model_config.get("peft_model")
    session.model = builders.load_model(spec["huggingface_id"], quantization, dtype, peft_model=adapter)
    if adapter and cfg.lora is None:
        raise PlaypenError(f"{session.where}: model {cfg.model} is an adapter (peft_model); full-weight training "
                           f"needs lora: {{}} or a merged model")
    session.peft_config = None if adapter else builders.lora_config(cfg.lora, session.model, session.where)


def _prepare_run_dir(session: Session) -> None:
    run, resume = session.run, session.resume
    if session.is_main:
        run.create()
        resolved = {**to_dict(session.cfg), "run_id": run.path.name}
        text = f"# playpen train {session.recipe.name} (resolved config)\n{dump_yaml(resolved)}"
        if run.config.is_file() and run.config.read_text() != text:
            print(f"[playpen] note: {run.config} differs from this config; continuing the run with this one")
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
    from playpen.registry import model_entries

    spec = copy.deepcopy(session.spec)
    raw = next((e.spec for e in model_entries() if e.name == session.cfg.model), None)
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
    if session.cfg.register:
        spec = registry_entry(session, final_dir, adapter)
        register_model(spec, run.path / REGISTRY_FILE)
        print(f"[playpen] registered model {spec['model_name']} in {run.path / REGISTRY_FILE}")
        print(f"[playpen] evaluate it with: playpen eval {spec['model_name']}")
    print(f"[playpen] done: {run.path} (curve: {run.path / CURVE_FILE})")


def _teardown_distributed() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    try:
        from accelerate.state import AcceleratorState, PartialState

        AcceleratorState._reset_state(reset_partial_state=True)
        PartialState._reset_state()
    except Exception:
        pass
