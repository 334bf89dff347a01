"""Rollout throughput: playpen's RolloutEngine vs clemcore's own runners → bench/results/rollout.md.

    python bench/bench_rollout.py [--episodes 64] [--max-new-tokens 24] [--batch-sizes 16 64] [--repeats 1]

Same model object (playpen-tiny loaded once through clemcore's huggingface_local backend, exactly as `clem run`
loads it; the engine wraps the very same weights and tokenizer), same game (wordle), same instances (the first N
of the train split), same token limit, greedy decoding, same batch size, all in one process (no start-up cost
counted), every runner writing its records (clemcore with `clem run`'s file savers, the engine with
playpen-records). Runners:

- clemcore sequential runner (`clem run`, batch size 1),
- clemcore batchwise runner (`clem run -b N`),
- RolloutEngine with its KV cache kept across turns, and with it dropped (re-encoding every turn), to measure
  what the cache is worth at this size.

With greedy decoding all runners play the same episodes; the table reports mean turns, aborted share and how
many episodes ended identically (turns, outcome) to the sequential runner, so that a fast runner that plays
different (shorter) games would show. Targets: ≥ 10× sequential, ≥ 2× clemcore batchwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results" / "rollout.md"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="wordle")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3,
                   help="median over this many timed runs per runner (the sequential runner runs once)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for every runner (default 1, what clemcore's huggingface backend sets)")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args()


def clem_stats(results: Path) -> dict[int, tuple[int, str]]:
    stats = {}
    for path in results.rglob("interactions.json"):
        interactions = json.loads(path.read_text())
        outcome = "aborted" if interactions.get("Aborted") else "success" if interactions.get("Success") else "lose"
        stats[interactions["meta"]["game_id"]] = (int(interactions["meta"]["round_count"]), outcome)
    return stats


def main() -> None:
    args = parse_args()
    import torch
    from clemcore.backends import BackendRegistry, Model, ModelSpec
    from clemcore.clemgame import (ExperimentFileSaver, GameBenchmarkCallbackList, GameInstances,
                                   InstanceFileSaver, InteractionsFileSaver, ResultsFolder, SignalFileSaver)
    from clemcore.clemgame.callbacks.files import PlayerFileSaver
    from clemcore.clemgame.runners import batchwise, sequential

    from playpen.models.tiny import ensure_tiny_model
    from playpen.registry import resolve_game, resolve_model
    from playpen.rollout import LocalPolicy, RolloutEngine, load_instances
    from playpen.rollout.instances import load_benchmark

    threads = args.threads
    ensure_tiny_model()
    spec = ModelSpec.from_dict(resolve_model("playpen-tiny"))
    clem_model = BackendRegistry.from_packaged_and_cwd_files().get_backend_for("huggingface_local") \
        .get_model_for(spec)
    clem_model.set_gen_args(temperature=0.0, max_tokens=args.max_new_tokens)
    torch.set_num_threads(threads)  # clemcore's backend pins 1 thread; every runner gets the same number
    policy = LocalPolicy(clem_model.model, clem_model.tokenizer, name="playpen-tiny")
    entry = resolve_game(args.game)
    benchmark = load_benchmark(entry)
    pairs = load_instances(entry, "train", limit=args.episodes)
    rows = [{"game_name": args.game, "experiment": e, "game_instance": i} for e, i in pairs]
    scratch = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    load_before = os.getloadavg()

    def clem(runner: str, batch_size: int, n_rows=rows):
        out = scratch / f"clem-{runner}-{batch_size}-{time.time_ns()}"
        folder = ResultsFolder(out, run_dir="playpen-tiny")
        infos = Model.to_infos([clem_model])
        callbacks = GameBenchmarkCallbackList([
            InstanceFileSaver(folder), ExperimentFileSaver(folder, player_model_infos=infos),
            InteractionsFileSaver(folder, player_model_infos=infos), PlayerFileSaver(folder),
            SignalFileSaver(folder)])
        instances = GameInstances(args.game, n_rows)
        t0, c0 = time.perf_counter(), time.process_time()
        if runner == "sequential":
            sequential.run(benchmark, instances, [clem_model], callbacks=callbacks)
        else:
            batchwise.run(benchmark, instances, [clem_model], callbacks=callbacks, batch_size=batch_size)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return wall, cpu, clem_stats(out)

    def engine(batch_size: int, kv_cache: bool, n_pairs=pairs):
        eng = RolloutEngine(policy, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=batch_size,
                            progress=False, kv_cache=kv_cache)
        t0, c0 = time.perf_counter(), time.process_time()
        episodes = eng.play(entry, n_pairs, records_dir=scratch / f"engine-{batch_size}-{time.time_ns()}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = {e.game_id: (e.num_turns, "aborted" if e.aborted else "success" if e.success else "lose")
                 for e in episodes}
        return wall, cpu, stats

    # warm-up: first forwards, allocator, imports inside the runners
    clem("batchwise", 4, rows[:4])
    engine(4, True, pairs[:4])

    # the sequential runner once; the others in interleaved rounds (machine load drifts), median per runner
    plan = [("clemcore sequential (`clem run`)", "sequential", 1, lambda: clem("sequential", 1))]
    for b in args.batch_sizes:
        plan += [(f"clemcore batchwise (`clem run -b {b}`)", "batchwise", b, lambda b=b: clem("batchwise", b)),
                 ("playpen RolloutEngine", "engine", b, lambda b=b: engine(b, True)),
                 ("playpen RolloutEngine, no KV reuse", "engine-nocache", b, lambda b=b: engine(b, False))]
    samples: dict[int, list] = {k: [] for k in range(len(plan))}
    for round_no in range(args.repeats):
        for k, (label, runner, batch, fn) in enumerate(plan):
            if runner == "sequential" and round_no > 0:
                continue
            wall, cpu, stats = fn()
            samples[k].append((wall, cpu, stats))
            print(f"round {round_no + 1}: {label:38s} b={batch:<3d} {len(rows) / wall:7.2f} eps/s "
                  f"({wall:.1f} s wall, {cpu:.1f} s cpu)", flush=True)
    runs = []  # (label, runner, batch, wall, cpu, stats)
    for k, (label, runner, batch, _) in enumerate(plan):
        walls = [x[0] for x in samples[k]]
        runs.append((label, runner, batch, statistics.median(walls), statistics.median(x[1] for x in samples[k]),
                     samples[k][0][2]))
    load_after = os.getloadavg()

    seq_wall = next(r[3] for r in runs if r[1] == "sequential")
    reference = next(r[5] for r in runs if r[1] == "sequential")
    build = json.loads((Path(spec.huggingface_id) / "playpen_build.json").read_text()) \
        if (Path(spec.huggingface_id) / "playpen_build.json").is_file() else {}
    lines = [
        "# Rollout throughput: playpen RolloutEngine vs clemcore's runners",
        "",
        f"`python bench/bench_rollout.py --episodes {args.episodes} --max-new-tokens {args.max_new_tokens} "
        f"--batch-sizes {' '.join(map(str, args.batch_sizes))} --repeats {args.repeats}` — "
        f"{datetime.now().strftime('%Y-%m-%d %H:%M')}",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{threads} torch thread(s) for every runner (clemcore's huggingface backend sets 1); "
        f"load average before/after: "
        f"{load_before[0]:.1f} / {load_after[0]:.1f} (other jobs share this machine: absolute numbers are noisy, "
        f"the runners were timed back to back in one process)",
        f"- model: playpen-tiny ({build.get('parameters', '?'):,} parameters, build {build.get('build_version', '?')}"
        f", {build.get('recipe', {}).get('steps', '?')} pretraining steps), loaded once through clemcore's "
        f"huggingface_local backend; the engine uses the same model object",
        f"- game: {args.game}, the first {len(rows)} train instances, one episode each; greedy, "
        f"max_new_tokens={args.max_new_tokens}; every runner writes its records",
        "",
        "| runner | batch | eps/s | × sequential | × clemcore batchwise | wall s | CPU s | mean turns | aborted | "
        "same (turns, outcome) as sequential |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, runner, batch, wall, cpu, stats in runs:
        clem_b = next((r[3] for r in runs if r[1] == "batchwise" and r[2] == batch), None)
        vs_batch = f"{clem_b / wall:.2f}×" if clem_b and runner != "sequential" else "—"
        turns = statistics.mean(t for t, _ in stats.values())
        aborted = sum(o == "aborted" for _, o in stats.values()) / len(stats)
        same = sum(stats.get(k) == v for k, v in reference.items())
        lines.append(f"| {label} | {batch} | {len(rows) / wall:.2f} | {seq_wall / wall:.1f}× | {vs_batch} | "
                     f"{wall:.1f} | {cpu:.1f} | {turns:.2f} | {aborted:.0%} | {same}/{len(reference)} |")
    lines += ["", f"eps/s and wall/CPU seconds are medians over {args.repeats} interleaved rounds (the sequential "
              "runner ran once); ratios are ratios of those medians.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
