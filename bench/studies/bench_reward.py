"""The offline "make it positive" chain end to end → bench/results/reward.md + reward.png.

    python bench/studies/bench_reward.py [--rm-steps N] [--rl-steps N] [--beta B] [--meter-samples 32]   (default: the configs')
    python bench/studies/bench_reward.py --model smol-135m --rl-lr 2e-4 ...   # the real model writes the clues and learns
                                                                             # → bench/results/reward-smol-135m.md

Each step is the documented command, run as its own process (reward/tiny_sentiment lists them):
1. label: `playpen meter playpen-tiny --classifier vader` on the taboo describer train prompts (8 clues each):
   VADER's compound sentiment of every clue, written as labelled texts;
2. reward model: `playpen train reward --config reward/tiny_sentiment` on those (clues for the same
   prompt compared, the more positive preferred), held-out pair accuracy;
3. RL: `playpen train grpo --config grpo/tiny_reward_model`, single-turn GRPO against the reward
   model with beta > 0 (KL to the base model, logged per step);
4. meter before/after: `playpen meter playpen-tiny --compare <trained>` on the held-out validation prompts, scored
   by VADER (the independent labeller: did the text really get more positive?) and by the reward model.
5. every RL checkpoint (`trainer.save_steps`, --checkpoint-every): metered on held-in train prompts by VADER, the
   independent metric that picks the checkpoint, and on the held-out prompts by VADER (gold) and by the reward
   model (proxy): the proxy-vs-gold curve per checkpoint (Gao et al., arXiv 2210.10760) → <results>-checkpoints.png.
Target: the mean score moves by more than 5 standard errors while KL is reported and bounded.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
TRAIN_PROMPTS = "reward/prompts/taboo_describer_train.jsonl"
VAL_PROMPTS = "reward/prompts/taboo_describer_validation.jsonl"


class Names:
    """Who generates (and learns), and the runs' names: tiny-sentiment-rm/-rl for playpen-tiny as the configs
    have them, <model>-sentiment-rm/-rl otherwise (registered as <experiment>-v1)."""

    def __init__(self, model: str):
        self.model = model
        from playpen.storage import slug

        prefix = "tiny" if model == "playpen-tiny" else slug(model)
        self.rm_exp, self.rl_exp = f"{prefix}-sentiment-rm", f"{prefix}-sentiment-rl"
        self.rm, self.rl = f"{self.rm_exp}-v1", f"{self.rl_exp}-v1"
        self.file = model  # playpen meter's file stem for the generator (storage.slug keeps these names)
        self.results = "reward" if model == "playpen-tiny" else f"reward-{prefix}"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rm-steps", type=int, default=None, help="reward model steps (default: the config's)")
    p.add_argument("--rl-steps", type=int, default=None, help="GRPO steps (default: the config's)")
    p.add_argument("--beta", type=float, default=None, help="KL weight (default: the config's)")
    p.add_argument("--label-samples", type=int, default=8)
    p.add_argument("--meter-samples", type=int, default=32)
    p.add_argument("--storage", type=Path, default=None, help="run folder (default: a fresh temporary one)")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from --storage's finished runs")
    p.add_argument("--model", default="playpen-tiny", help="the generator: writes the clues, learns, is metered")
    p.add_argument("--rm-model", default="playpen-tiny", help="the reward model's base (default playpen-tiny)")
    p.add_argument("--rl-lr", type=float, default=None, help="GRPO learning rate (default: the config's)")
    p.add_argument("--rl-batch", type=int, default=None, help="GRPO completions per step (default: the config's)")
    p.add_argument("--threads", type=int, default=None, help="cpu_threads of both runs (default: the configs')")
    p.add_argument("--checkpoint-every", type=int, default=10, help="RL steps between the checkpoints metered in 5.")
    p.add_argument("--held-in-samples", type=int, default=4, help="clues per held-in train prompt per checkpoint")
    return p.parse_args()


def playpen(args: list[str], env: dict) -> float:
    """Run one playpen command in its own process; its wall time. Its output goes to the terminal."""
    started = time.perf_counter()
    print(f"\n$ playpen {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "playpen.cli", *args], cwd=REPO, env=env, check=True)
    return time.perf_counter() - started


def meter(model: str, classifier: str, out: Path, samples: int, env: dict, prompts: str = VAL_PROMPTS,
          compare: str | None = None) -> float:
    return playpen(["meter", model, *(["--compare", compare] if compare else []), "--classifier", classifier,
                    "--prompts", prompts, "-n", str(samples), "--max-new-tokens", "24", "-o", str(out)], env)


def override(key: str, value) -> list[str]:
    return [] if value is None else [f"{key}={value}"]


def config_value(storage: Path, run: str, key: str):
    """A trainer: value as the run resolved it (its config.yaml)."""
    import yaml

    return yaml.safe_load((storage / run / "v1" / "config.yaml").read_text())["trainer"][key]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def curve(metrics: Path) -> list[dict]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    by_step = {r["step"]: r for r in rows if "kl" in r and "reward" in r}  # a resumed step's row replaces its old one
    return [by_step[s] for s in sorted(by_step)]


def plot(rows: list[dict], vader: Path, out: Path, names: Names) -> None:
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    steps = [r["step"] for r in rows]
    left.plot(steps, [r["reward"] for r in rows], color="tab:blue", marker=".", label="learned reward (mean)")
    left.set_xlabel("GRPO step")
    left.set_ylabel("reward model score")
    left.grid(alpha=0.3)
    kl_axis = left.twinx()
    kl_axis.plot(steps, [r["kl"] for r in rows], color="tab:purple", marker=".", label="KL to the base model")
    kl_axis.set_ylabel("KL (per token)")
    handles = left.get_legend_handles_labels()[0] + kl_axis.get_legend_handles_labels()[0]
    left.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
    left.set_title("RL against the reward model", fontsize=10)
    for name, color in ((names.file, "tab:blue"), (names.rl, "tab:orange")):
        with (vader / f"{name}.completions.csv").open() as f:
            scores = [float(r["score"]) for r in csv.DictReader(f)]
        summary = load(vader / f"{name}.summary.json")
        right.hist(scores, bins=[-1 + i / 20 for i in range(41)], alpha=0.55, color=color,
                   label=f"{name}: mean {summary['mean']:.3f} ± {summary['stderr']:.3f}")
    right.set_yscale("log")
    right.set_xlabel("VADER compound sentiment of the clue")
    right.set_ylabel("clues (log)")
    right.set_title("held-out prompts, before vs after (playpen meter)", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def word_shift(folder: Path, names: Names, top: int = 6) -> list[tuple[str, float, int, int]]:
    """The VADER lexicon words whose use changed most between base and trained clues: (word, valence, base
    count, trained count), most grown first."""
    import csv
    import re
    from collections import Counter

    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    lexicon = SentimentIntensityAnalyzer().lexicon
    counts = []
    for name in (names.file, names.rl):
        with (folder / f"{name}.completions.csv").open() as f:
            counts.append(Counter(w for r in csv.DictReader(f) for w in re.findall(r"[a-z']+", r["completion"].lower())
                                  if w in lexicon))
    words = sorted(set(counts[0]) | set(counts[1]), key=lambda w: counts[0][w] - counts[1][w])
    return [(w, lexicon[w], counts[0][w], counts[1][w]) for w in words[:top]]


def clue_format(folder: Path, name: str) -> float:
    import csv

    with (folder / f"{name}.completions.csv").open() as f:
        rows = list(csv.DictReader(f))
    return sum(r["completion"].startswith("CLUE:") for r in rows) / len(rows)


def report(args, storage: Path, times: dict, load_avg: float, names: Names) -> str:
    rm_steps = config_value(storage, names.rm_exp, "max_steps")
    rl_steps, beta, lr = (config_value(storage, names.rl_exp, k) for k in ("max_steps", "beta", "learning_rate"))
    rm_eval = load(storage / names.rm_exp / "v1" / "reward_eval.json")
    rows = curve(storage / names.rl_exp / "v1" / "metrics.jsonl")
    vader, learned = storage / "meter-vader", storage / "meter-rm"
    k = max(1, len(rows) // 6)
    first, last = rows[:k], rows[-k:]
    kls = [r["kl"] for r in rows]
    lines = [f"# Reward models end to end (generated {datetime.now():%Y-%m-%d %H:%M})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"`python bench/studies/bench_reward.py {' '.join(sys.argv[1:])}` (reward model on {args.rm_model}, "
             f"{rm_steps} steps; GRPO of {names.model}, {rl_steps} steps, learning rate {lr:g}, beta {beta}) "
             f"(load average at start: {load_avg:.1f} — other jobs on a shared machine inflate times).", "",
             f"The trlX \"make reviews positive\" tutorial in miniature, offline: {names.model} writes taboo clues "
             "(`CLUE: ...`); VADER (vaderSentiment, PyPI) labels them; a reward model learns the labels; GRPO with a "
             "KL leash optimises the reward model; `playpen meter` compares base and trained model on the 21 "
             "held-out validation prompts.", "",
             "| step | command | wall (s) |", "|---|---|---:|"]
    for step, (command, seconds) in times.items():
        lines.append(f"| {step} | `{command}` | {seconds:.0f} |")
    lines += ["", "## Reward model", "",
              f"{rm_eval['pairs']} preference pairs ({rm_eval['format']}s; clues of one prompt, more positive "
              f"preferred, up to 4 per clue), {rm_eval['train_pairs']} trained on ({rm_steps} steps, full "
              f"weights), {rm_eval['held_out_pairs']} held out: **held-out accuracy {rm_eval['accuracy']:.3f}** "
              f"(mean margin {rm_eval['margin']:.2f}).", "",
              f"## RL against it (GRPO, beta = {beta:g})", "",
              f"Mean learned reward, first {k} vs last {k} of {len(rows)} steps: "
              f"{statistics.mean(r['reward'] for r in first):.2f} → {statistics.mean(r['reward'] for r in last):.2f}. "
              f"KL to the base model (per token, TRL's estimate, every step in metrics.jsonl): "
              f"{statistics.mean(r['kl'] for r in first):.3f} → {statistics.mean(r['kl'] for r in last):.3f}, "
              f"max {max(kls):.3f}.", "",
              "## Meter: base vs trained on held-out prompts", "",
              "| scorer | model | n | mean | s.e. | s.e. by prompt | share above |", "|---|---|---:|---:|---:|---:|---:|"]
    verdicts = []
    for label, folder in (("VADER (independent)", vader), ("reward model", learned)):
        for name in (names.file, names.rl):
            s = load(folder / f"{name}.summary.json")
            lines.append(f"| {label} | {name} | {s['n']} | {s['mean']:.4f} | {s['stderr']:.4f} | "
                         f"{s['stderr_by_prompt']:.4f} | {100 * s['share_above']:.1f} % (> {s['threshold']:g}) |")
        c = load(folder / "comparison.json")
        verdicts.append(f"- {label}: {c['difference']:+.4f} = **{c['z_stderr']:+.1f} standard errors** "
                        f"({c['z_stderr_by_prompt']:+.1f} with the per-prompt standard error, which treats the "
                        f"{args.meter_samples} clues of a prompt as correlated)")
    z = load(vader / "comparison.json")["z_stderr"]
    met = "meets" if z > 5 else "misses"
    shift = ", ".join(f"{w} ({v:+.1f}): {a} → {b}" for w, v, a, b in word_shift(vader, names))
    lines += ["", "Shift of the mean (trained − base):", "", *verdicts, "",
              f"What changed: VADER lexicon words in the {load(vader / f'{names.file}.summary.json')['n']} clues, "
              f"base → trained (valence): {shift}. "
              + ("The policy found the cheapest positive words its vocabulary already had (the reward model learned "
                 "them from the labels), not fluent praise: a 1M-parameter model. " if names.model == "playpen-tiny"
                 else "")
              + f"The reply format under the KL leash: `CLUE:` in "
              f"{100 * clue_format(vader, names.file):.1f} % → {100 * clue_format(vader, names.rl):.1f} % of "
              f"the clues.", "",
              f"**Target (mean moves by > 5 standard errors, KL reported and bounded): {met} it on the independent "
              f"VADER meter ({z:+.1f} s.e.), with KL at most {max(kls):.3f} per token.**", "",
              f"![reward]({names.results}.png)", ""]
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    names = Names(args.model)
    storage = args.storage or Path(tempfile.mkdtemp(prefix="bench-reward-"))
    env = {**os.environ, "PLAYPEN_STORAGE": str(storage)}  # registered names (tiny-sentiment-rm-v1) resolve there
    load_avg = os.getloadavg()[0]
    if args.report_only:
        times = json.loads((storage / "times.json").read_text())
        load_avg = times.pop("load average")
        return write_results(args, storage, times, load_avg, names)
    times = json.loads((storage / "times.json").read_text()) if (storage / "times.json").is_file() else {}
    times.pop("load average", None)

    def step(key: str, command: str, done: Path, run) -> None:  # a rerun with --storage skips finished steps
        if key not in times or not done.exists():
            times[key] = (command, run())
            (storage / "times.json").write_text(json.dumps({**times, "load average": load_avg}))

    label = storage / "label"
    threads = override("cpu_threads", args.threads)
    step("1 label", f"meter {names.model} --classifier vader", label / f"{names.file}.summary.json", lambda: meter(
        names.model, "vader", label, args.label_samples, env, prompts=TRAIN_PROMPTS))
    step("2 reward model", "train reward --config reward/tiny_sentiment",
         storage / names.rm_exp / "v1" / "reward_eval.json", lambda: playpen(
             ["train", "reward", "--config", "reward/tiny_sentiment", f"storage_root={storage}",
              f"experiment={names.rm_exp}", f"model={args.rm_model}", f"data={label / f'{names.file}.labelled.jsonl'}",
              *threads, *override("trainer.max_steps", args.rm_steps)], env))
    step("3 RL", "train grpo --config grpo/tiny_reward_model",
         storage / names.rl_exp / "v1" / "model_registry.json", lambda: playpen(
             ["train", "grpo", "--config", "grpo/tiny_reward_model", f"storage_root={storage}",
              f"experiment={names.rl_exp}", f"model={names.model}", f"reward_model={names.rm}", *threads,
              *([] if names.model == "playpen-tiny" else ["lora.modules_to_save=null"]),  # [norm]: the tiny's
              *override("trainer.max_steps", args.rl_steps), *override("trainer.beta", args.beta),
              *override("trainer.learning_rate", args.rl_lr),
              *override("trainer.per_device_train_batch_size", args.rl_batch),
              *override("trainer.save_steps", args.checkpoint_every),
              "trainer.save_total_limit=1000"], env))  # every checkpoint kept for step 5
    step("4a meter (VADER)", f"meter {names.model} --compare {names.rl} --classifier vader",
         storage / "meter-vader" / "comparison.json", lambda: meter(
             names.model, "vader", storage / "meter-vader", args.meter_samples, env, compare=names.rl))
    step("4b meter (reward model)", f"meter {names.model} --compare {names.rl} --classifier {names.rm}",
         storage / "meter-rm" / "comparison.json", lambda: meter(
             names.model, names.rm, storage / "meter-rm", args.meter_samples, env, compare=names.rl))
    for checkpoint in checkpoints(storage, names):
        out = storage / "checkpoints" / checkpoint.name
        for key, classifier, prompts, samples in (("held-in", "vader", TRAIN_PROMPTS, args.held_in_samples),
                                                  ("gold", "vader", VAL_PROMPTS, args.meter_samples),
                                                  ("proxy", names.rm, VAL_PROMPTS, args.meter_samples)):
            step(f"5 {checkpoint.name} {key}", f"meter <checkpoint> --classifier {classifier}",
                 summary_in(out / key),
                 lambda c=checkpoint, k=key, cl=classifier, pr=prompts, n=samples: meter(
                     str(c), cl, out / k, n, env, prompts=pr))
    return write_results(args, storage, times, load_avg, names)


def summary_in(folder: Path) -> Path:
    """The meter's summary in `folder` (named after the model as the meter names it), or a path that does not exist."""
    return next(iter(sorted(folder.glob("*.summary.json"))), folder / "missing.summary.json")


def checkpoints(storage: Path, names: Names) -> list[Path]:
    folder = storage / names.rl_exp / "v1" / "checkpoints"
    return sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])) if folder.is_dir() else []


def checkpoint_table(storage: Path, names: Names) -> list[dict]:
    """Per RL checkpoint: held-in VADER (the selection metric), held-out VADER (gold) and reward model (proxy)."""
    rows = []
    for checkpoint in checkpoints(storage, names):
        folder = storage / "checkpoints" / checkpoint.name
        parts = {k: summary_in(folder / k) for k in ("held-in", "gold", "proxy")}
        if all(p.is_file() for p in parts.values()):
            rows.append({"step": int(checkpoint.name.split("-")[1]),
                         **{k: load(p) for k, p in parts.items()}})
    return rows


def plot_checkpoints(rows: list[dict], base: dict, out: Path, chosen: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, gold_axis = plt.subplots(figsize=(7, 4))
    steps = [0] + [r["step"] for r in rows]
    for key, axis, color, label in (("gold", gold_axis, "tab:green", "VADER on held-out prompts (gold)"),
                                    ("held-in", gold_axis, "tab:olive", "VADER on held-in prompts (selects)")):
        means = [base[key]["mean"]] + [r[key]["mean"] for r in rows]
        errors = [base[key]["stderr"]] + [r[key]["stderr"] for r in rows]
        axis.errorbar(steps, means, yerr=errors, color=color, marker="o", capsize=3, label=label)
    gold_axis.set_xlabel("GRPO step (0 = base model)")
    gold_axis.set_ylabel("VADER compound sentiment (mean)")
    proxy_axis = gold_axis.twinx()
    proxy_axis.errorbar(steps, [base["proxy"]["mean"]] + [r["proxy"]["mean"] for r in rows],
                        yerr=[base["proxy"]["stderr"]] + [r["proxy"]["stderr"] for r in rows], color="tab:blue",
                        marker="s", capsize=3, label="reward model on held-out prompts (proxy)")
    proxy_axis.set_ylabel("reward model score (mean)")
    gold_axis.axvline(chosen, color="grey", linestyle=":", label=f"chosen: step {chosen}")
    handles = gold_axis.get_legend_handles_labels()[0] + proxy_axis.get_legend_handles_labels()[0]
    gold_axis.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
    gold_axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def checkpoint_lines(storage: Path, names: Names) -> list[str]:
    rows = checkpoint_table(storage, names)
    if not rows:
        return []
    base = {"held-in": load(storage / "label" / f"{names.file}.summary.json"),
            "gold": load(storage / "meter-vader" / f"{names.file}.summary.json"),
            "proxy": load(storage / "meter-rm" / f"{names.file}.summary.json")}
    chosen = max(rows, key=lambda r: r["held-in"]["mean"])["step"]
    plot_checkpoints(rows, base, RESULTS / f"{names.results}-checkpoints.png", chosen)
    cell = lambda s: f"{s['mean']:.3f} ± {s['stderr']:.3f}"  # noqa: E731
    lines = ["## Choosing the RL checkpoint by an independent metric", "",
             "Each checkpoint metered on held-in train prompts by VADER (the pick: the highest mean), and on the "
             "held-out prompts by VADER (gold) and by the reward model it was trained against (proxy). The base "
             "model's held-in row is the labelling run's.", "",
             "| step | held-in VADER (selects) | held-out VADER (gold) | held-out reward model (proxy) |",
             "|---:|---:|---:|---:|", f"| 0 (base) | {cell(base['held-in'])} | {cell(base['gold'])} | "
             f"{cell(base['proxy'])} |"]
    lines += [f"| {r['step']}{' **chosen**' if r['step'] == chosen else ''} | {cell(r['held-in'])} | "
              f"{cell(r['gold'])} | {cell(r['proxy'])} |" for r in rows]
    best_gold = max(rows, key=lambda r: r["gold"]["mean"])["step"]
    best_proxy = max(rows, key=lambda r: r["proxy"]["mean"])["step"]
    lines += ["", f"Chosen by held-in VADER: step {chosen}; the best held-out gold is at step {best_gold}, the best "
              f"proxy at step {best_proxy}.", "", f"![checkpoints]({names.results}-checkpoints.png)", ""]
    return lines


def write_results(args, storage: Path, times: dict, load_avg: float, names: Names) -> int:
    RESULTS.mkdir(parents=True, exist_ok=True)
    png, md = RESULTS / f"{names.results}.png", RESULTS / f"{names.results}.md"
    plot(curve(storage / names.rl_exp / "v1" / "metrics.jsonl"), storage / "meter-vader", png, names)
    md.write_text(report(args, storage, {k: v for k, v in times.items() if not k.startswith("5 ")}, load_avg, names)
                  + "\n".join(checkpoint_lines(storage, names)))
    print(f"\nwrote {md} and {png} (runs in {storage})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
