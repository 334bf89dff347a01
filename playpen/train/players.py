"""Game players as clemcore Models or frozen policies, through the model service (playpen.models.service): GRPO/DPO
teachers, `playpen run`'s learner and teacher, debate seats.
"""
from __future__ import annotations

from playpen.models import service


def resolve_player(name: str | None, role: str = "teacher") -> dict | None:
    """A player's ModelSpec dict: local models load with transformers, remote ones need a key (checked now)."""
    if not name:
        return None
    return service.resolve(name, role)


def resolve_teacher(name: str | None) -> dict | None:
    return resolve_player(name, "teacher")


def load_clemcore_model(spec: dict, max_tokens: int, temperature: float):
    """A clemcore Model (any backend) for a spec dict, with generation arguments set."""
    return service.load_player(spec, max_tokens, temperature)


def frozen_policy(spec: dict):
    """A local Hugging Face model (spec of backend huggingface_local) as a frozen LocalPolicy: eval mode, no
    gradients, its own quantization and adapter; bfloat16 on GPUs, float32 on CPU (GRPO teachers, screening)."""
    from playpen.rollout import LocalPolicy

    return LocalPolicy(*service.load_frozen(spec), name=spec["model_name"])
