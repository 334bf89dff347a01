"""Shared builders: model + tokenizer, LoRA, bitsandbytes quantization, DeepSpeed, TRL arguments, teachers
(processes and collectives: playpen.train.distributed).

Small pure-ish functions, each checking its own input and failing with one PlaypenError line before anything
is written. Heavy libraries are imported inside the functions.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from playpen.config import Bounds, check_keys, coerce, read_text
from playpen.errors import PlaypenError
from playpen.models import ensure_packaged_weights
from playpen.registry import MODEL_REGISTRY_FILE, check_remote_key, model_entries, resolve_model
from playpen.train.distributed import dist_info, has_cuda

# The seed's LoRA: `lora: {}` in a config means exactly this; keys given there override single fields.
DEFAULT_LORA = dict(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
QUANTIZATION = ("4bit", "8bit")
REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- models

def resolve_model_spec(name: str) -> dict:
    """A registry entry (clemcore ModelSpec dict) or, for a local Hugging Face folder, a minimal spec for it."""
    path = Path(name).expanduser()
    if "/" in name and path.is_dir() and (path / "config.json").is_file():
        return {"model_name": path.name, "backend": "huggingface_local", "huggingface_id": str(path.absolute()),
                "model_config": {}}
    if path.is_dir() and not (path / MODEL_REGISTRY_FILE).is_file() and name not in {e.name for e in model_entries()}:
        raise PlaypenError(f"no config.json in {path.absolute()}: the folder holds no model; name a registered model "
                           f"(`playpen list models`), a Hugging Face model folder or a training run folder")
    spec = ensure_packaged_weights(resolve_model(name))  # playpen-tiny, smollm2-135m-instruct-q4: made on first use
    if spec.get("backend") != "huggingface_local" or not spec.get("huggingface_id"):
        raise PlaypenError(f"model '{name}' uses backend '{spec.get('backend')}'; only huggingface_local models "
                           f"can be trained (pick a local model, e.g. playpen-tiny)")
    return spec


def check_quantization(quantization: str | None) -> None:
    """Fail early, in one line, where bitsandbytes cannot load or cannot quantize on this machine."""
    if quantization is None:
        return
    if quantization not in QUANTIZATION:
        raise PlaypenError(f"quantization: expected one of {', '.join(QUANTIZATION)} or null, got {quantization!r}")
    try:
        import torch
        import bitsandbytes.functional as F

        probe = torch.randn(64, 64, device="cuda" if has_cuda() else "cpu")
        if quantization == "4bit":
            F.quantize_4bit(probe, quant_type="nf4")
        else:
            F.int8_vectorwise_quant(probe.half() if has_cuda() else probe)
    except Exception as e:  # ImportError, missing native library, unsupported device ...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PlaypenError(f"quantization: {quantization} needs bitsandbytes, which cannot load here ({reason}); "
                           f"set quantization=null or install a working bitsandbytes") from None


def bnb_config(quantization: str, compute_dtype):
    from transformers import BitsAndBytesConfig

    if quantization == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                  bnb_4bit_compute_dtype=compute_dtype, bnb_4bit_quant_storage=compute_dtype)
    return BitsAndBytesConfig(load_in_8bit=True)


def model_dtype(dtype: str, full_finetune: bool, deepspeed: bool):
    """"auto": float32 on CPU; bfloat16 on GPUs for adapters and DeepSpeed, float32 master weights otherwise."""
    import torch

    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype != "auto":
        if dtype not in names:
            raise PlaypenError(f"dtype: expected auto, {', '.join(names)}; got {dtype!r}")
        return names[dtype]
    if not has_cuda():
        return torch.float32
    if full_finetune and not deepspeed:
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise PlaypenError(f"model {path} has no chat template; playpen trains chat models only")
    return tokenizer


def load_model(path: str, quantization: str | None, dtype, peft_model: str | None = None, trainable: bool = True,
               num_labels: int | None = None):
    """AutoModelForCausalLM (optionally 4/8-bit), plus an existing adapter when the spec names one; with
    `num_labels` an AutoModelForSequenceClassification with that many outputs (reward models)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    kwargs: dict[str, Any] = {"dtype": dtype}
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
    if quantization:
        kwargs["quantization_config"] = bnb_config(quantization, dtype)
        if has_cuda():
            kwargs["device_map"] = {"": dist_info()[2]}
    auto_class = AutoModelForCausalLM if num_labels is None else AutoModelForSequenceClassification
    model = auto_class.from_pretrained(path, **kwargs)
    if quantization == "4bit" and not has_cuda():
        # bitsandbytes repacks 4-bit weights into an inference-only CPU format on the first eval-mode no-grad
        # forward (rollouts!); training afterwards breaks on layers with a bias. Keep the trainable format.
        for module in model.modules():
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
    if peft_model:
        from peft import PeftModel

        if not Path(peft_model).is_dir():
            raise PlaypenError(f"model_config.peft_model {peft_model} does not exist")
        model = PeftModel.from_pretrained(model, peft_model, is_trainable=trainable)
    model.config.use_cache = not trainable
    return model


def linear_module_names(model) -> list[str]:
    import torch

    names = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) or type(module).__name__ in ("Linear4bit", "Linear8bitLt"):
            names.add(name.rsplit(".", 1)[-1])
    return sorted(names)


def lora_config(section: dict | None, model, where: str):
    """LoraConfig from the seed default + `lora:` keys; target modules must exist in the model."""
    from peft import LoraConfig

    if section is None:
        return None
    check_keys(section, {f.name for f in dataclasses.fields(LoraConfig) if f.init}, f"{where}: lora")
    values = {**DEFAULT_LORA, **section}
    targets = values.get("target_modules")
    module_names = [name for name, _ in model.named_modules()]
    linear = linear_module_names(model)
    if isinstance(targets, str) and targets != "all-linear":
        if not any(re.fullmatch(targets, name) for name in module_names):
            raise PlaypenError(f"{where}: lora.target_modules pattern {targets!r} matches no module of the model; "
                               f"its linear layers are: {', '.join(linear)}")
    elif isinstance(targets, (list, tuple)):
        missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in module_names)]
        if missing:
            raise PlaypenError(f"{where}: lora.target_modules {', '.join(missing)} not found in the model; "
                               f"its linear layers are: {', '.join(linear)}")
    try:
        return LoraConfig(**values)
    except (TypeError, ValueError) as e:
        raise PlaypenError(f"{where}: lora: {e}") from None


# ---------------------------------------------------------------- DeepSpeed

def resolve_deepspeed(path: str | None, where: str) -> str | None:
    """A DeepSpeed JSON path: as given, relative to the working directory, or to the playpen checkout."""
    if not path:
        return None
    for candidate in (Path(path).expanduser(), REPO_ROOT / path):
        if candidate.exists():
            import json

            try:
                json.loads(read_text(candidate, "deepspeed config"))
            except json.JSONDecodeError as e:
                raise PlaypenError(f"{candidate}:{e.lineno}:{e.colno}: malformed DeepSpeed JSON: {e.msg}") from None
            return str(candidate.absolute())
    raise PlaypenError(f"{where}: deepspeed config {path} not found (e.g. configs/deepspeed/zero2.json)")


# ---------------------------------------------------------------- TRL arguments

# Keys playpen sets itself from the top level of the config; users set them there, not under `trainer:`.
MANAGED = {"output_dir": "the run directory", "seed": "seed", "data_seed": "seed", "deepspeed": "deepspeed",
           "report_to": "playpen's metrics (metrics.jsonl + tensorboard)", "use_cpu": "automatic",
           "resume_from_checkpoint": "automatic resume", "push_to_hub": "not supported"}
ALIASES = {"gradient_checkpointing": "activation_checkpointing",
           "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}
# TRL keys that recipes set from playpen's own keys (Recipe.forced), by the key a user sets instead
FORCED_FROM = {"num_generations": "group_size", "temperature": "temperature",
               "reward_weights": "game_reward_weight and reward_weight"}
# Ranges of TRL's numeric `trainer:` keys that TRL does not check itself: out of range, they fail deep inside
# training (a DataLoader of batch size 0), or silently mean something else (max_steps -1: train by epochs).
TRAINER_BOUNDS = {
    "learning_rate": Bounds(gt=0), "weight_decay": Bounds(ge=0), "max_grad_norm": Bounds(ge=0),
    "per_device_train_batch_size": Bounds(ge=1), "per_device_eval_batch_size": Bounds(ge=1),
    "gradient_accumulation_steps": Bounds(ge=1), "num_train_epochs": Bounds(gt=0),
    "max_steps": Bounds(ge=1, hint="leave max_steps out to train num_train_epochs epochs instead"),
    "warmup_steps": Bounds(ge=0, hint="a count of steps, or below 1 a share of all steps"),
    "logging_steps": Bounds(gt=0), "save_steps": Bounds(gt=0), "eval_steps": Bounds(gt=0),
    "save_total_limit": Bounds(ge=1), "max_length": Bounds(ge=1), "max_prompt_length": Bounds(ge=1),
    "max_completion_length": Bounds(ge=1), "generation_batch_size": Bounds(ge=1),
    "steps_per_generation": Bounds(ge=1), "num_iterations": Bounds(ge=1),
    "beta": Bounds(ge=0, hint="the weight of the KL penalty to the reference model"),
}


def _typed_section(cls, section: dict, where: str) -> dict:
    """`trainer:` values as the TRL field declares them: numbers and booleans are checked like playpen's own keys
    (YAML's "1e-4" becomes 1e-4, "abc" for learning_rate is refused, no inf/nan) and against TRAINER_BOUNDS;
    other kinds of values (strategies, lists, mappings) are left to TRL's own checks."""
    import typing

    hints = typing.get_type_hints(cls)
    typed = {}
    for key, value in section.items():
        options = [t for t in typing.get_args(hints.get(key)) if t is not type(None)] or [hints.get(key)]
        if len(options) == 1 and options[0] in (int, float, bool) and value is not None:
            value = coerce(value, options[0], f"{where}: trainer.{key}")
        if key in TRAINER_BOUNDS and value is not None:
            TRAINER_BOUNDS[key].check(value, f"{where}: trainer.{key}")
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
    for key in section:
        if key in MANAGED:
            raise PlaypenError(f"{where}: trainer.{key} is set by playpen ({MANAGED[key]}); remove it from trainer:")
        if key in forced:
            raise PlaypenError(f"{where}: trainer.{key} follows from playpen's "
                               f"{FORCED_FROM.get(key, 'own keys')}; set that instead")
    check_keys(section, fields - set(MANAGED) - set(forced), f"{where}: trainer")
    if lora is not None:
        check_keys(lora, {f.name for f in dataclasses.fields(LoraConfig) if f.init}, f"{where}: lora")
    with warnings.catch_warnings():  # (deprecation notes come again, once, when the real arguments are built)
        warnings.simplefilter("ignore")
        trl_arguments(_values_only(cls), section, where, output_dir=Path("checkpoints"),  # (never created)
                      seed=seed, deepspeed=None, defaults=defaults, forced=forced)


def trl_arguments(cls, section: dict, where: str, *, output_dir: Path, seed: int, deepspeed: str | None,
                  defaults: dict, forced: dict | None = None):
    """Build TRL's config dataclass from `trainer:` keys (checked against its fields) over playpen defaults."""
    import torch

    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    check_keys(section, fields - set(MANAGED) - set(forced or {}), f"{where}: trainer")
    cuda = torch.cuda.is_available()
    section = _typed_section(cls, section, where)
    for old, new in ALIASES.items():  # transformers 5 renamed these; the old name would be silently overridden
        if old in section:
            section.setdefault(new, section.pop(old))
    values = {
        "logging_steps": 1, "save_strategy": "steps", "save_steps": 50, "save_total_limit": 2,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()), "disable_tqdm": False,
        "dataloader_num_workers": 0, "activation_checkpointing": False,
        **defaults, **section, **(forced or {}),
        "output_dir": str(output_dir), "seed": seed, "data_seed": seed, "report_to": "none",
        "use_cpu": not cuda, "deepspeed": deepspeed,
    }
    if not cuda:
        values["bf16"] = values["fp16"] = False
    values = {k: v for k, v in values.items() if k in fields}
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        message = " ".join(str(e).split())
        # TRL names the keys playpen sets for it: say which playpen key that is
        named = "; ".join(f"{key} is playpen's {ours}" for key, ours in FORCED_FROM.items()
                          if key in (forced or {}) and key in message)
        raise PlaypenError(f"{where}: trainer: {message}" + (f" ({named})" if named else "")) from None


# ---------------------------------------------------------------- teachers

def resolve_player(name: str | None, role: str = "teacher") -> dict | None:
    """A player's ModelSpec dict: local models load with transformers, remote ones need a key (checked now)."""
    if not name:
        return None
    spec = ensure_packaged_weights(resolve_model(name))  # playpen-tiny, smollm2-135m-instruct-q4: made on first use
    check_remote_key(spec, role)
    return spec


def resolve_teacher(name: str | None) -> dict | None:
    return resolve_player(name, "teacher")


def load_clemcore_model(spec: dict, max_tokens: int, temperature: float):
    """A clemcore Model (any backend) for a spec dict, with generation arguments set."""
    from clemcore.backends import BackendRegistry, ModelSpec

    model_spec = ModelSpec.from_dict(spec)
    backend = BackendRegistry.from_packaged_and_cwd_files().get_backend_for(model_spec.backend)
    model = backend.get_model_for(model_spec)
    model.set_gen_args(max_tokens=max_tokens, temperature=temperature)
    return model


# ---------------------------------------------------------------- datasets

def read_jsonl_rows(path: str | None, where: str, key: str, check_row, limit: int | None = None) -> list[dict]:
    """Rows of a jsonl file, each checked by `check_row(row) -> error or None`; errors name the line."""
    import json

    if not path:
        raise PlaypenError(f"{where}: {key} is required (a jsonl file)")
    file = Path(path).expanduser()
    try:
        text = read_text(file, f"{key} file")
    except PlaypenError as e:
        raise PlaypenError(f"{where}: {e}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlaypenError(f"{file}:{number}: malformed JSON: {e.msg}") from None
        problem = check_row(row) if isinstance(row, dict) else "expected a JSON object"
        if problem:
            raise PlaypenError(f"{file}:{number}: {problem}")
        rows.append(row)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise PlaypenError(f"{where}: {key} file {path} holds no rows")
    return rows


def check_messages(messages, need_assistant: bool = True) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "expected a non-empty list of chat messages"
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return "every message needs string 'role' and 'content'"
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        return "no assistant message to learn from"
    return None
