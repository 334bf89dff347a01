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
The parts: `recipe.py` (the API a method implements), `run_folder.py` (run id, lock, preparing the folder),
`reruns.py` (which reruns are complete or allowed), `registration.py` (final model, registry entry, finished.json),
`process.py` (library quieting, threads, distributed teardown); this module runs them in order.
"""
from __future__ import annotations

import importlib

from playpen import distributed
from playpen.config import find_config, load_config
from playpen.errors import PlaypenError
from playpen.models import modeling, service
from playpen.storage import RunDir, checkpoints_in, storage_full
from playpen.train import METHODS, trl_args
from playpen.train.checkpoints import CheckpointAsFinal, check_fits, load_state
from playpen.train.process import close_progress_bars, quiet_libraries, set_threads, teardown_distributed
from playpen.train.recipe import Recipe, Session
from playpen.train.registration import finish
from playpen.train.reruns import already_complete, config_changes, finished_run
from playpen.train.run_folder import hold_run_dir, prepare_run_dir, run_id_of


def keys_help(method: str) -> str:
    """Where every config key of `method` is described, for a message refusing an unknown one."""
    return f"every key: `playpen train {method} --help`"


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
    from playpen.models.service import resolve

    for role in ("partner", "teacher"):  # (programmatic: the built-in games' experts)
        if getattr(cfg, role, None) and getattr(cfg, role) != "programmatic":
            resolve(getattr(cfg, role), role)
    return modeling.resolve_deepspeed(cfg.deepspeed, where)


@service.once  # the learner and the teacher are resolved once per run (checked, loaded, registered)
def run(method: str, config_path: str | None, overrides: list[str]) -> RunDir:
    recipe = load_recipe(method)
    config_path = find_config(config_path) if config_path else None  # a file, or a shipped config's name
    cfg = load_config(recipe.Config, config_path, overrides, keys_help=keys_help(method))
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
        _build(session)
        with hold_run_dir(session):
            prepare_run_dir(session)
            try:
                trainer = recipe.fit(session)
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
            finish(session, trainer)
    finally:
        if owns_group or distributed.dist_info()[1] > 1:
            teardown_distributed()
    return run_dir


def _finish_from_checkpoint(session: Session) -> None:
    """The job was killed after its last checkpoint (max_steps) and before finished.json: finish from that
    checkpoint (final model, registry entry, curve) without training a step more."""
    session.tokenizer = modeling.load_tokenizer(session.spec["huggingface_id"])
    with hold_run_dir(session):
        session.log(f"[playpen] {session.resume} is the last step ({session.state['global_step']}); finishing "
                    f"{session.run.path} from it, nothing trained")
        finish(session, CheckpointAsFinal(session.resume, session.state["global_step"]))


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
