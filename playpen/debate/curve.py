"""Judge win rate per iteration of an iterative-DPO debate run (dpo/debate_iterative).

    playpen debate curve RUNS/<experiment>/<run_id> [--instances 30] [-T 0]

Two views, written to <run>/debate_curve.json and <run>/debate_curve.png:
- rollouts: each round's own play (metrics.jsonl: the judge's mean probability for Debater A's answer, A's win
  rate, preference pairs), i.e. the policy each round started from, on train passages;
- held out: the policy before training and after each round (checkpoints/iter_k/final) argue as Debater A on
  validation passages against the expert Debater B before the programmatic judge (the validation items with the
  train split's pinned partners and main score), at --temperature (greedy by default).
"""
from __future__ import annotations

import sys
from pathlib import Path

from playpen.config import load_yaml
from playpen.errors import PlaypenError
from playpen.debate.records import mean
from playpen.storage import atomic_write_json, write_figure


def round_rows(run: Path) -> list[dict]:
    """The rows DPO logs when a round has played (they carry "pairs"), in order."""
    from playpen.storage import read_jsonl

    return [r for r in read_jsonl(run / "metrics.jsonl") if "pairs" in r] if (run / "metrics.jsonl").is_file() \
        else []


def policies(run: Path, config: dict) -> list[tuple[str, str, str | None]]:
    """(label, weights folder, adapter folder or None): the base model, then every finished round's final."""
    from playpen.registry import resolve_model

    base = resolve_model(config["model"])["huggingface_id"]
    found = [("before training", base, None)]
    for k, folder in enumerate(sorted((run / "checkpoints").glob("iter_*/final"))):
        adapter = (folder / "adapter_config.json").is_file()
        found.append((f"after round {k}", base if adapter else str(folder), str(folder) if adapter else None))
    return found


PINNED = ("judge", "opponent", "opponent_skill", "main_score")


def held_out_pairs(game: str, limit: int | None):
    """Validation items under the train split's seat pins and main score (its experiments have the same names)."""
    from playpen.games.instances import load_instances

    train = {e["name"]: {k: e[k] for k in PINNED if k in e} for e, _ in load_instances(game, "train")}
    return [({**e, **train.get(e["name"], {})}, i) for e, i in load_instances(game, "validation", limit=limit, seed=0)]


def play_policy(weights: str, adapter: str | None, tokenizer_from: str, pairs, temperature: float,
                max_new_tokens: int, game: str) -> dict:
    import torch

    from playpen.rollout import LocalPolicy, RolloutEngine
    from playpen.models import modeling

    model = modeling.load_model(weights, None, torch.float32, peft_model=adapter, trainable=False)
    model.eval()
    policy = LocalPolicy(model, modeling.load_tokenizer(tokenizer_from), name="policy")
    engine = RolloutEngine(policy, None, max_new_tokens=max_new_tokens, temperature=temperature,
                           batch_size=32, progress=False, seed=0)
    episodes = engine.play(game, pairs)
    scores = [e.episode_scores for e in episodes]
    quotes = "Quote Precision A" if game == "debate" else "Quote Precision"
    return {"episodes": len(episodes), "win_rate": mean(s.get("Player 1 Wins") for s in scores),
            "judge_probability": mean(s.get("Main Score", float("nan")) / 100 for s in scores),
            "judge_accuracy": mean(s.get("Judge Correct") for s in scores),
            "quote_precision": mean(s.get(quotes) for s in scores),
            "aborted_pct": 100 * mean(float(bool(s.get("Aborted"))) for s in scores)}


def plot(curve: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    held = curve["held_out"]
    axes[0].plot(range(len(held)), [h["win_rate"] for h in held], marker="o", label="win rate (judge picks A)")
    axes[0].plot(range(len(held)), [h["judge_probability"] for h in held], marker=".", linestyle="--",
                 label="judge's probability for A")
    axes[0].set_xticks(range(len(held)), [h["policy"] for h in held], fontsize=8)
    axes[0].set_ylim(0, 1)
    axes[0].set_title(f"held out ({held[0]['episodes'] if held else 0} validation debates)", fontsize=9)
    rounds = curve["rounds"]
    axes[1].plot(range(len(rounds)), [r.get("success_rate") for r in rounds], marker="o", label="win rate")
    axes[1].plot(range(len(rounds)), [r.get("reward") for r in rounds], marker=".", linestyle="--",
                 label="reward (judge's probability for A; -1 if aborted)")
    right = axes[1].twinx()
    right.bar(range(len(rounds)), [r.get("pairs", 0) for r in rounds], alpha=0.2, color="gray")
    right.set_ylabel("preference pairs")
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


def curve(run_dir: str | Path, instances: int | None = 30, temperature: float = 0.0, log=print) -> dict:
    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise PlaypenError(f"{run} is not a training run folder (no config.yaml)")
    config = load_yaml(run / "config.yaml", "run config")
    game = config.get("game")
    if game not in ("debate", "consultancy"):
        raise PlaypenError(f"{run} trained on {game!r}, not debate or consultancy")
    pairs = held_out_pairs(game, instances)
    held = []
    found = policies(run, config)
    for label, weights, adapter in found:
        tokenizer_from = found[0][1]  # the base model's: training does not change the tokenizer
        result = play_policy(weights, adapter, tokenizer_from, pairs, temperature,
                             int(config.get("max_new_tokens", 64)), game)
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
    parser.add_argument("--instances", type=int, default=30, help="validation debates per policy")
    parser.add_argument("-T", "--temperature", type=float, default=0.0, help="the policy's sampling temperature as "
                        "Debater A (default 0.0: greedy)")


def main(args) -> int:
    curve(args.run_dir, args.instances, args.temperature)
    print(f"{args.run_dir / 'debate_curve.png'}")
    return 0


if __name__ == "__main__":  # python -m playpen.debate.curve: an alias of `playpen debate curve`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "curve", *sys.argv[1:]]))
