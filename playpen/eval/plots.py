"""A sweep's aggregate: sweep.csv, sweep.html and PNG plots (learning curve per run, model × game heatmap, and the
meters per checkpoint when the sweep has meters).

Rows are model/checkpoint × game (or × meter: `playpen meter`'s mean score and its standard error). The per-row
clemscore is the game's own (% played / 100 × quality); the per-model clemscore/statscore in the HTML summary and
the learning curve use clemcore's across-game formula (playpen.eval.scoring.aggregate_score) over the model's
dialogue / static games.
"""
from __future__ import annotations

import csv
import html
import io
from pathlib import Path

from playpen.eval.scoring import GameSummary, aggregate_score
from playpen.storage import atomic_write_bytes, atomic_write_text

COLUMNS = ["model", "step", "checkpoint", "run", "game", "static", "instance_set", "state", "episodes",
           "instances", "played", "quality", "clemscore", "success", "lose", "aborted", "meter_mean", "meter_stderr",
           "meter_stderr_by_prompt", "classifier", "model_name", "key", "partner"]  # (new columns go last)


def _row_label(model: str, step, checkpoint, partner: str | None = None) -> str:
    model = _with_partner(model, partner)
    if checkpoint == "final":
        return f"{model}@final"
    return model if step is None else f"{model}@step{step}"


def _with_partner(model: str, partner: str | None) -> str:
    return f"{model} vs {partner}" if partner else model


def sweep_rows(results: list) -> list[dict]:
    """One dict per cell with the COLUMNS (score columns empty unless the cell is done)."""
    rows = []
    for cell, state, result in results:
        row = {"model": cell.model, "partner": cell.partner and cell.partner.get("model_name"),
               "step": cell.step, "checkpoint": cell.checkpoint, "run": cell.run,
               "game": cell.game, "static": cell.static, "instance_set": cell.instance_set, "state": state,
               "model_name": cell.spec.get("model_name"), "key": cell.key, "is_meter": cell.meter is not None}
        if result:
            row.update({k: result.get(k) for k in ("episodes", "instances", "played", "quality", "clemscore",
                                                   "success", "lose", "aborted", "meter_mean", "meter_stderr",
                                                   "meter_stderr_by_prompt", "classifier")})
        rows.append(row)
    return rows


def model_scores(rows: list[dict]) -> dict[str, dict]:
    """Row label → {"clemscore", "statscore", game: clemscore, ...} over the done cells of that model/checkpoint."""
    by_label: dict[str, list[dict]] = {}
    for row in rows:
        by_label.setdefault(_row_label(row["model"], row["step"], row["checkpoint"], row.get("partner")),
                            []).append(row)
    out = {}
    for label, items in by_label.items():
        done = [r for r in items if r["state"] == "done"]
        summaries = {r["game"]: GameSummary(r["game"], r["episodes"], r["played"], r["quality"], r["success"],
                                            r["lose"], r["aborted"]) for r in done}
        static = {r["game"] for r in done if r["static"]}
        clem = aggregate_score(s for g, s in summaries.items() if g not in static)
        stat = aggregate_score(s for g, s in summaries.items() if g in static)
        # (a run's learning curve is one line per partner)
        out[label] = {"model": _with_partner(items[0]["model"], items[0].get("partner")),
                      "step": items[0]["step"], "checkpoint": items[0]["checkpoint"],
                      "clemscore": clem and clem["score"], "statscore": stat and stat["score"],
                      "complete": len(done) == len(items),
                      "games": {r["game"]: r["clemscore"] for r in done}}
    return out


def _csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in COLUMNS})
    return buf.getvalue()


def _fmt(value) -> str:
    if value is None or value == "":
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else html.escape(str(value))


def _html(name: str, rows: list[dict], models: dict[str, dict], games: list[str], plots: list[str]) -> str:
    head = "".join(f"<th>{html.escape(g)}</th>" for g in games)
    summary = []
    for label, m in models.items():
        cells = "".join(f"<td>{_fmt(m['games'].get(g))}</td>" for g in games)
        summary.append(f"<tr><th>{html.escape(label)}</th><td><b>{_fmt(m['clemscore'])}</b></td>"
                       f"<td>{_fmt(m['statscore'])}</td>{cells}<td>{'' if m['complete'] else 'incomplete'}</td></tr>")
    detail_cols = ["model", "step", "game", "state", "episodes", "played", "quality", "clemscore", "success",
                   "aborted", "meter_mean", "meter_stderr"]
    detail = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in detail_cols) + "</tr>" for r in rows)
    images = "".join(f'<p><img src="{html.escape(p)}" style="max-width:100%"></p>' for p in plots)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>sweep {html.escape(name)}</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} th{{background:#f4f4f4}}</style></head><body>
<h1>sweep {html.escape(name)}</h1>
<p>clemscore = mean % played / 100 × mean quality over the dialogue games (clemcore's definition); statscore the
same over static games; game columns: that game's own clemscore.</p>
<table><tr><th>model / checkpoint</th><th>clemscore</th><th>statscore</th>{head}<th></th></tr>{''.join(summary)}</table>
{images}
<h2>cells</h2><table><tr>{''.join(f'<th>{c}</th>' for c in detail_cols)}</tr>{detail}</table>
</body></html>
"""


def _savefig(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def _save_step_plot(fig, ax, path: Path, ylabel: str, title: str) -> None:
    """Labels, grid and legend of a plot over checkpoint steps; saved (atomically) and closed."""
    import matplotlib.pyplot as plt

    ax.set_xlabel("checkpoint step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    _savefig(fig, path)
    plt.close(fig)


def learning_curves(models: dict[str, dict], path: Path) -> bool:
    """clemscore (dialogue games) and statscore (static games) per checkpoint step, bold per run, a thin dashed line
    per game; False when no run has steps."""
    runs: dict[str, list[dict]] = {}
    for m in models.values():
        if m["step"] is not None:
            runs.setdefault(m["model"], []).append(m)
    if not runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = 1.0
    for i, (run, points) in enumerate(sorted(runs.items())):
        points = sorted(points, key=lambda m: m["step"])
        color = f"C{i % 10}"
        for score, style in (("clemscore", "-"), ("statscore", ":")):
            xy = [(p["step"], p[score]) for p in points if p[score] is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", linewidth=2, linestyle=style, color=color, label=f"{run} {score}")
                top = max(top, *(y for _, y in xy))
        for game in sorted({g for p in points for g in p["games"]}):
            xy = [(p["step"], p["games"][game]) for p in points if p["games"].get(game) is not None]
            ax.plot(*zip(*xy), linestyle="--", linewidth=0.8, alpha=0.6, color=color, label=f"  {game}")
            top = max(top, *(y for _, y in xy))
    ax.set_ylim(0, min(100.0, top * 1.1) if top < 100 else 100.0)
    _save_step_plot(fig, ax, path, "score (0-100)", "learning curve")
    return True


def heatmap(models: dict[str, dict], games: list[str], path: Path) -> bool:
    """Model/checkpoint × game clemscore (blank where a cell is not done)."""
    if not models or not games:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = list(models)
    values = np.array([[np.nan if models[m]["games"].get(g) is None else models[m]["games"][g] for g in games]
                       for m in labels], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(games), 1.2 + 0.42 * len(labels)))
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(range(len(games)), games, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    for i in range(len(labels)):
        for j in range(len(games)):
            text = "–" if np.isnan(values[i, j]) else f"{values[i, j]:.1f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if np.isnan(values[i, j]) or values[i, j] < 60 else "black")
    fig.colorbar(image, ax=ax, label="clemscore")
    ax.set_title("clemscore per model × game")
    _savefig(fig, path)
    plt.close(fig)
    return True


def meter_curves(rows: list[dict], path: Path) -> bool:
    """Each meter's mean score (± s.e. by prompt) per checkpoint step, a line per run; False when no run has steps."""
    points: dict[tuple[str, str], list[tuple]] = {}
    for r in rows:
        if r["is_meter"] and r["state"] == "done" and r["step"] is not None:
            points.setdefault((r["model"], r["game"]), []).append((r["step"], r["meter_mean"],
                                                                   r["meter_stderr_by_prompt"]))
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (run, meter), xy in sorted(points.items()):
        steps, means, errors = zip(*sorted(xy))
        ax.errorbar(steps, means, yerr=errors, marker="o", capsize=3, label=f"{run} {meter}")
    _save_step_plot(fig, ax, path, "mean score", "meters per checkpoint (± s.e. over prompts)")
    return True


def write_aggregate(sweep_dir: Path, name: str, results: list) -> dict:
    rows = sweep_rows(results)
    game_rows = [r for r in rows if not r["is_meter"]]
    models = model_scores(game_rows)
    games = list(dict.fromkeys(r["game"] for r in game_rows))
    plots_dir = sweep_dir / "plots"
    plots = []
    if learning_curves(models, plots_dir / "learning_curve.png"):
        plots.append("plots/learning_curve.png")
    if heatmap(models, games, plots_dir / "heatmap.png"):
        plots.append("plots/heatmap.png")
    if meter_curves(rows, plots_dir / "meter_curve.png"):
        plots.append("plots/meter_curve.png")
    atomic_write_text(sweep_dir / "sweep.csv", _csv_text(rows))
    atomic_write_text(sweep_dir / "sweep.html", _html(name, rows, models, games, plots))
    return {"dir": str(sweep_dir.absolute()), "csv": str(sweep_dir / "sweep.csv"),
            "html": str(sweep_dir / "sweep.html"), "plots": [str(sweep_dir / p) for p in plots],
            "rows": len(rows), "done": sum(r["state"] == "done" for r in rows), "models": models}
