"""The GPU proof (`bench/gpu_check.sh` installs the carried wheels, then runs this): on one GPU node with a stock CUDA
PyTorch environment, within ~8 minutes,

1. `playpen doctor` (every check in the report);
2. playpen-tiny GRPO (grpo/demo) for 20 steps in bf16 and SFT-LoRA for 20 steps, each killed (SIGKILL)
   right after its step-10 checkpoint and rerun with the same command: the rerun must resume from checkpoint-10,
   every loss must be finite, the metrics cover steps 1-20 and the run folder be complete;
3. the rollout engine against a plain `model.generate` loop and a raw cached decode loop on the same first-turn
   prompts (wordle), with a randomly initialised ~1B Llama built from a config (no weights: tokens/s and the
   ratios are what count), batch 1/16/64; and the same episodes with vLLM generating (use_vllm's colocated
   engine; target ≥ 5× the engine at batch 64), and GRPO's shape: 64 sampled episodes as groups of 8 and 16;
4. bench/results/gpu-<device>.md: the device, versions, every figure and every failure.

Each phase that fails is written down and the next one runs. `--dry-run` runs the same phases on the CPU, small
(doctor without its features, 2 training steps killed after the first, a 2-layer random Llama at batch 1/2), into
--results (tests/test_gpu_check.py runs it in the suite, so the script cannot rot).

    python bench/gpu_check.py [--dry-run] [--work DIR] [--results bench/results] [--install-log FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSIONS = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "clemcore", "submitit", "deepspeed",
            "bitsandbytes", "playpen")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the CPU part, small (what the test suite runs)")
    p.add_argument("--work", default=None, help="scratch folder for runs (default: a fresh folder under /tmp)")
    p.add_argument("--results", default=str(REPO / "bench" / "results"), help="where the report goes")
    p.add_argument("--install-log", default=None, help="gpu_check.sh's record of what it installed")
    p.add_argument("--timeout", type=float, default=240, help="seconds one training command may take")
    return p.parse_args(argv)


# ---------------------------------------------------------------- environment

def versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {}
    for name in VERSIONS:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "not installed"
    return found


def device() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"type": "cpu", "name": platform.processor() or platform.machine(), "slug": "cpu"}
    p = torch.cuda.get_device_properties(0)
    return {"type": "cuda", "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
            "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda,
            "slug": re.sub(r"[^a-z0-9]+", "-", p.name.lower()).strip("-")}


def playpen(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", "playpen.cli", *args], cwd=REPO, env=env, text=True, **kwargs)


# ---------------------------------------------------------------- 1. doctor

def doctor(work: Path, dry: bool) -> dict:
    """`playpen doctor`'s checks, in this process (the dry run without the features: tests/test_doctor.py runs them)."""
    from playpen.doctor import local_checks
    from playpen.doctor.report import as_json

    start = time.perf_counter()
    checks = local_checks(str(work / "doctor"), ("bf16", "4bit", "deepspeed", "rollout", "vllm") if dry else ())
    return json.loads(as_json(checks, seconds=round(time.perf_counter() - start, 1)))


# ---------------------------------------------------------------- 2. training, killed and resumed

def sft_data(work: Path) -> Path:
    path = work / "sft.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"What is {i} + {i % 7}? Reply with ANSWER: <number>"},
                          {"role": "assistant", "content": f"ANSWER: {i + i % 7}"}]} for i in range(64)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train_killed_and_resumed(method: str, overrides: list[str], work: Path, steps: int, kill_at: int | None,
                             timeout: float) -> dict:
    """Train `steps` steps with a checkpoint every `kill_at`; SIGKILL the process once checkpoint-<kill_at> is on
    disk; run the same command again; check the resume, the losses and the run folder (kill_at None: one run)."""
    experiment = f"gpu-check-{method}"
    root = work / "runs"
    args = ["train", method, *overrides, f"experiment={experiment}", "run_id=gpu-check", f"storage_root={root}",
            f"trainer.max_steps={steps}", f"trainer.save_steps={kill_at or steps}", "trainer.save_total_limit=3"]
    run_dir = root / experiment / "gpu-check"
    log = work / f"{method}.log"
    start = time.perf_counter()
    if kill_at is None:  # (the dry run's SFT) in this process, where the libraries are imported already
        from playpen.train import train

        config = overrides[overrides.index("--config") + 1]
        rest = [a for a in args[2:] if a not in ("--config", config)]
        train(method, config, rest)
        return check_run(run_dir, steps, None, start, 0.0)
    with log.open("w") as out:
        first = playpen(*args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        marker = run_dir / "checkpoints" / f"checkpoint-{kill_at}" / "trainer_state.json"
        deadline = time.monotonic() + timeout
        while first.poll() is None and not marker.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        killed = first.poll() is None
        if killed:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        if not marker.is_file():
            raise RuntimeError(f"no checkpoint-{kill_at} within {timeout:.0f} s (exit {first.returncode}); "
                               f"see {log}")
        killed_s = time.perf_counter() - start
        out.write(f"\n==== killed at checkpoint-{kill_at} ({killed}); the same command again ====\n")
        out.flush()
        second = playpen(*args, stdout=out, stderr=subprocess.STDOUT)
        code = second.wait(timeout=timeout)
    text = log.read_text()
    if code != 0:
        raise RuntimeError(f"the rerun exited {code}: {text.strip().splitlines()[-1][:300]} (log {log})")
    tail = text.split("==== killed", 1)[1]
    if killed and not re.search(rf"resum\w* .*checkpoint-{kill_at}", tail):
        raise RuntimeError(f"the rerun did not say it resumed from checkpoint-{kill_at} (log {log})")
    return check_run(run_dir, steps, kill_at if killed else None, start, killed_s)


def check_run(run_dir: Path, steps: int, killed_at: int | None, start: float, killed_s: float) -> dict:
    """Every loss finite, one per step 1..steps, and the run folder complete."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = {r["step"]: r["loss"] for r in rows if "loss" in r}
    bad = {s: v for s, v in losses.items() if not math.isfinite(v)}
    if bad or sorted(losses) != list(range(1, steps + 1)):
        raise RuntimeError(f"metrics.jsonl: loss steps {sorted(losses)} (expected 1-{steps}), non-finite {bad}")
    wanted = ["config.yaml", "metrics.jsonl", "model_registry.json", "learning_curve.png",
              f"checkpoints/checkpoint-{steps}/trainer_state.json"]
    missing = [w for w in wanted if not (run_dir / w).exists()]
    if missing:
        raise RuntimeError(f"run folder {run_dir} lacks {', '.join(missing)}")
    figures = [r for r in rows if "reward" in r]
    return {"steps": steps, "killed_at": killed_at, "seconds": round(time.perf_counter() - start, 1),
            "seconds_to_kill": round(killed_s, 1), "loss_first": losses[1], "loss_last": losses[steps],
            "reward_first": figures[0]["reward"] if figures else None,
            "reward_last": figures[-1]["reward"] if figures else None, "run_dir": str(run_dir)}


def training(work: Path, dry: bool, timeout: float) -> dict:
    steps, kill_at = (2, 1) if dry else (20, 10)
    small = ["trainer.per_device_train_batch_size=8", "max_new_tokens=8", "validation_instances=0"] if dry else \
        ["validation_instances=0"]
    bf16 = [] if dry else ["trainer.bf16=true"]
    runs = {"grpo": ["--config", "grpo/demo", *small, *bf16],
            "sft": ["--config", "sft/tiny_lora", f"data={sft_data(work)}",
                    "trainer.per_device_train_batch_size=8", "trainer.warmup_steps=1", *bf16]}

    results = {}
    for method, overrides in runs.items():
        kill = None if dry and method == "sft" else kill_at  # the dry run kills one of them (process starts cost)
        try:
            results[method] = train_killed_and_resumed(method, overrides, work, steps, kill, timeout)
        except Exception as e:  # noqa: BLE001  (written into the report; the next phase runs)
            results[method] = {"error": f"{type(e).__name__}: {e}"}
    return results


# ---------------------------------------------------------------- 3. rollout engine vs generate vs raw loop

def random_llama(vocab: int, dry: bool, dev):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # (head size 32 in the dry run: vLLM's CPU attention has no kernel for 16)
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1) if dry else \
        dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
             num_key_value_heads=4)  # TinyLlama's shape: ~1B parameters with a 32k vocabulary
    config = LlamaConfig(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=False, **size)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    with torch.device(dev):
        model = LlamaForCausalLM(config).to(dtype).eval()
    return model


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def generate_loop(model, prompts: list[list[int]], pad: int, new: int, dev) -> float:
    """model.generate on the left-padded batch, greedy, exactly `new` tokens each; seconds."""
    import torch

    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=dev)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)
    _sync(dev)
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       pad_token_id=pad)
    _sync(dev)
    return time.perf_counter() - start


def raw_loop(model, prompts: list[list[int]], pad: int, new: int, dev) -> float:
    """One prefill of the left-padded batch, then `new - 1` greedy steps on a DynamicCache; seconds."""
    import torch
    from transformers import DynamicCache

    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=dev)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)
    _sync(dev)
    start = time.perf_counter()
    with torch.no_grad():
        cache = DynamicCache()
        logits = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True,
                       logits_to_keep=1).logits
        for _ in range(new - 1):
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
            feed = logits[:, -1].argmax(-1, keepdim=True)
            logits = model(input_ids=feed, attention_mask=mask, past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
    _sync(dev)
    return time.perf_counter() - start


def rollout_bench(dry: bool) -> dict:
    import torch

    from playpen.games.instances import load_instances
    from playpen.models.loading import load_tokenizer
    from playpen.models.tiny import ensure_tiny_model
    from playpen.rollout import LocalPolicy, RolloutEngine

    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    tokenizer = load_tokenizer(str(ensure_tiny_model(log=lambda m: None)))
    model = random_llama(len(tokenizer), dry, dev)
    params = sum(p.numel() for p in model.parameters())
    policy = LocalPolicy(model, tokenizer, name="random-llama")
    new = 8 if dry else 64
    rows = []
    with_vllm, vllm_note = vllm_policy(model, tokenizer, dev)
    for batch in (1, 2) if dry else (1, 16, 64):
        instances = load_instances("wordle", "train", limit=batch)
        engine = RolloutEngine(policy, max_new_tokens=new, temperature=0.0, batch_size=batch, progress=False)
        engine.play("wordle", instances[:1])  # warm-up: kernels, allocator
        _sync(dev)
        start = time.perf_counter()
        episodes = engine.play("wordle", instances)
        _sync(dev)
        engine_s = time.perf_counter() - start
        first_turn = [e.traces[0] for e in episodes]
        sampled = sum(sum(e.env_mask) for e in episodes)
        prompts = [list(t.prompt_ids) for t in first_turn]
        per_prompt = max(1, round(sampled / len(prompts)))  # the same number of new tokens per prompt
        generate_loop(model, prompts[:1], tokenizer.pad_token_id, 2, dev)  # warm-up
        gen_s = generate_loop(model, prompts, tokenizer.pad_token_id, per_prompt, dev)
        raw_s = raw_loop(model, prompts, tokenizer.pad_token_id, per_prompt, dev)
        base = per_prompt * len(prompts)
        rows.append({"batch": batch, "episodes": len(episodes), "engine_tokens": sampled,
                     "engine_tok_s": round(sampled / engine_s, 1), "generate_tok_s": round(base / gen_s, 1),
                     "raw_tok_s": round(base / raw_s, 1),
                     "engine_vs_generate": round((sampled / engine_s) / (base / gen_s), 2),
                     "engine_vs_raw": round((sampled / engine_s) / (base / raw_s), 2),
                     "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1)})
        if with_vllm is not None:  # the same episodes with vLLM generating (rows: tokens/s, and x the engine)
            try:
                engine = RolloutEngine(with_vllm, max_new_tokens=new, temperature=0.0, batch_size=batch,
                                       progress=False)
                engine.play("wordle", instances[:1])
                _sync(dev)
                start = time.perf_counter()
                played = engine.play("wordle", instances)
                _sync(dev)
            except Exception as e:  # noqa: BLE001  (written down; the engine's rows stand)
                with_vllm, vllm_note = None, f"FAILED: {type(e).__name__}: {str(e)[:200]}"
                continue
            vllm_tokens = sum(sum(e.env_mask) for e in played)
            rows[-1].update(vllm_tok_s=round(vllm_tokens / (time.perf_counter() - start), 1))
            rows[-1]["vllm_vs_engine"] = round(rows[-1]["vllm_tok_s"] / rows[-1]["engine_tok_s"], 2)
    groups = []  # GRPO's shape: 64 episodes as groups of 8 and 16 sampled episodes per instance (T=1)
    for group in (2,) if dry else (8, 16):
        instances = load_instances("wordle", "train", limit=max(1, (4 if dry else 64) // group))
        row = {"group": group, "episodes": len(instances) * group}
        for key, player in (("engine", policy), ("vllm", with_vllm)):
            if player is None:
                continue
            engine = RolloutEngine(player, max_new_tokens=new, temperature=1.0, batch_size=64, progress=False, seed=0)
            _sync(dev)
            start = time.perf_counter()
            engine.play("wordle", instances, group_size=group)
            _sync(dev)
            row[f"{key}_eps_s"] = round(row["episodes"] / (time.perf_counter() - start), 2)
        if "vllm_eps_s" in row:
            row["vllm_vs_engine"] = round(row["vllm_eps_s"] / row["engine_eps_s"], 2)
        groups.append(row)
    return {"parameters": params, "device": str(dev), "dtype": str(next(model.parameters()).dtype),
            "max_new_tokens": new, "rows": rows, "groups": groups, "vllm": vllm_note}


def vllm_policy(model, tokenizer, dev):
    """The random Llama saved and loaded into a colocated vLLM engine (as use_vllm starts one), as a policy whose
    waves vLLM generates; (None, why) when vLLM is not installed or does not start."""
    import tempfile

    from playpen.errors import PlaypenError
    from playpen.models.vllm_engine import vllm_version
    from playpen.rollout import LocalPolicy
    from playpen.rollout.vllm_backend import generator_for

    if vllm_version() is None:
        return None, "vLLM is not installed: no vLLM rows"
    folder = tempfile.mkdtemp(prefix="gpu-check-llama-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.name_or_path = folder  # (what the engine loads; the weights are these very ones)
    policy = LocalPolicy(model, tokenizer, name="random-llama-vllm")
    try:
        policy.vllm = generator_for(model, tokenizer, 0, memory_fraction=0.5 if dev.type == "cuda" else 0.3)
    except PlaypenError as e:
        return None, f"vLLM did not start: {e}"
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return policy, f"vLLM {vllm_version()} colocated, {dtype}"


# ---------------------------------------------------------------- 4. the report

def report(dev: dict, found: dict, phases: dict, install_log: str | None, dry: bool, wall: float) -> str:
    lines = [f"# GPU check: {dev['name']}" + (" (dry run on CPU)" if dry else ""), "",
             f"`bash bench/gpu_check.sh{' --dry-run' if dry else ''}`, {time.strftime('%Y-%m-%d %H:%M')}, "
             f"{wall:.0f} s in all. Device: {json.dumps({k: v for k, v in dev.items() if k != 'slug'})}.", "",
             "## Versions", "", "| package | version |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in found.items()]
    if install_log:
        lines += ["", "Installed from the carried wheels:", "", "```", install_log.strip()[-3000:], "```"]
    failures = []
    doc = phases.get("doctor", {})
    lines += ["", "## playpen doctor", ""]
    if "error" in doc:
        failures.append(f"doctor: {doc['error']}")
        lines.append(f"FAILED: {doc['error']}")
    else:
        lines += [f"overall {doc.get('overall')} in {doc.get('seconds')} s", "", "| section | check | status | detail |",
                  "|---|---|---|---|"]
        for c in doc.get("checks", []):
            lines.append(f"| {c['section']} | {c['name']} | {c['status']} | {c['detail']}"
                         + (f" → {c['advice']}" if c["status"] != "OK" and c["advice"] else "") + " |")
            if c["status"] == "FAILED":
                failures.append(f"doctor {c['name']}: {c['detail']}")
    lines += ["", "## Training playpen-tiny (killed after the middle checkpoint, resumed)", "",
              "| method | steps | killed at | loss first → last | reward first → last | seconds |", "|---|---|---|---|---|---|"]
    for method, r in phases.get("training", {}).items():
        if "error" in r:
            failures.append(f"{method}: {r['error']}")
            lines.append(f"| {method} | FAILED: {r['error']} | | | | |")
            continue
        reward = f"{r['reward_first']:.3f} → {r['reward_last']:.3f}" if r["reward_first"] is not None else "-"
        lines.append(f"| {method} | {r['steps']} | {r['killed_at']} | {r['loss_first']:.4f} → {r['loss_last']:.4f} "
                     f"| {reward} | {r['seconds']} |")
    bench = phases.get("rollout", {})
    lines += ["", "## Rollout engine vs model.generate vs a raw cached loop (random Llama, wordle first turns)", ""]
    if str(bench.get("vllm", "")).startswith("FAILED"):
        failures.append(f"rollout with vLLM: {bench['vllm']}")
    if "error" in bench:
        failures.append(f"rollout: {bench['error']}")
        lines.append(f"FAILED: {bench['error']}")
    else:
        lines += [f"{bench['parameters'] / 1e9:.2f}B parameters, {bench['dtype']} on {bench['device']}, up to "
                  f"{bench['max_new_tokens']} new tokens per reply, greedy.", "",
                  f"vLLM rows: {bench.get('vllm')} (target: ≥ 5× the engine at batch 64 on a ~1B model).", "",
                  "| batch | engine tok/s | generate tok/s | raw loop tok/s | engine × generate | engine × raw | "
                  "vLLM engine tok/s | vLLM × engine |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['batch']} | {r['engine_tok_s']} | {r['generate_tok_s']} | {r['raw_tok_s']} | "
                  f"{r['engine_vs_generate']} | {r['engine_vs_raw']} | {r.get('vllm_tok_s', '-')} | "
                  f"{r.get('vllm_vs_engine', '-')} |" for r in bench["rows"]]
        lines += ["", "Groups (batch 64, sampled at T=1: the runners play different episodes):", "",
                  "| group | episodes | engine eps/s | vLLM eps/s | vLLM × engine |", "|---|---|---|---|---|"]
        lines += [f"| {r['group']} | {r['episodes']} | {r['engine_eps_s']} | {r.get('vllm_eps_s', '-')} | "
                  f"{r.get('vllm_vs_engine', '-')} |" for r in bench.get("groups", [])]
    lines += ["", "## Failures", ""] + ([f"- {f}" for f in failures] or ["none"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    work = Path(args.work or f"/tmp/playpen-gpu-check-{os.getpid()}").absolute()
    work.mkdir(parents=True, exist_ok=True)
    dev, found = device(), versions()
    print(f"gpu_check: {dev['name']} ({dev['type']}), work folder {work}", flush=True)
    phases: dict = {}
    for name, fn in (("doctor", lambda: doctor(work, args.dry_run)),
                     ("training", lambda: training(work, args.dry_run, args.timeout)),
                     ("rollout", lambda: rollout_bench(args.dry_run))):
        t0 = time.perf_counter()
        try:
            phases[name] = fn()
        except Exception as e:  # noqa: BLE001  (the report names it; the next phase runs)
            traceback.print_exc()
            phases[name] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
        print(f"gpu_check: {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    install_log = Path(args.install_log).read_text() if args.install_log and Path(args.install_log).is_file() else None
    text = report(dev, found, phases, install_log, args.dry_run, time.perf_counter() - start)
    out = Path(args.results) / f"gpu-{'dry-run' if args.dry_run else dev['slug']}.md"
    from playpen.storage import write_output

    write_output(out, text, "report")
    write_output(out.with_suffix(".json"), json.dumps({"device": dev, "versions": found, **phases}, indent=1,
                                                      default=str), "report")
    print(text)
    print(f"gpu_check: report {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
