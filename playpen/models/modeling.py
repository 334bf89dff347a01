"""The model being trained: its spec, bitsandbytes quantization, dtype, tokenizer, weights and LoRA, and the
DeepSpeed config it is sharded by (processes and collectives: playpen.distributed).

Small pure-ish functions, each checking its own input and failing with one PlaypenError line before anything
is written. Heavy libraries are imported inside the functions.
"""
from __future__ import annotations

import dataclasses
import re

from playpen.config import check_keys, config_file, read_text
from playpen.errors import PlaypenError
from playpen.models.loading import (BF16_MIN_SPEEDUP, CPU_BF16_MIN_PARAMETERS, QUANTIZATION,  # noqa: F401
                                    autocast_bf16, bnb_config, check_quantization, count_parameters,
                                    cpu_bf16_speedup, cpu_probe_decides, cpu_supports_bf16, load_model,
                                    load_tokenizer, model_dtype, spec_quantization)

# The seed's LoRA: `lora: {}` in a config means exactly this; keys given there override single fields.
DEFAULT_LORA = dict(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")


# ---------------------------------------------------------------- models

def resolve_model_spec(name: str) -> dict:
    """The spec of a model transformers loads here (registry name, run, checkpoint or Hugging Face folder), from
    the model service."""
    from playpen.models.service import resolve_local

    return resolve_local(name, role=None)


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
    """A DeepSpeed JSON path: as given, relative to the working directory, or playpen's packaged configs/."""
    if not path:
        return None
    candidate = config_file(path)
    if candidate.exists():
        import json

        try:
            json.loads(read_text(candidate, "deepspeed config"))
        except json.JSONDecodeError as e:
            raise PlaypenError(f"{candidate}:{e.lineno}:{e.colno}: malformed DeepSpeed JSON: {e.msg}") from None
        except RecursionError:
            raise PlaypenError(f"{candidate}: DeepSpeed JSON nested too deep to read") from None
        return str(candidate.absolute())
    raise PlaypenError(f"{where}: deepspeed config {path} not found (e.g. deepspeed/zero2.json)")
