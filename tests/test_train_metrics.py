"""playpen.train.metrics and metrics.jsonl: a non-finite loss stops training, is logged as such, a cut-off tail."""
from __future__ import annotations

import pytest

from playpen.errors import PlaypenError
from playpen.storage import read_jsonl


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_stops_training_naming_the_last_checkpoint(tmp_path, value):
    from playpen.train.metrics import _stop_on_non_finite_loss

    (tmp_path / "checkpoint-4").mkdir()
    _stop_on_non_finite_loss({"loss": 0.5, "learning_rate": 1e-4}, 5, tmp_path)  # finite: nothing happens
    with pytest.raises(PlaypenError, match=rf"^loss is {value} at step 5: training diverged, so it stops here "
                                           rf"\(the last checkpoint is {tmp_path / 'checkpoint-4'}\)"):
        _stop_on_non_finite_loss({"loss": value}, 5, tmp_path)


def test_the_trainer_logs_a_nan_loss_as_nan(tmp_path):
    """Transformers' logging_nan_inf_filter would log a nan loss as the window's mean: off, and not settable."""
    from trl import SFTConfig

    from playpen.train.trl_args import trl_arguments

    args = trl_arguments(SFTConfig, {"max_steps": 2}, "x.yaml", output_dir=tmp_path, seed=0, deepspeed=None,
                         defaults={})
    assert args.logging_nan_inf_filter is False
    with pytest.raises(PlaypenError, match="logging_nan_inf_filter"):
        trl_arguments(SFTConfig, {"logging_nan_inf_filter": True}, "x.yaml", output_dir=tmp_path, seed=0,
                      deepspeed=None, defaults={})


def test_a_cut_off_metrics_tail_is_dropped_with_a_warning(capsys, tmp_path):
    from playpen.train.checkpoints import truncate_jsonl

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    assert [r["step"] for r in read_jsonl(metrics)] == [1, 2]
    assert f"{metrics}:3: dropped a cut-off last line" in capsys.readouterr().err
    truncate_jsonl(metrics, 2)  # on resume: the file is whole again before the next row is appended
    assert metrics.read_text() == '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'
    metrics.write_text('{"step": 1}\n{"st\n{"step": 3}\n')  # a bad line in the middle is no cut-off tail
    with pytest.raises(PlaypenError, match=rf"^{metrics}:2: not a JSON line"):
        read_jsonl(metrics)
