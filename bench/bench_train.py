"""Trainer overheads → bench/results/train.md.

    python bench/bench_train.py [--steps 8] [--game wordle] [--hidden 1536 --layers 16]

1. GRPO step time outside generation and the optimizer step (target ≤ 5 %). A real `playpen train grpo` run on
   playpen-tiny (LoRA, self-play) with timers around: token generation (the engine's batched sampling),
   training compute (TRL's policy forward+loss, backward, the optimizer step as the Trainer takes it: gradient
   clipping, AdamW, LR schedule, zeroing the gradients; the old/reference log-prob forwards the loss needs).
   Everything else in a step is overhead: game-master logic, chat templates and tokenization, scoring, records,
   rewards, padding, TRL and playpen bookkeeping, metrics and checkpoints. The first step (warm-up) is left out.
2. Peak RSS of QLoRA-4bit vs full fine-tuning of the same model (target ≤ 0.4×): a Llama built locally with
   playpen-tiny's tokenizer and a bigger config (no hub here), 2 SFT steps each, each in a fresh process;
   peak RSS = VmHWM of that process (imports included, as a user sees it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "train.md"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="GRPO steps (the first is warm-up)")
    p.add_argument("--game", default="wordle")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--batch", type=int, default=32, help="episodes per step")
    p.add_argument("--repeats", type=int, default=3, help="GRPO runs; the report shows the median one")
    p.add_argument("--hidden", type=int, default=1536, help="hidden size of the RSS model")
    p.add_argument("--layers", type=int, default=16, help="layers of the RSS model")
    p.add_argument("--part", choices=["all", "grpo", "rss", "_rss_child"], default="all")
    p.add_argument("--child-args", nargs="*", default=[])
    return p.parse_args()


# ---------------------------------------------------------------- 1. GRPO step breakdown

class Timers:
    """Wall time per part; only the outermost timed call counts (compute_loss calls the log-prob forward, which
    is timed on its own where TRL calls it outside compute_loss), so no second is counted twice."""

    def __init__(self):
        self.totals: dict[str, float] = {}
        self.depth = 0
        self.patched: list[tuple[object, str, object]] = []

    def restore(self) -> None:
        for owner, name, original in reversed(self.patched):
            setattr(owner, name, original)
        self.patched.clear()

    def wrap(self, owner, name: str, key: str):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            self.depth += 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.totals[key] = self.totals.get(key, 0.0) + time.perf_counter() - started

        self.patched.append((owner, name, original))
        setattr(owner, name, timed)
        return original


def bench_grpo(args, storage: Path) -> dict:
    import torch
    import transformers
    import trl
    from transformers import TrainerCallback

    import playpen.rollout.engine as engine
    from playpen.train import grpo
    from playpen.train import train

    timers = Timers()
    timers.wrap(engine, "generate", "generation")
    cls = trl.GRPOTrainer
    timers.wrap(cls, "compute_loss", "train_compute")
    timers.wrap(cls, "_get_per_token_logps_and_entropies", "train_compute")
    # the optimizer step as the Trainer takes it: clip gradients, AdamW, LR schedule, zero the gradients
    timers.wrap(torch.optim.AdamW, "step", "train_compute")
    timers.wrap(transformers.Trainer, "_clip_grad_norm", "train_compute")
    timers.wrap(torch.optim.lr_scheduler.LRScheduler, "step", "train_compute")
    timers.wrap(torch.nn.Module, "zero_grad", "train_compute")
    import accelerate

    timers.wrap(accelerate.Accelerator, "backward", "train_compute")
    steps: list[dict] = []

    class StepClock(TrainerCallback):
        """A step runs from one on_step_begin to the next (or the end of training), so the logging and checkpoint
        saving that the Trainer does after on_step_end count in the step that caused them."""
        mark: tuple[float, dict] | None = None

        def lap(self):
            now, totals = time.perf_counter(), dict(timers.totals)
            if self.mark:
                started, before = self.mark
                part = {k: totals.get(k, 0.0) - before.get(k, 0.0) for k in ("generation", "train_compute")}
                steps.append({"total": now - started, **part})
            self.mark = (now, totals)

        def on_step_begin(self, a, state, control, **kw):
            self.lap()

        def on_train_end(self, a, state, control, **kw):
            self.lap()

    original_fit = grpo.GRPO.fit

    def fit(self, session):  # add the clock to the trainer the recipe builds
        original_init = trl.GRPOTrainer.__init__

        def init(trainer, *a, **kw):
            kw["callbacks"] = [*kw.get("callbacks", []), StepClock()]
            original_init(trainer, *a, **kw)

        trl.GRPOTrainer.__init__ = init
        try:
            return original_fit(self, session)
        finally:
            trl.GRPOTrainer.__init__ = original_init

    timers.patched.append((grpo.GRPO, "fit", original_fit))
    grpo.GRPO.fit = fit
    started = time.perf_counter()
    try:
        train("grpo", None, [f"storage_root={storage}", "experiment=bench", f"game={args.game}",
                             f"group_size={args.group_size}", "max_new_tokens=12", "instances=64",
                             f"trainer.per_device_train_batch_size={args.batch}", f"trainer.max_steps={args.steps}",
                             f"trainer.save_steps={args.steps}", "trainer.learning_rate=1e-3"])
    finally:
        timers.restore()
    wall = time.perf_counter() - started
    measured = steps[1:] or steps
    total = sum(s["total"] for s in measured)
    gen = sum(s["generation"] for s in measured)
    compute = sum(s["train_compute"] for s in measured)
    other = total - gen - compute
    return {"steps": len(measured), "total": total, "generation": gen, "train_compute": compute, "other": other,
            "fraction_other": other / total, "per_step": measured, "wall": wall}


# ---------------------------------------------------------------- 2. QLoRA vs full peak RSS

def build_big_model(folder: Path, hidden: int, layers: int) -> int:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(REPO / "playpen" / "models" / "playpen-tiny")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=int(hidden * 2.75) // 64 * 64,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128,
                         max_position_embeddings=1024, tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(folder)  # as checkpoints on the hub are; both modes load this file
    tok.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def peak_rss_kb() -> int:
    """VmHWM: the peak RSS of this process image. Not ru_maxrss, which Linux carries over fork+exec, so a child
    would start at the parent's RSS (the parent just built the model: +2 GB on both modes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_child(model: str, data: str, storage: str, mode: str) -> None:
    import bitsandbytes  # noqa: F401  (imported by QLoRA anyway: in both baselines)
    import peft  # noqa: F401
    import trl  # noqa: F401

    from playpen.train import train

    imports_kb = peak_rss_kb()

    extra = ["quantization=4bit", "lora={}"] if mode == "qlora" else ["lora=null"]
    train("sft", None, [f"storage_root={storage}", f"experiment=rss-{mode}", f"model={model}", f"data={data}",
                        "trainer.max_steps=2", "trainer.per_device_train_batch_size=2", "trainer.save_steps=100",
                        "register=false", *extra])
    peak_kb = peak_rss_kb()
    print(json.dumps({"mode": mode, "peak_rss_mb": peak_kb / 1024, "imports_rss_mb": imports_kb / 1024}))


def bench_rss(args, tmp: Path) -> dict:
    folder = tmp / "bench-llama"
    params = build_big_model(folder, args.hidden, args.layers)
    data = tmp / "sft.jsonl"
    with data.open("w") as f:
        for i in range(8):
            f.write(json.dumps({"messages": [{"role": "user", "content": "Reply only with: GUESS: <word>"},
                                             {"role": "assistant", "content": "GUESS: crane"}]}) + "\n")
    out = {"parameters": params}
    for mode in ("full", "qlora"):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--part", "_rss_child", "--child-args", str(folder),
                               str(data), str(tmp / f"runs-{mode}"), mode], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        line = [row for row in proc.stdout.splitlines() if row.startswith("{")][-1]
        out[mode] = json.loads(line)["peak_rss_mb"]
        out[f"{mode}_imports"] = json.loads(line)["imports_rss_mb"]
        out[f"{mode}_seconds"] = time.perf_counter() - started
    out["ratio"] = out["qlora"] / out["full"]
    out["ratio_above_imports"] = (out["qlora"] - out["qlora_imports"]) / (out["full"] - out["full_imports"])
    return out


# ---------------------------------------------------------------- report

def report(grpo_result: dict | None, rss: dict | None, args) -> str:
    lines = [f"# Trainer benchmark ({datetime.now():%Y-%m-%d %H:%M})", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; `python bench/bench_train.py` "
             f"(load average at start: {os.getloadavg()[0]:.1f} — other jobs on a shared machine inflate times).", ""]
    if grpo_result:
        g = grpo_result
        ok = "meets" if g["fraction_other"] <= 0.05 else "MISSES"
        lines += ["## GRPO step time outside generation and the optimizer step", "",
                  f"`playpen train grpo`, playpen-tiny + LoRA, {args.game} self-play, {args.batch} episodes per "
                  f"step (groups of {args.group_size}), {g['steps']} measured steps (first step = warm-up, left out); "
                  f"the median of {len(g['fractions'])} runs (their shares outside: "
                  f"{', '.join(f'{100 * f:.1f} %' for f in g['fractions'])}).",
                  "", "| part | seconds | share |", "|---|---:|---:|"]
        for key, label in (("generation", "token generation (engine sampling)"),
                           ("train_compute", "training compute (policy fwd+loss, backward, optimizer step, old/ref logps)"),
                           ("other", "everything else (game logic, scoring, records, rewards, bookkeeping)")):
            lines.append(f"| {label} | {g[key]:.2f} | {100 * g[key] / g['total']:.1f} % |")
        lines += [f"| step total | {g['total']:.2f} | 100 % |", "",
                  f"**Outside generation and optimizer step: {100 * g['fraction_other']:.1f} % — {ok} the ≤ 5 % "
                  f"target.** Per step: " + ", ".join(f"{s['total']:.1f} s" for s in g["per_step"]), ""]
    if rss:
        ok = "meets" if rss["ratio"] <= 0.4 else "MISSES"
        lines += ["## Peak RSS: QLoRA-4bit vs full fine-tuning", "",
                  f"SFT, 2 steps, batch 2, on a {rss['parameters'] / 1e6:.0f}M-parameter Llama (hidden "
                  f"{args.hidden}, {args.layers} layers, tiny tokenizer) built locally and saved in bf16 as hub "
                  "checkpoints are; trained in fp32 on CPU.", "",
                  "| mode | peak RSS (MB) | of it, after imports (MB) | wall (s) |", "|---|---:|---:|---:|",
                  f"| full fine-tuning (AdamW) | {rss['full']:.0f} | {rss['full_imports']:.0f} | "
                  f"{rss['full_seconds']:.0f} |",
                  f"| QLoRA 4-bit nf4 + LoRA r=16 | {rss['qlora']:.0f} | {rss['qlora_imports']:.0f} | "
                  f"{rss['qlora_seconds']:.0f} |", "",
                  f"**QLoRA / full peak RSS = {rss['ratio']:.2f}× — {ok} the ≤ 0.4× target** (above the "
                  f"imports' RSS: {rss['ratio_above_imports']:.2f}×).", ""]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    if args.part == "_rss_child":
        rss_child(*args.child_args)
        return
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        grpo_result = None
        if args.part in ("all", "grpo"):
            runs = sorted((bench_grpo(args, tmp / f"runs-{k}") for k in range(args.repeats)),
                          key=lambda r: r["fraction_other"])
            grpo_result = {**runs[len(runs) // 2], "fractions": [r["fraction_other"] for r in runs]}
        rss = bench_rss(args, tmp) if args.part in ("all", "rss") else None
    text = report(grpo_result, rss, args)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
