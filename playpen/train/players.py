"""A local model as a frozen rollout policy (GRPO/DPO teachers, screening): the model service loads it, the rollout
layer wraps it. Names and clemcore players come from the service itself (playpen.models.service)."""
from __future__ import annotations

from playpen.models import service


def frozen_policy(spec: dict):
    """A local Hugging Face model (spec of backend huggingface_local) as a frozen LocalPolicy: eval mode, no
    gradients, its own quantization and adapter; bfloat16 on GPUs, float32 on CPU (GRPO teachers, screening)."""
    from playpen.rollout import LocalPolicy

    return LocalPolicy(*service.load_frozen(spec), name=spec["model_name"])
