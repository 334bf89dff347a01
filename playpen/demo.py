"""The demo's proof on held-out data: clemscore of the untrained model vs the trained adapter.

    python -m playpen.demo --config configs/grpo/demo.yaml [key=value ...]

Run after `python -m playpen.submit grpo --config ... --wait` (what `make demo` does). It finds the run dir the
same way the trainer does (config hash), evaluates the base model and the run's registered adapter on the
validation instances of the run's game with `playpen eval`, prints both and plots them beside the learning curve.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage import RunDir, atomic_write_json

PLOT_FILE = "demo_eval.png"


def run_dir_for(method: str, config: str, overrides: list[str]) -> tuple[RunDir, object]:
    from playpen.config import load_config
    from playpen.train.runner import default_run_id, load_recipe

    cfg = load_config(load_recipe(method).Config, config, overrides)
    run = RunDir.for_experiment(cfg.storage_root, cfg.experiment, cfg.run_id or default_run_id(method, cfg))
    if not (run.path / "model_registry.json").is_file():
        raise PlaypenError(f"{run.path} has no trained model yet; run "
                           f"`python -m playpen.submit {method} --config {config} --wait` first")
    return run, cfg


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    colors = ["#999999" if n.startswith("untrained") else "#3b7dd8" for n in names]
    labels = [n.replace(" ", "\n") for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(2.4 + 2.0 * len(names), 3.4))
    for ax, key, title in ((axes[0], "clemscore", "clemscore"), (axes[1], "played", "% played")):
        bars = ax.bar(labels, [results[n][key] for n in names], color=colors)
        ax.bar_label(bars, fmt="%.1f")
        ax.set_ylim(0, max(100.0 if key == "played" else 0.0, *(results[n][key] for n in names)) * 1.15 or 1)
        ax.set_title(f"{title} (validation)")
    fig.suptitle("untrained vs trained, playpen eval")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--method", default="grpo")
    parser.add_argument("overrides", nargs="*", help="the same key=value overrides given to submit")
    args = parser.parse_args(argv)
    try:
        from playpen.eval import evaluate

        run, cfg = run_dir_for(args.method, args.config, args.overrides)
        trained = json.loads((run.path / "model_registry.json").read_text())[-1]["model_name"]
        # greedy is clemscore's protocol; the rollout temperature shows what RL changed in the sampled policy
        temperatures = sorted({0.0, float(cfg.validation_temperature or 0.0)})
        results = {}
        for temperature in temperatures:
            for name, model in (("untrained", cfg.model), ("trained", str(run.path))):
                results[(name, temperature)] = evaluate(
                    model, games=[cfg.game], max_tokens=cfg.max_new_tokens, temperature=temperature,
                    results_dir=run.path / "eval" / f"{name}-T{temperature:g}")
    except PlaypenError as e:
        print(f"playpen: error: {e}", file=sys.stderr)
        return 2
    # the game's own clemscore (% played × quality): val.json files a static game under statscore, not clemscore
    summary = {f"{name} T={temperature:g}": {"model": cfg.model if name == "untrained" else trained,
                                             "temperature": temperature,
                                             **{k: r["games"][cfg.game][k]
                                                for k in ("clemscore", "played", "quality", "episodes")}}
               for (name, temperature), r in results.items()}
    atomic_write_json(run.path / "demo_eval.json", summary)
    plot(summary, run.path / PLOT_FILE)
    episodes = next(iter(summary.values()))["episodes"]
    print(f"\n[demo] playpen eval on {cfg.game} validation, {episodes} episodes each")
    for name, row in summary.items():
        print(f"[demo] {name:15s} {row['model']:36s} clemscore {row['clemscore']:6.2f}  "
              f"played {row['played']:6.2f}%  quality {row['quality']:6.2f}")
    print(f"[demo] run dir {run.path}: learning curve, {PLOT_FILE}, playpen-records/, checkpoints/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
