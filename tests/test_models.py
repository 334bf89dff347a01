"""playpen.models: the packaged weights made under $PLAYPEN_HOME, and adapter loads without PEFT's FutureWarning."""
from __future__ import annotations

from pathlib import Path

import pytest

from playpen.errors import PlaypenError


@pytest.mark.parametrize("home_dir", ["a-file", "/sys/playpen-home"])  # a file; a folder nothing is written to
def test_an_unusable_playpen_home_is_one_line(capsys, tmp_path, monkeypatch, home_dir):
    from playpen.models import ensure_packaged_weights
    from playpen.model_registry import SMOL_MODEL, resolve_model

    if home_dir == "a-file":
        home_dir = str(tmp_path / "a-file")
        Path(home_dir).write_text("")
    monkeypatch.setenv("PLAYPEN_HOME", home_dir)
    with pytest.raises(PlaypenError, match=rf"^cannot make {SMOL_MODEL} in {home_dir}/models \(.*\); set "
                                           rf"\$PLAYPEN_HOME to a writable folder$"):
        ensure_packaged_weights(resolve_model(SMOL_MODEL))


def test_loading_an_adapter_prints_no_future_warning(tmp_path):
    """PEFT reads the deprecated is_gradient_checkpointing at every adapter load: filtered for every entry point
    (a fresh interpreter, as a job or `make demo`'s evaluation starts)."""
    import subprocess
    import sys

    code = ("import playpen, warnings\n"
            "warnings.warn('`is_gradient_checkpointing` is deprecated', FutureWarning)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**__import__("os").environ,
                                             "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0 and "FutureWarning" not in proc.stderr, proc.stderr
