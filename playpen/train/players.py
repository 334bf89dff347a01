"""Game players as clemcore Models: a registered model resolved to its spec (a remote model's key checked now)
and loaded through clemcore's backends, any backend (GRPO/DPO teachers, `playpen run`'s learner and teacher,
debate seats).
"""
from __future__ import annotations

from playpen.models import ensure_packaged_weights
from playpen.registry import check_remote_key, resolve_model


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


def frozen_policy(spec: dict):
    """A local Hugging Face model (spec of backend huggingface_local) as a frozen LocalPolicy: eval mode, no
    gradients, its own quantization and adapter; bfloat16 on GPUs, float32 on CPU (GRPO teachers, screening)."""
    import torch

    from playpen.rollout import LocalPolicy
    from playpen import distributed
    from playpen.models import modeling

    model_config = spec.get("model_config", {})
    quantization = modeling.spec_quantization(spec)
    dtype = torch.bfloat16 if distributed.has_cuda() else torch.float32
    model = modeling.load_model(spec["huggingface_id"], quantization, dtype,
                                peft_model=model_config.get("peft_model"), trainable=False)
    model.requires_grad_(False)
    model.eval()
    if distributed.has_cuda() and not quantization:
        model.to(f"cuda:{distributed.dist_info()[2]}")
    return LocalPolicy(model, modeling.load_tokenizer(spec["huggingface_id"]), name=spec["model_name"])
