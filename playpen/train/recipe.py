"""The recipe API every training method implements (`sft.py`, `dpo.py`, `grpo.py`, `reward.py`, `rloo.py`): the
keys every config shares (TrainConfig), the method's hooks (Recipe) and what `runner.run` builds for it (Session).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playpen import distributed
from playpen.config import bounded, documented
from playpen.defaults import MAX_SEED
from playpen.models import modeling
from playpen.storage import Location, Name, RunDir
from playpen.train import trackers, trl_args
from playpen.train.checkpoints import find_resume_checkpoint, load_state, resume_state_callback
from playpen.train.metrics import metrics_callback


@dataclass
class TrainConfig:
    """Keys every method shares. Method configs add their own (data, game, ...)."""

    experiment: Name = documented(help="the run folder is <storage_root>/<experiment>/<run_id>")
    model: str = documented("playpen-tiny", help="registry name (`playpen list models`) or a local Hugging Face "
                                                 "folder")
    run_id: Name | None = documented(None, help="default: <method>-<hash of this config>, so a rerun resumes")
    storage_root: Location | None = documented(None, help="default: $PLAYPEN_STORAGE, else ./runs")
    seed: int = bounded(42, ge=0, le=MAX_SEED, help="seeds Python, numpy, torch and the data order (numpy takes "
                                                    "seeds in [0, 2^32))")
    lora: dict | None = documented(help="peft.LoraConfig keys over the seed default; null: train the full weights",
                                   factory=dict)
    quantization: str | None = documented(None, help="null, 4bit or 8bit (bitsandbytes; QLoRA with lora)")
    dtype: str = documented("auto", help="auto, float32, bfloat16 or float16: the weights as loaded")
    deepspeed: str | None = documented(None, help="a DeepSpeed config, e.g. deepspeed/zero2.json")
    register: bool = documented(True, help="write <run>/model_registry.json, so `playpen eval` finds the model")
    allow_config_change: bool = documented(False, help="rerun an existing run id with other values (e.g. more "
                                                        "max_steps); refused without it, so one run never mixes "
                                                        "two configs")
    cpu_threads: int | None = bounded(None, ge=1, le=4096, help="CPU only: torch intra-op threads (1 is fastest "
                                                                "for tiny models on a busy machine); null: torch's "
                                                                "default")
    trainer: dict = documented(help="the TRL config's own keys (max_steps, learning_rate, ...); those playpen sets "
                                    "itself (output_dir, seed, deepspeed, ...) are refused here", factory=dict)


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
    final_files: dict = field(default_factory=dict)  # {file name: JSON value} the recipe adds to final/
    _bf16: bool | None = None  # autocast_bf16(), decided once
    vllm: Any = None  # use_vllm: the colocated vLLM engine (playpen.models.vllm_engine), started on first play
    vllm_synced: Any = None  # the step or round whose weights it holds

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
        defaults = {**self.recipe.trainer_defaults(self.cfg), "bf16": self.autocast_bf16(),
                    "run_name": self.run.path.name, "project": self.cfg.experiment}  # trackers: run id, experiment
        trackers.prepare(self.trackers, self.run.path, self.cfg.experiment, self.where)
        return trl_args.trl_arguments(
            cls, {**self.cfg.trainer, **extra}, self.where, output_dir=output_dir or self.run.checkpoints,
            seed=self.cfg.seed, deepspeed=self.deepspeed, defaults=defaults, forced=self.recipe.forced(self.cfg))

    def autocast_bf16(self) -> bool:
        """bf16 autocast or not (trainer.bf16 when set; modeling.autocast_bf16 decides otherwise), said once."""
        if self._bf16 is None:
            requested = self.cfg.trainer.get("bf16")
            where = self.spec["huggingface_id"], self.cfg.quantization, self.deepspeed is not None
            self._bf16 = modeling.autocast_bf16(requested, *where)
            on_cpu = not distributed.has_cuda()
            if on_cpu and requested:
                self.log("[playpen] training under bf16 autocast (trainer.bf16=true)")
            elif on_cpu and requested is None and modeling.cpu_probe_decides(*where):
                speedup = modeling.cpu_bf16_speedup()
                self.log(f"[playpen] training under bf16 autocast: bf16 products measured {speedup:.2f}x float32 "
                         "on this CPU (trainer.bf16=false trains in float32)" if self._bf16 else
                         f"[playpen] training in float32: bf16 products measured {speedup:.2f}x float32 on this CPU, "
                         f"below {modeling.BF16_MIN_SPEEDUP}x (trainer.bf16=true forces bf16 autocast)")
        return self._bf16

    @property
    def trackers(self) -> list[str]:
        """trainer.report_to's trackers (wandb, trackio, mlflow), [] for none."""
        return trackers.requested(self.cfg.trainer.get("report_to"), self.where)

    def callbacks(self, extra_state=dict, step_offset: int = 0, resumed_step: int = 0) -> list:
        found = [metrics_callback(self.run.metrics, self.run.logs, resumed_step, step_offset),
                 resume_state_callback(extra_state, step_offset)]
        if self.trackers:
            found.append(trackers.config_callback(self.trackers, self.run.config))
        return found

    def barrier(self) -> None:
        distributed.barrier()
