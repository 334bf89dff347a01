"""Loading a model's weights: bitsandbytes quantization and dtype decided from the spec and the machine, the
tokenizer, trainable or frozen weights (training's model, GRPO teachers, the meter and screening load through here).

Sits in playpen.models (below rollout and train): torch and transformers are imported inside the functions.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from playpen.distributed import dist_info, has_cuda
from playpen.errors import PlaypenError

QUANTIZATION = ("4bit", "8bit")


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


def spec_quantization(spec: dict) -> str | None:
    """The bitsandbytes quantization a model spec asks for (clemcore's model_config load_in_4bit/8bit), or None."""
    model_config = spec.get("model_config") or {}
    return "4bit" if model_config.get("load_in_4bit") else "8bit" if model_config.get("load_in_8bit") else None


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


# Below this size a CPU step is bound by per-op overhead, not arithmetic: bf16 autocast gains nothing (measured:
# playpen-tiny, 1M parameters, 0.04 s a LoRA step either way) while it changes the numbers every test expects.
CPU_BF16_MIN_PARAMETERS = 50_000_000


def cpu_supports_bf16() -> bool:
    """AVX512-BF16 or AMX: the CPU has bf16 matrix instructions (elsewhere torch emulates them slowly)."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


# bf16 autocast is chosen on a CPU only where the probe below finds bf16 products at least this much faster
BF16_MIN_SPEEDUP = 1.2


@functools.cache
def cpu_bf16_speedup() -> float:
    """float32 time / bf16 time of one matrix product shaped like a small model's MLP (1024x576 by 576x1536), best of
    5 each, interleaved, on this process's torch threads; 0.0 where the CPU has no bf16 instructions (not measured).
    Measured because the CPU flags do not say it: both machines below have AVX512-BF16, yet on one SmolLM2-135M's
    LoRA step ran 2.3x faster in bf16, while on a Xeon without AMX this product runs at 0.56x float32 (72 vs 128
    GFLOP/s on one thread) and the SFT step at 0.38-0.54x. About 0.2 s."""
    if not cpu_supports_bf16():
        return 0.0
    import time

    import torch

    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    operands = {dtype: (torch.randn(1024, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)) for dtype in best}
    with torch.no_grad():
        for round_no in range(6):  # round 0 warms both kernels up and is not counted
            for dtype, (x, w) in operands.items():
                start = time.perf_counter()
                torch.nn.functional.linear(x, w)
                if round_no:
                    best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / best[torch.bfloat16]


def count_parameters(path: str) -> int:
    """The model's parameter count from its config alone (built on the meta device: no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config).num_parameters()


def autocast_bf16(requested: bool | None, path: str, quantization: str | None, deepspeed: bool) -> bool:
    """Whether training runs its forward and backward under bf16 autocast (weights stay as loaded: float32 master
    weights on CPU). `requested` is `trainer.bf16` when the config sets it; unset, it is decided here: on GPUs
    with bf16, always; on CPUs, for models large enough to gain, where bf16 products measure at least
    BF16_MIN_SPEEDUP x faster than float32 here (cpu_bf16_speedup; bench/bench_precision.py measures whole SFT and
    GRPO steps), except with bitsandbytes or DeepSpeed, whose CPU paths are tested in float32 only."""
    import torch

    if requested is not None:
        return bool(requested)
    if has_cuda():
        return torch.cuda.is_bf16_supported()
    return cpu_probe_decides(path, quantization, deepspeed) and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP


def cpu_probe_decides(path: str, quantization: str | None, deepspeed: bool) -> bool:
    """Whether cpu_bf16_speedup decides a CPU training's precision (trainer.bf16 unset): for models large enough to
    gain, without bitsandbytes or DeepSpeed (float32 otherwise)."""
    return not quantization and not deepspeed and count_parameters(path) >= CPU_BF16_MIN_PARAMETERS


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


def quantization(spec: dict, requested: str | None = None) -> str | None:
    """The one decision on quantization: the config's when it names one, else what the spec's model_config asks
    for; checked (bitsandbytes loads and quantizes here) when the spec decided it."""
    chosen = requested or spec_quantization(spec)
    if chosen != requested:
        check_quantization(chosen)
    return chosen


def frozen_dtype():
    """Frozen models (teachers, the meter's generator): bfloat16 on GPUs, float32 on CPU."""
    import torch

    return torch.bfloat16 if has_cuda() else torch.float32


def load_frozen(spec: dict):
    """(model, tokenizer) of a local Hugging Face spec, frozen: eval mode, no gradients, the spec's own
    quantization and adapter, on this rank's GPU when there is one."""
    chosen = quantization(spec)
    model = load_model(spec["huggingface_id"], chosen, frozen_dtype(),
                       peft_model=(spec.get("model_config") or {}).get("peft_model"), trainable=False)
    model.requires_grad_(False)
    model.eval()
    if has_cuda() and not chosen:
        model.to(f"cuda:{dist_info()[2]}")
    return model, load_tokenizer(spec["huggingface_id"])
