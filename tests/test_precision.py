"""Training precision on CPU: bf16 autocast is chosen by measuring this CPU's bf16 and float32 matrix products,
not by its flags (a CPU with AVX512-BF16 and no AMX multiplies bf16 slower than float32), and trainer.bf16 overrides
the measurement either way."""
from __future__ import annotations

import math

import pytest

from playpen.models import loading

LARGE = 134_515_008  # SmolLM2-135M's parameter count: above CPU_BF16_MIN_PARAMETERS


@pytest.fixture
def cpu(monkeypatch):
    """A CPU machine whose probe answers `speedup` and a model of `parameters`; records whether the probe ran."""
    probed = []

    def machine(speedup: float, parameters: int = LARGE):
        monkeypatch.setattr(loading, "has_cuda", lambda: False)
        monkeypatch.setattr(loading, "count_parameters", lambda path: parameters)
        monkeypatch.setattr(loading, "cpu_bf16_speedup", lambda: probed.append(1) or speedup)
        return probed
    return machine


@pytest.mark.parametrize("speedup, chosen", [(2.3, True), (1.2, True), (1.1, False), (0.56, False), (0.0, False)])
def test_bf16_autocast_is_chosen_where_the_probe_measures_it_faster(cpu, speedup, chosen):
    cpu(speedup)
    assert loading.autocast_bf16(None, "model", None, False) is chosen


@pytest.mark.parametrize("requested", [True, False])
def test_trainer_bf16_overrides_the_probe_without_running_it(cpu, requested):
    probed = cpu(0.56 if requested else 2.3)
    assert loading.autocast_bf16(requested, "model", None, False) is requested
    assert probed == []


@pytest.mark.parametrize("parameters, quantization, deepspeed", [(1_000_000, None, False), (LARGE, "4bit", False),
                                                                  (LARGE, None, True)])
def test_small_models_quantization_and_deepspeed_stay_float32_unprobed(cpu, parameters, quantization, deepspeed):
    probed = cpu(2.3, parameters)
    assert loading.autocast_bf16(None, "model", quantization, deepspeed) is False
    assert probed == []


def test_the_probe_measures_a_ratio_where_the_cpu_has_bf16_instructions():
    speedup = loading.cpu_bf16_speedup()
    if loading.cpu_supports_bf16():
        assert math.isfinite(speedup) and speedup > 0
    else:
        assert speedup == 0.0
    assert loading.cpu_bf16_speedup() == speedup  # measured once per process
