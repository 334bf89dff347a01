"""Metrics: every Trainer log row goes to `<run>/metrics.jsonl` and tensorboard (`<run>/logs`); at the end a PNG
learning curve (reward and episode score per step; loss; KL) is drawn from metrics.jsonl.

Rows: {"step", "time", "loss", "reward", "reward_std", "kl", "episode_score", "aborted_pct", "success_rate",
"tokens_per_second", ...} (whatever the method logs; numbers only). On resume the rows after the checkpoint are
dropped first (`checkpoints.truncate_jsonl`) and tensorboard purges them (purge_step), so nothing is doubled.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

from playpen.storage import append_jsonl, read_jsonl, write_figure

CURVE_FILE = "learning_curve.png"


PROGRESS_KEYS = (("reward", "reward"), ("loss", "loss"), ("kl", "kl"), ("episode_score", "score"))


def progress_line(metrics_file: str | Path) -> str | None:
    """One line on how far a run is, from its metrics.jsonl: step/total, reward, loss, KL and the time left at
    the pace since its first logged step. None before the first row."""
    rows = [r for r in read_jsonl(metrics_file) if "loss" in r or "reward" in r] if Path(metrics_file).is_file() \
        else []
    if not rows:
        return None
    last = rows[-1]
    total = last.get("max_steps")
    parts = [f"step {last['step']}" + (f"/{total} ({100 * last['step'] / total:.0f} %)" if total else "")]
    parts += [f"{label} {last[key]:.4g}" for key, label in PROGRESS_KEYS if key in last]
    first = rows[0]
    if total and last["step"] > first["step"] and last["time"] > first["time"]:
        left = (total - last["step"]) * (last["time"] - first["time"]) / (last["step"] - first["step"])
        parts.append(f"ETA {int(left // 60)}m{int(left % 60):02d}s")
    return "  ".join(parts)


def _stop_on_non_finite_loss(logs: dict, step: int, checkpoints: Path) -> None:
    """A nan/inf loss means the weights are (or are about to be) garbage: stop before the step's checkpoint is
    saved (the Trainer logs, then saves) rather than train on and register a model of NaN."""
    from playpen.errors import PlaypenError
    from playpen.storage import checkpoints_in

    bad = {k: v for k, v in logs.items() if "loss" in k and isinstance(v, float) and not math.isfinite(v)}
    if bad:
        key, value = next(iter(bad.items()))
        saved = checkpoints_in(checkpoints)
        where = f"the last checkpoint is {saved[-1][1]}" if saved else "no checkpoint was saved"
        raise PlaypenError(f"{key} is {value} at step {step}: training diverged, so it stops here ({where}); lower "
                           f"trainer.learning_rate and rerun with allow_config_change=true, or pass run_id=<new id>")


def _make_callback():
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        def __init__(self, metrics_file: Path, logs_dir: Path, resumed_step: int = 0, step_offset: int = 0):
            self.metrics_file, self.logs_dir = Path(metrics_file), Path(logs_dir)
            self.resumed_step, self.step_offset = resumed_step, step_offset
            self.writer = None
            self.last_tokens: tuple[float, float] | None = None

        def _open(self):
            if self.writer is None:
                from torch.utils.tensorboard import SummaryWriter

                purge = self.step_offset + self.resumed_step + 1 if self.resumed_step else None
                self.writer = SummaryWriter(log_dir=str(self.logs_dir), purge_step=purge)
            return self.writer

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self._open()

        def on_log(self, args, state, control, logs=None, **kwargs):
            step = self.step_offset + state.global_step
            _stop_on_non_finite_loss(logs or {}, step, Path(args.output_dir))  # every rank: they log the same loss
            if not state.is_world_process_zero or not logs:
                return
            row = {"step": step, "time": round(time.time(), 3), "max_steps": self.step_offset + state.max_steps}
            for key, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    row[key] = value
            tokens = logs.get("num_tokens")
            if isinstance(tokens, (int, float)):
                now = time.perf_counter()
                if self.last_tokens and now > self.last_tokens[1] and tokens > self.last_tokens[0]:
                    row["tokens_per_second"] = round((tokens - self.last_tokens[0]) / (now - self.last_tokens[1]), 1)
                self.last_tokens = (tokens, now)
            append_jsonl(self.metrics_file, row)
            if self.writer is not None:
                for key, value in row.items():
                    if key not in ("step", "time"):
                        self.writer.add_scalar(key, value, step)
                self.writer.flush()

        def log_row(self, step: int, values: dict) -> None:
            """A row that does not come from the Trainer's log (validation); the caller is rank 0's callback."""
            from playpen.distributed import is_rank_zero

            if not is_rank_zero():
                return
            append_jsonl(self.metrics_file, {"step": step, "time": round(time.time(), 3), **values})
            writer = self._open()
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()

        def on_train_end(self, args, state, control, **kwargs):
            if self.writer is not None:
                self.writer.close()
                self.writer = None

    return MetricsCallback


def metrics_callback(metrics_file: Path, logs_dir: Path, resumed_step: int = 0, step_offset: int = 0):
    return _make_callback()(metrics_file, logs_dir, resumed_step, step_offset)


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in rows if key in r and "train_runtime" not in r]
    return [p[0] for p in points], [p[1] for p in points]


# GRPO groups whose episodes all scored alike (zero advantage): TRL's count (per group with scale_rewards "group"
# or "none"; with "batch" TRL takes the std over the whole batch, so it says only whether the batch was uniform),
# and with dynamic sampling playpen's own per-group counts before and after its refills (train/dynamic_sampling.py)
GROUP_SERIES = (("frac_reward_zero_std", "TRL frac_reward_zero_std (whole batch under scale_rewards=batch)"),
                ("dynamic/uniform_share", "uniform before refills (dropped)"),
                ("dynamic/uniform_left", "uniform after refills"))


# methods trained in rounds (rounds.py) log one row per round's play, at the step the round starts from
ROUND_SERIES = (("success_rate", "won (the round's play)"), ("pass_rate", "won, of all played (RFT)"),
                ("agreement", "learner made the expert's move (DAgger)"))


def plot_curve(metrics_file: Path, out: Path, title: str = "") -> Path | None:
    """Reward (± std) and episode score per step, then loss, then KL, DPO margins or the distillation divergence,
    then GRPO's uniform groups or the rounds' success, pass rate and agreement; returns the PNG path."""
    rows = read_jsonl(metrics_file)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_reward = any("reward" in r for r in rows)
    panels = (["reward"] if has_reward else []) + ["loss"]
    third = next((k for k in ("kl", "rewards/margins", "distill/loss_kl") if any(k in r for r in rows)), None)
    panels += [third] if third else []
    panels += ["groups"] if any(key in r for r in rows for key, _ in GROUP_SERIES) else []
    panels += ["rounds"] if any("round" in r for r in rows) else []
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.8 * len(panels)), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        if panel == "reward":
            steps, reward = _series(rows, "reward")
            ax.plot(steps, reward, color="tab:blue", marker=".", label="reward (train, mean)")
            _, std = _series([r for r in rows if "reward" in r], "reward_std")
            if len(std) == len(reward):
                ax.fill_between(steps, [m - s for m, s in zip(reward, std)], [m + s for m, s in zip(reward, std)],
                                color="tab:blue", alpha=0.15)
            val_steps, val = _series(rows, "val/reward")
            if val:
                ax.plot(val_steps, val, color="tab:green", marker="o", linestyle="--", label="reward (validation)")
            ax.set_ylabel("reward")
            ax.legend(loc="upper left", fontsize=8)
            score_steps, score = _series(rows, "episode_score")
            if score:
                right = ax.twinx()
                right.plot(score_steps, score, color="tab:orange", marker=".", alpha=0.8, label="episode score")
                right.set_ylabel("episode score (0-100)")
                right.legend(loc="lower right", fontsize=8)
        elif panel == "rounds":
            played = [r for r in rows if "round" in r]
            for key, label in ROUND_SERIES:
                steps, values = _series(played, key)
                if values:
                    ax.plot(steps, [100 * v for v in values], marker="o", label=label)
            kept = next((k for k in ("kept", "pairs", "targets") if k in played[0]), None)
            for r in played if kept else []:
                ax.annotate(f"{r[kept]} {kept}", (r["step"], 100 * r.get("success_rate", 0)), fontsize=7)
            ax.set_ylabel("% per round")
            ax.set_ylim(-5, 105)
            ax.legend(loc="upper left", fontsize=8)
        elif panel == "groups":
            for key, label in GROUP_SERIES:
                steps, values = _series(rows, key)
                if values:
                    ax.plot(steps, [100 * v for v in values], marker=".", label=label)
            ax.set_ylabel("% of groups")
            ax.set_ylim(-5, 105)
            ax.legend(loc="upper left", fontsize=8)
        else:
            steps, values = _series(rows, panel)
            ax.plot(steps, values, marker=".", color="tab:red" if panel == "loss" else "tab:purple")
            ax.set_ylabel(panel)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    write_figure(out, fig, dpi=100)
    plt.close(fig)
    return out
