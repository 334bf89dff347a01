"""Judge win rate per round of a debate training run in rounds: iterative DPO (branching pairs,
dpo/debate_iterative, or best-of-N pairs, dpo/debate_best_of_n) or expert iteration (`playpen train rft`, won
debates kept).

    playpen debate curve RUNS/<experiment>/<run_id> [--instances 30] [-T 0]

Two views, written to <run>/debate_curve.json and <run>/debate_curve.png:
- rollouts: each round's own play (metrics.jsonl: the judge's mean probability for Debater A's answer, A's win
  rate, preference pairs or kept debates), i.e. the policy each round started from, on train passages;
- held out: the policy before training and after each round (checkpoints/iter_k/final) argue as Debater A (or
  the game's player 1) against the pinned expert before the programmatic judge, on --instances held-out passages
  (the validation items, then fresh ones of the validation stream: generator seeds 1, 2, ..., none in the train
  split; all with the train split's pinned partners and main score), at --temperature (greedy by default). Per
  policy: win rate, judge probability, quote precision of player 1 per round, and against the policy before
  training the paired difference in wins (s.e., McNemar's p) on the same debates.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

from playpen.config import load_yaml
from playpen.errors import PlaypenError
from playpen.debate_tools.recorded_episodes import GAMES, mean
from playpen.storage import atomic_write_json, write_figure


def round_rows(run: Path) -> list[dict]:
    """The rows a method in rounds logs when a round has played ({"round": k, ...}), in order."""
    from playpen.storage import read_jsonl

    return [r for r in read_jsonl(run / "metrics.jsonl") if "round" in r] if (run / "metrics.jsonl").is_file() \
        else []


def policies(run: Path, config: dict) -> list[tuple[str, str, str | None]]:
    """(label, weights folder, adapter folder or None): the model the run started from (a registry name, or a run
    whose adapter it continued, e.g. a warm start), then every finished round's final."""
    from playpen.models.modeling import resolve_model_spec

    start = resolve_model_spec(config["model"])
    base = start["huggingface_id"]
    found = [("before training", base, (start.get("model_config") or {}).get("peft_model"))]
    for k, folder in enumerate(sorted((run / "checkpoints").glob("iter_*/final"))):
        adapter = (folder / "adapter_config.json").is_file()
        found.append((f"after round {k}", base if adapter else str(folder), str(folder) if adapter else None))
    return found


PINNED = ("judge", "opponent", "opponent_skill", "main_score")
GENERATED_ID = 100_000  # generated held-out passages: game_id = seed * GENERATED_ID + its own id


def held_out_pairs(game: str, limit: int | None):
    """`limit` held-out items (all validation items when None) under the train split's seat pins and main score
    (its experiments have the same names): the validation set shuffled, then fresh validation-stream passages of
    generator seeds 1, 2, ... (none that the train split or an earlier item has)."""
    from playpen.games.instances import generate_instances, load_instances, pick_generated

    train_pairs = load_instances(game, "train")
    train = {e["name"]: {k: e[k] for k in PINNED if k in e} for e, _ in train_pairs}
    pairs = load_instances(game, "validation", limit=limit, seed=0)
    seen = {i["passage"] for _, i in train_pairs} | {i["passage"] for _, i in pairs}
    seed = 1
    while limit is not None and len(pairs) < limit:
        instances, _ = generate_instances(game, seed, {"split": "validation"})
        for e, i in pick_generated(game, instances, seed):
            if i["passage"] not in seen and len(pairs) < limit:
                seen.add(i["passage"])
                pairs.append((e, {**i, "game_id": seed * GENERATED_ID + int(i["game_id"])}))
        seed += 1
    return [({**e, **train.get(e["name"], {})}, i) for e, i in pairs]


def advocate_quotes(interactions: dict, speaker: str) -> list[tuple[int, int]]:
    """(quotes, verified quotes) of `speaker`'s speeches in each debate round, from the GM's speech notes."""
    from playpen.games.common import episode_gm_events

    by_round: dict[int, list[int]] = {}
    for _, speech in episode_gm_events(interactions, "speech"):
        if speech["speaker"] == speaker:
            counts = by_round.setdefault(speech["round"], [0, 0])
            counts[0] += len(speech["quotes"])
            counts[1] += sum(bool(q["verified"]) for q in speech["quotes"])
    return [tuple(by_round.get(r, (0, 0))) for r in range(max(by_round, default=-1) + 1)]


def episode_row(episode, game: str) -> dict:
    """What the curve keeps of one held-out debate (enough for paired comparisons)."""
    s = episode.episode_scores
    main = s.get("Main Score", float("nan"))
    return {"id": f"{episode.experiment}/{episode.game_id}", "won": s.get("Player 1 Wins"),
            "judge_probability": None if math.isnan(main) else main / 100,
            "judge_correct": s.get("Judge Correct"), "aborted": bool(s.get("Aborted")),
            "quotes": advocate_quotes(episode.interactions, "C" if game == "consultancy" else "A")}


def summarize(rows: list[dict]) -> dict:
    """Win rate (and its s.e.), judge probability and accuracy, quote precision of player 1 overall and per round
    (verified / all of its quotes in that round, over every debate), quotes per debate, % aborted."""
    wins = [float(r["won"]) for r in rows if r["won"] is not None and not math.isnan(r["won"])]
    rate = mean(wins)
    per_round = []
    for k in range(max((len(r["quotes"]) for r in rows), default=0)):
        quotes = sum(r["quotes"][k][0] for r in rows if len(r["quotes"]) > k)
        verified = sum(r["quotes"][k][1] for r in rows if len(r["quotes"]) > k)
        per_round.append(verified / quotes if quotes else float("nan"))
    quotes = sum(q for r in rows for q, _ in r["quotes"])
    return {"episodes": len(rows), "win_rate": rate,
            "win_rate_se": math.sqrt(rate * (1 - rate) / len(wins)) if wins else float("nan"),
            "judge_probability": mean(r["judge_probability"] for r in rows),
            "judge_accuracy": mean(r["judge_correct"] for r in rows),
            "quote_precision": sum(v for r in rows for _, v in r["quotes"]) / quotes if quotes else float("nan"),
            "quote_precision_by_round": per_round,
            "quotes_per_debate": quotes / len(rows) if rows else float("nan"),
            "aborted_pct": 100 * mean(float(r["aborted"]) for r in rows)}


def paired(after: list[dict], before: list[dict]) -> dict:
    """after − before on the same debates: the difference in win rate, its s.e., debates won only after (wins)
    and only before (losses), McNemar's exact two-sided p. Aborted debates count as lost."""
    won_before = {r["id"]: r["won"] == 1 for r in before}
    diffs = [int(r["won"] == 1) - int(won_before[r["id"]]) for r in after if r["id"] in won_before]
    n = len(diffs)
    if n < 2:
        return {"n": n}
    m = sum(diffs) / n
    se = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1) / n)
    wins, losses = diffs.count(1), diffs.count(-1)
    k, both = min(wins, losses), wins + losses
    p = min(1.0, 2 * sum(math.comb(both, i) for i in range(k + 1)) / 2 ** both) if both else 1.0
    return {"n": n, "diff": m, "se": se, "wins": wins, "losses": losses, "p": p}


def play_policy(weights: str, adapter: str | None, tokenizer_from: str, pairs, temperature: float,
                max_new_tokens: int, game: str, cache_dir: Path | None = None) -> dict:
    """Summary and per-debate rows of one policy on the held-out pairs; with cache_dir, kept there per (weights,
    adapter, items, settings) so that a policy is played once."""
    key = hashlib.sha256(json.dumps([weights, adapter, game, temperature, max_new_tokens,
                                     [(e["name"], i["game_id"]) for e, i in pairs]]).encode()).hexdigest()[:16]
    cached = Path(cache_dir) / f"{key}.json" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        return json.loads(cached.read_text())
    import torch

    from playpen.rollout import LocalPolicy, RolloutEngine
    from playpen.models import modeling

    model = modeling.load_model(weights, None, torch.float32, peft_model=adapter, trainable=False)
    model.eval()
    policy = LocalPolicy(model, modeling.load_tokenizer(tokenizer_from), name="policy")
    engine = RolloutEngine(policy, None, max_new_tokens=max_new_tokens, temperature=temperature,
                           batch_size=32, progress=False, seed=0)
    rows = [episode_row(e, game) for e in engine.play(game, pairs)]
    result = {**summarize(rows), "rows": rows}
    if cached is not None:
        atomic_write_json(cached, result)
    return result


def plot(curve: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    held = curve["held_out"]
    x = range(len(held))
    axes[0].errorbar(x, [h["win_rate"] for h in held], yerr=[h.get("win_rate_se", 0) for h in held], marker="o",
                     capsize=3, label="win rate (judge picks A)")
    axes[0].plot(x, [h["judge_probability"] for h in held], marker=".", linestyle="--",
                 label="judge's probability for A")
    for k in range(max((len(h.get("quote_precision_by_round", [])) for h in held), default=0)):
        axes[0].plot(x, [(h["quote_precision_by_round"][k] if len(h["quote_precision_by_round"]) > k
                          else float("nan")) for h in held],
                     marker="x", linestyle=":", label=f"A's quote precision, round {k + 1}")
    axes[0].set_xticks(x, [h["policy"] for h in held], fontsize=8)
    axes[0].set_ylim(0, 1)
    axes[0].set_title(f"held out ({held[0]['episodes'] if held else 0} debates, paired)", fontsize=9)
    rounds = curve["rounds"]
    axes[1].plot(range(len(rounds)), [r.get("success_rate") for r in rounds], marker="o", label="win rate")
    axes[1].plot(range(len(rounds)), [r.get("reward") for r in rounds], marker=".", linestyle="--",
                 label="reward (judge's probability for A; -1 if aborted)")
    right = axes[1].twinx()
    counted = "pairs" if any("pairs" in r for r in rounds) else "kept"
    right.bar(range(len(rounds)), [r.get(counted, 0) for r in rounds], alpha=0.2, color="gray")
    right.set_ylabel("preference pairs" if counted == "pairs" else "won debates kept")
    axes[1].set_xticks(range(len(rounds)), [f"round {k}" for k in range(len(rounds))], fontsize=8)
    axes[1].set_ylim(0, 1)
    axes[1].set_title("rollouts of each round (train passages)", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"debate: Debater A vs the expert, programmatic judge: {curve['run']}", fontsize=9)
    fig.tight_layout()
    write_figure(out, fig, dpi=100)
    plt.close(fig)
    return out


def curve(run_dir: str | Path, instances: int | None = 30, temperature: float = 0.0, log=print,
          cache_dir: Path | None = None) -> dict:
    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise PlaypenError(f"{run} is not a training run folder (no config.yaml)")
    config = load_yaml(run / "config.yaml", "run config")
    game = config.get("game")
    if game not in GAMES:
        raise PlaypenError(f"{run} trained on {game!r}, not one of {', '.join(GAMES)}")
    if instances is not None and instances < 1:
        raise PlaypenError(f"--instances must be at least 1, got {instances}")
    pairs = held_out_pairs(game, instances)
    held = []
    found = policies(run, config)
    for label, weights, adapter in found:
        tokenizer_from = found[0][1]  # the base model's: training does not change the tokenizer
        result = play_policy(weights, adapter, tokenizer_from, pairs, temperature,
                             int(config.get("max_new_tokens", 64)), game, cache_dir)
        if held:
            result["paired_vs_before"] = paired(result["rows"], held[0]["rows"])
        log(f"[curve] {label}: win rate {result['win_rate']:.3f}, judge probability "
            f"{result['judge_probability']:.3f} ({result['episodes']} debates)")
        held.append({"policy": label, **result})
    out = {"run": f"{run.parent.name}/{run.name}", "temperature": temperature, "held_out": held,
           "rounds": round_rows(run)}
    atomic_write_json(run / "debate_curve.json", out)
    plot(out, run / "debate_curve.png")
    return out


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--instances", type=int, default=30,
                        help="held-out debates per policy (beyond the 30 validation items: generated ones)")
    parser.add_argument("-T", "--temperature", type=float, default=0.0, help="the policy's sampling temperature as "
                        "Debater A (default 0.0: greedy)")


def main(args) -> int:
    curve(args.run_dir, args.instances, args.temperature)
    print(f"{args.run_dir / 'debate_curve.png'}")
    return 0


if __name__ == "__main__":  # python -m playpen.debate_tools.curve: an alias of `playpen debate curve`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "curve", *sys.argv[1:]]))
