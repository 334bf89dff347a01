"""TRL's training arguments from a config's `trainer:` section: keys checked against the TRL config class's
fields, values typed and bounded, playpen's own keys (run directory, seed, DeepSpeed, ...) set over them.

`check_trainer` proves a section builds before anything is written or loaded; `trl_arguments` builds the real
arguments. TRL and torch are imported inside the functions.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from playpen.config import Bounds, check_keys, coerce
from playpen.errors import PlaypenError
from playpen.train.trackers import requested

# Keys playpen sets itself from the top level of the config; users set them there, not under `trainer:`.
MANAGED = {"output_dir": "the run directory", "seed": "seed", "data_seed": "seed", "deepspeed": "deepspeed",
           "use_cpu": "automatic",
           "resume_from_checkpoint": "automatic resume", "push_to_hub": "not supported",
           "logging_nan_inf_filter": "playpen stops on a non-finite loss"}
# transformers 5.18 renamed these (old: new); a config may use either name, read as the installed version's
RENAMED = {"gradient_checkpointing": "activation_checkpointing",
           "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}


def current_names(section: dict, fields: set[str]) -> dict:
    """`section` with each renamed key spelled as the installed TRL/transformers config class spells it."""
    out = dict(section)
    for old, new in RENAMED.items():
        current, other = (new, old) if new in fields else (old, new)
        if other in out:
            out.setdefault(current, out.pop(other))
    return out
# TRL keys that recipes set from playpen's own keys (Recipe.forced), by the key a user sets instead
FORCED_FROM = {"num_generations": "group_size", "temperature": "temperature",
               "reward_weights": "game_reward_weight and reward_weight",
               "mask_truncated_completions": "mask_truncated (per learner reply, not per episode)"}
# Ranges of TRL's numeric `trainer:` keys that TRL does not check itself: out of range, they fail deep inside
# training (a DataLoader of batch size 0), or silently mean something else (max_steps -1: train by epochs).
MAX_STEPS = 10_000_000  # optimizer steps of one run: years of the fastest step (a typo like 10**26 runs until killed)
TRAINER_BOUNDS = {
    "learning_rate": Bounds(gt=0), "weight_decay": Bounds(ge=0), "max_grad_norm": Bounds(ge=0),
    "per_device_train_batch_size": Bounds(ge=1), "per_device_eval_batch_size": Bounds(ge=1),
    "gradient_accumulation_steps": Bounds(ge=1), "num_train_epochs": Bounds(gt=0),
    "max_steps": Bounds(ge=1, le=MAX_STEPS, hint="leave max_steps out to train num_train_epochs epochs instead"),
    "warmup_steps": Bounds(ge=0, hint="a count of steps, or below 1 a share of all steps"),
    "logging_steps": Bounds(gt=0), "save_steps": Bounds(gt=0), "eval_steps": Bounds(gt=0),
    "save_total_limit": Bounds(ge=1), "max_length": Bounds(ge=1), "max_prompt_length": Bounds(ge=1),
    "max_completion_length": Bounds(ge=1), "generation_batch_size": Bounds(ge=1),
    "steps_per_generation": Bounds(ge=1), "num_iterations": Bounds(ge=1),
    "beta": Bounds(ge=0, hint="the weight of the KL penalty to the reference model"),
}

# peft.LoraConfig's numeric keys, which it checks no further than their type (r=0 fails inside torch)
LORA_BOUNDS = {"r": Bounds(ge=1, le=65536, hint="the adapter's rank"), "lora_alpha": Bounds(gt=0),
               "lora_dropout": Bounds(ge=0, le=1)}


def nested_sections(trl_config: str) -> dict:
    """The keys of a config's nested sections, asked only when a top-level key is unknown (importing TRL takes
    seconds): `max_steps` at the top is then pointed to `trainer.max_steps`."""
    def trainer_keys() -> set[str]:
        import trl

        return {f.name for f in dataclasses.fields(getattr(trl, trl_config)) if f.init} - set(MANAGED)

    def lora_keys() -> set[str]:
        from peft import LoraConfig

        return {f.name for f in dataclasses.fields(LoraConfig) if f.init}

    return {"trainer": trainer_keys, "lora": lora_keys}


def trainer_keys_help(cls) -> str:
    """Where `trainer:`'s keys are described: TRL's own config class (its ~125 fields are not listed in a message)."""
    return f"trainer: takes the fields of trl.{cls.__name__}"


def _typed_section(cls, section: dict, where: str, name: str = "trainer", bounds: dict | None = None) -> dict:
    """`trainer:` (or `lora:`) values as the library's field declares them: numbers and booleans are checked like
    playpen's own keys (YAML's "1e-4" becomes 1e-4, "abc" for learning_rate is refused, no inf/nan) and against
    `bounds` (TRAINER_BOUNDS); other kinds of values (strategies, lists, mappings) are left to the library's own
    checks."""
    import typing

    hints = typing.get_type_hints(cls)
    bounds = TRAINER_BOUNDS if bounds is None else bounds
    typed = {}
    for key, value in section.items():
        options = [t for t in typing.get_args(hints.get(key)) if t is not type(None)] or [hints.get(key)]
        if len(options) == 1 and options[0] in (int, float, bool) and value is not None:
            value = coerce(value, options[0], f"{where}: {name}.{key}")
        if key in bounds and value is not None:
            bounds[key].check(value, f"{where}: {name}.{key}")
        typed[key] = value
    return typed


def _values_only(cls):
    """`cls` whose __post_init__ (TRL's and transformers' own checks of the values) runs without setting up a
    device or a process group: the device and process count come from the launcher's environment. The real
    arguments are built after DeepSpeed's setup (Session.make_args); this copy only checks, before any of it."""
    import torch

    return type(cls.__name__, (cls,), {
        "device": property(lambda self: torch.device("cpu")),
        "n_gpu": property(lambda self: 0),
        "world_size": property(lambda self: int(os.environ.get("WORLD_SIZE", 1))),
        "process_index": property(lambda self: int(os.environ.get("RANK", 0)))})


def check_trainer(trl_config: str, section: dict, lora: dict | None, where: str, *, seed: int, defaults: dict,
                  forced: dict) -> None:
    """Before anything is written or loaded: `trainer:` keys against the TRL config's fields, their values
    (types, ranges, then the TRL config class built from them: its own checks), and `lora:` keys against
    LoraConfig's."""
    import logging
    import warnings

    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)  # "pip install kernels" noise
    import trl
    from peft import LoraConfig

    cls = getattr(trl, trl_config)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    section = current_names(section, fields)
    for key in section:
        if key in MANAGED:
            raise PlaypenError(f"{where}: trainer.{key} is set by playpen ({MANAGED[key]}); remove it from trainer:")
        if key in forced:
            raise PlaypenError(f"{where}: trainer.{key} follows from playpen's "
                               f"{FORCED_FROM.get(key, 'own keys')}; set that instead")
    check_keys(section, fields - set(MANAGED) - set(forced), f"{where}: trainer", trainer_keys_help(cls))
    if lora is not None:
        check_keys(lora, {f.name for f in dataclasses.fields(LoraConfig) if f.init}, f"{where}: lora",
                   "lora: takes the fields of peft.LoraConfig")
        _typed_section(LoraConfig, lora, where, "lora", LORA_BOUNDS)  # (NaN would reach adapter_config.json)
    with warnings.catch_warnings():  # (deprecation notes come again, once, when the real arguments are built)
        warnings.simplefilter("ignore")
        trl_arguments(_values_only(cls), section, where, output_dir=Path("checkpoints"),  # (never created)
                      seed=seed, deepspeed=None, defaults=defaults, forced=forced)


def trl_arguments(cls, section: dict, where: str, *, output_dir: Path, seed: int, deepspeed: str | None,
                  defaults: dict, forced: dict | None = None):
    """Build TRL's config dataclass from `trainer:` keys (checked against its fields) over playpen defaults."""
    import torch

    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    section = current_names(section, fields)
    check_keys(section, fields - set(MANAGED) - set(forced or {}), f"{where}: trainer", trainer_keys_help(cls))
    cuda = torch.cuda.is_available()
    section = _typed_section(cls, section, where)
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    values = {
        "logging_steps": 1, "save_strategy": "steps", "save_steps": 50, "save_total_limit": 2,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()), "disable_tqdm": False,
        "dataloader_num_workers": 0, checkpointing: False,
        **defaults, **section, **(forced or {}),
        "output_dir": str(output_dir), "seed": seed, "data_seed": seed,
        "report_to": requested(section.get("report_to"), where) or "none",  # beside playpen's own metrics
        "logging_nan_inf_filter": False,  # the Trainer would log a nan loss as the window's mean: playpen stops
        "use_cpu": not cuda, "deepspeed": deepspeed,
    }
    if not cuda:
        values["fp16"] = False  # (bf16 on CPU is autocast, decided by modeling.autocast_bf16)
    values = {k: v for k, v in values.items() if k in fields}
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        message = " ".join(str(e).split())
        # TRL names the keys playpen sets for it: say which playpen key that is
        named = "; ".join(f"{key} is playpen's {ours}" for key, ours in FORCED_FROM.items()
                          if key in (forced or {}) and key in message)
        raise PlaypenError(f"{where}: trainer: {message}" + (f" ({named})" if named else "")) from None
