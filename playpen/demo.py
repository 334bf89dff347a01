"""The demo's proof on held-out data: clemscore of the untrained model vs the trained adapter.

    playpen demo [--config grpo/demo] [key=value ...]      (= python -m playpen.demo)

Run after `python -m playpen.submit grpo --config ... --wait` (what `make demo` does). It finds the run dir the
same way the trainer does (config hash), evaluates the base model and the run's registered adapter on the
validation instances of the run's game with `playpen eval` (greedy, and `--samples` times at the rollout
temperature), prints both and plots them beside the learning curve.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage import RunDir, atomic_write_json, write_figure

PLOT_FILE = "demo_eval.png"


def run_dir_for(method: str, config: str, overrides: list[str]) -> tuple[RunDir, object]:
    from playpen.config import load_config
    from playpen.train.runner import keys_help, load_recipe, run_id_of

    cfg = load_config(load_recipe(method).Config, config, overrides, keys_help=keys_help(method))
    run = RunDir.for_experiment(cfg.storage_root, cfg.experiment, run_id_of(method, cfg))
    if not (run.path / "model_registry.json").is_file():
        raise PlaypenError(f"{run.path} has no trained model yet; run "
                           f"`python -m playpen.submit {method} --config {config} --wait` first")
    return run, cfg


SAMPLES = 50  # evaluations at the rollout temperature, each with its own sampling seed (50 x 60 = 3,000 episodes)


def pooled(vals: list[dict], game: str) -> dict:
    """K evaluations of the same instances (other sampling seeds) as one evaluation of all their episodes; the
    standard error of clemscore across the K says how much of a difference is noise."""
    rows = [v["games"][game] for v in vals]
    episodes = sum(r["episodes"] for r in rows)
    played_n = [r["played"] * r["episodes"] / 100 for r in rows]
    played = 100 * sum(played_n) / episodes
    quality = sum((r["quality"] or 0.0) * n for r, n in zip(rows, played_n)) / sum(played_n) if sum(played_n) else 0.0
    per_seed = [r["clemscore"] for r in rows]
    se = statistics.stdev(per_seed) / len(per_seed) ** 0.5 if len(per_seed) > 1 else 0.0
    return {"clemscore": played * quality / 100, "played": played, "quality": quality, "episodes": episodes,
            "clemscore_se": se, "seeds": len(rows)}


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    colors = ["#999999" if n.startswith("untrained") else "#3b7dd8" for n in names]
    labels = [n.replace(" ", "\n") for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(2.4 + 2.0 * len(names), 3.4))
    for ax, key, title in ((axes[0], "clemscore", "clemscore"), (axes[1], "played", "% played")):
        errors = [results[n]["clemscore_se"] if results[n]["seeds"] > 1 else float("nan") for n in names] \
            if key == "clemscore" else None
        bars = ax.bar(labels, [results[n][key] for n in names], color=colors, yerr=errors, capsize=4)
        ax.bar_label(bars, fmt="%.1f", label_type="center", color="white")
        ax.set_ylim(0, max(100.0 if key == "played" else 0.0, *(results[n][key] for n in names)) * 1.15 or 1)
        ax.set_title(f"{title} (validation)")
    fig.suptitle("untrained vs trained, playpen eval (error bars: s.e. over sampling seeds)", fontsize=9)
    fig.tight_layout()
    write_figure(out, fig, dpi=120)
    plt.close(fig)




def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="grpo/demo",
                        help="the trained run's config, a file or a shipped config's name (default: grpo/demo)")
    parser.add_argument("--method", default="grpo")
    parser.add_argument("--samples", type=int, default=SAMPLES,
                        help="evaluations at the rollout temperature, one per sampling seed (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", help="the same key=value overrides given to submit")


def main(args: argparse.Namespace) -> int:
    from playpen.eval import evaluate

    if args.samples < 1:
        raise PlaypenError(f"--samples must be >= 1, got {args.samples}")
    run, cfg = run_dir_for(args.method, args.config, args.overrides)
    trained = run.model_name  # (the one name its model_registry.json may define)
    # greedy is clemscore's protocol (one play per instance); the rollout temperature shows what RL changed
    # in the sampled policy, played `samples` times per instance so that a difference is not sampling noise
    temperatures = sorted({0.0, float(cfg.validation_temperature or 0.0)})
    summary = {}
    for temperature in temperatures:
        for name, model in (("untrained", cfg.model), ("trained", str(run.path))):
            seeds = range(args.samples if temperature > 0 else 1)
            vals = []
            for seed in seeds:  # one line per evaluation, rewritten in place: eval's own lines stay off screen
                print(f"\r[demo] {name} T={temperature:g}: evaluation {seed + 1}/{len(seeds)}", end="",
                      file=sys.stderr, flush=True)
                vals.append(evaluate(model, games=[cfg.game], max_new_tokens=cfg.max_new_tokens,
                                     temperature=temperature, seed=seed, log=lambda message: None,
                                     results_dir=run.path / "eval" / f"{name}-T{temperature:g}-seed{seed}"))
            print(file=sys.stderr)
            # the game's own clemscore: val.json files a static game under statscore, not clemscore
            summary[f"{name} T={temperature:g}"] = {
                "model": cfg.model if name == "untrained" else trained, "temperature": temperature,
                **pooled(vals, cfg.game)}
    atomic_write_json(run.path / "demo_eval.json", summary)
    plot(summary, run.path / PLOT_FILE)
    print(f"\n[demo] playpen eval on {cfg.game} validation ({len(summary) // 2} temperatures, untrained vs trained)")
    for name, row in summary.items():
        spread = f" ± {row['clemscore_se']:4.2f}" if row["seeds"] > 1 else " " * 7
        print(f"[demo] {name:15s} {row['model']:32s} clemscore {row['clemscore']:6.2f}{spread}  "
              f"played {row['played']:6.2f}%  quality {row['quality']:6.2f}  ({row['episodes']} episodes)")
    print(f"[demo] run dir {run.path}: learning curve, {PLOT_FILE}, playpen-records/, checkpoints/")
    return 0


if __name__ == "__main__":
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["demo", *sys.argv[1:]]))
