"""`playpen meter`: how a model's generations score under a classifier (RewardLM's ToxicityMeter, any scorer).

    playpen meter MODEL --classifier C --prompts FILE [-n K] [-T T] [--label L] [--compare OTHER] [-o DIR]

K completions per prompt are sampled in batches (left-padded, `--batch-size` prompts at a time, seeded, so two
models see the same random stream), each scored by C: a sequence classifier (registry name, run folder or local
folder; `--label` picks one label of a multi-label head) or a callable scorer (`vader`, `module:function`).
Written to DIR (default playpen-meter/<timestamp>/), per model:
    <model>.completions.csv   prompt index, sample, prompt, completion, score
    <model>.summary.json      n, mean, std, standard error (over completions, and over prompt means), share
                              above the threshold (--threshold, else the scorer's own: 0.5 for a label's
                              probability, 0 for a reward logit, 0.05 for vader)
    <model>.labelled.jsonl    {prompt, text, label=score}: labelled texts for `playpen train reward` (data:)
and histogram.png (both models with --compare, plus comparison.json: the difference of means in standard errors).
Every input is checked before anything loads or is written.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import time
from pathlib import Path

from playpen.config import Bounds, check_keys, renamed
from playpen.config_help import KeyDoc, value_text
from playpen.defaults import EVAL_BOUNDS, add_max_new_tokens
from playpen.errors import PlaypenError
from playpen.storage import check_location, exclusive_folder, make_folder, not_a_link, slug, timestamp, write_figure


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="registry name or local Hugging Face folder of the generator")
    parser.add_argument("--classifier", required=True,
                        help="sequence classifier (registry name, run folder, local folder) or callable scorer "
                             "(vader, package.module:function)")
    parser.add_argument("--prompts", required=True, help='jsonl, one {"prompt": "..." or [messages]} per line')
    parser.add_argument("-n", "--samples", type=int, default=4, help="completions per prompt (default 4)")
    parser.add_argument("--label", default=None, help="the classifier label to score (multi-label heads)")
    parser.add_argument("--compare", default=None, metavar="OTHER", help="meter a second model the same way")
    parser.add_argument("-o", "--output", type=Path, default=None, help="folder (default playpen-meter/<time>)")
    parser.add_argument("--threshold", type=float, default=None, help="report the share of scores above this")
    add_max_new_tokens(parser, default=32)
    parser.add_argument("-T", "--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("-b", "--batch-size", type=int, default=16, help="prompts generated together (x samples)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")


def check_settings(args: argparse.Namespace):
    """Everything but the models: ranges, the prompts file and the scorer. Returns (prompts, scorer spec)."""
    from playpen.reward.prompts import read_prompts
    from playpen.reward.scorers import resolve_scorer

    for flag, value, bounds in (("-n", args.samples, Bounds(ge=1, le=10_000)),
                                ("--max-new-tokens", args.max_new_tokens, EVAL_BOUNDS["max_new_tokens"]),
                                ("--batch-size", args.batch_size, EVAL_BOUNDS["batch_size"]),
                                ("--temperature", args.temperature, EVAL_BOUNDS["temperature"]),
                                ("--seed", args.seed, EVAL_BOUNDS["seed"]), ("--limit", args.limit, Bounds(ge=1)),
                                ("--threshold", args.threshold, Bounds())):
        bounds.check(value, flag)
    if args.output is not None:  # (the folder reaches a job's script and is written into)
        not_a_link(Path(check_location(str(args.output), "--output")), "--output")
    if args.output is not None and args.output.exists() and not args.output.is_dir():
        raise PlaypenError(f"--output {args.output} is a file; give a folder")
    return read_prompts(args.prompts, "--prompts", "prompts", args.limit), resolve_scorer(args.classifier, args.label)


def check_inputs(args: argparse.Namespace):
    from playpen.models.service import resolve_local

    prompts, scorer = check_settings(args)
    models = [args.model] + ([args.compare] if args.compare else [])
    specs = [resolve_local(name, role=None) for name in models]
    for name, spec in zip(models, specs):
        if spec.get("method") == "reward":
            raise PlaypenError(f"{name} is a reward model (a classifier), not a generator; meter it with "
                               f"--classifier {name}")
    return prompts, list(zip(models, specs)), scorer


def _quiet() -> None:
    import logging
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def generate(spec: dict, prompts: list[list[dict]], samples: int, max_new_tokens: int, temperature: float,
             batch_size: int, seed: int) -> list[tuple[int, int, str]]:
    """(prompt index, sample index, completion) for every prompt x sample, sampled in batches."""
    import torch

    from playpen.models.service import load_frozen

    model, tokenizer = load_frozen(spec)
    tokenizer.padding_side = "left"
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    torch.manual_seed(seed)
    out = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        batch = tokenizer.apply_chat_template(chunk, add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True, padding=True).to(model.device)
        with torch.inference_mode():
            ids = model.generate(**batch, max_new_tokens=max_new_tokens, num_return_sequences=samples,
                                 pad_token_id=tokenizer.pad_token_id, **sampling)
        texts = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        out += [(start + i // samples, i % samples, text.strip()) for i, text in enumerate(texts)]
    del model
    return out


def summarize(scores: list[float], prompt_of: list[int], threshold: float) -> dict:
    """Mean, spread and standard errors: over completions (as if independent) and over per-prompt means (the
    completions of one prompt are correlated, so this one is the honest error when K > 1)."""
    n = len(scores)
    mean = sum(scores) / n
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else 0.0
    by_prompt: dict[int, list[float]] = {}
    for p, s in zip(prompt_of, scores):
        by_prompt.setdefault(p, []).append(s)
    means = [sum(v) / len(v) for v in by_prompt.values()]
    m = len(means)
    prompt_std = math.sqrt(sum((x - mean) ** 2 for x in means) / (m - 1)) if m > 1 else 0.0
    return {"n": n, "prompts": m, "mean": mean, "std": std, "stderr": std / math.sqrt(n),
            "stderr_by_prompt": prompt_std / math.sqrt(m), "threshold": threshold,
            "share_above": sum(s > threshold for s in scores) / n, "min": min(scores), "max": max(scores)}


def _write_model(folder: Path, name: str, prompts, rows, scores, summary) -> None:
    from playpen.storage import atomic_write_json, atomic_write_text

    stem = slug(name)
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(["prompt_index", "sample", "prompt", "completion", "score"])
    for (p, k, text), score in zip(rows, scores):
        writer.writerow([p, k, prompts[p][-1]["content"], text, f"{score:.6g}"])
    atomic_write_text(folder / f"{stem}.completions.csv", table.getvalue())
    atomic_write_json(folder / f"{stem}.summary.json", summary)
    atomic_write_text(folder / f"{stem}.labelled.jsonl", "".join(
        json.dumps({"prompt": prompts[p], "text": text, "label": score}, ensure_ascii=False) + "\n"
        for (p, _, text), score in zip(rows, scores)))


def compare(first: dict, second: dict) -> dict:
    """second - first in standard errors (both kinds), e.g. trained vs base."""
    diff = second["mean"] - first["mean"]
    out = {"difference": diff}
    for key in ("stderr", "stderr_by_prompt"):
        se = math.sqrt(first[key] ** 2 + second[key] ** 2)
        out[f"{key}_of_difference"] = se
        out[f"z_{key}"] = diff / se if se > 0 else float("inf") if diff else 0.0
    return out


def plot_histogram(results: list[tuple[str, list[float], dict]], out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    low = min(min(s) for _, s, _ in results)
    high = max(max(s) for _, s, _ in results)
    bins = [low + (high - low) * i / 30 for i in range(31)] if high > low else 10
    for (name, scores, summary), color in zip(results, ("tab:blue", "tab:orange")):
        ax.hist(scores, bins=bins, alpha=0.55, color=color,
                label=f"{name}: mean {summary['mean']:.3f} ± {summary['stderr']:.3f} (n={summary['n']})")
        ax.axvline(summary["mean"], color=color, linestyle="--")
    ax.set_xlabel("score")
    ax.set_ylabel("completions")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_figure(out, fig, dpi=100)
    plt.close(fig)
    return out


def meter(args: argparse.Namespace) -> Path:
    prompts, models, scorer_spec = check_inputs(args)  # nothing loaded or written before this passed
    folder = not_a_link(args.output or Path("playpen-meter") / timestamp(), "--output")
    # one meter per folder at a time, as for eval's -r: two would overwrite each other's CSVs and summaries
    with exclusive_folder(folder, f"meter folder {folder} is in use by another playpen meter",
                          "wait for it to end, or pick another -o"):
        meter_specs(args, prompts, models, scorer_spec, folder)
    return folder


def meter_specs(args: argparse.Namespace, prompts: list, models: list[tuple[str, dict]], scorer_spec,
                folder: Path) -> list[dict]:
    """Generates, scores and writes every (name, model spec) into folder (a sweep cell passes a checkpoint's
    spec here); returns each model's summary."""
    _quiet()
    from playpen.reward.scorers import load_scorer
    from playpen.storage import atomic_write_json

    make_folder(folder, "meter folder")
    scorer = load_scorer(scorer_spec)
    threshold = scorer_spec.threshold if args.threshold is None else args.threshold
    results = []
    for name, spec in models:
        started = time.perf_counter()
        rows = generate(spec, prompts, args.samples, args.max_new_tokens, args.temperature, args.batch_size,
                        args.seed)
        generated = time.perf_counter() - started
        scores = scorer([text for _, _, text in rows], [prompts[p] for p, _, _ in rows])
        summary = {"model": name, "classifier": scorer_spec.description, "label": scorer_spec.label,
                   "prompts_file": str(args.prompts), "samples_per_prompt": args.samples,
                   "temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                   **summarize(scores, [p for p, _, _ in rows], threshold),
                   "generation_seconds": round(generated, 2),
                   "scoring_seconds": round(time.perf_counter() - started - generated, 2)}
        _write_model(folder, name, prompts, rows, scores, summary)
        results.append((name, scores, summary))
        print(f"[playpen] {name}: mean {summary['mean']:.4f} ± {summary['stderr']:.4f} (s.e.; by prompt "
              f"± {summary['stderr_by_prompt']:.4f}), {100 * summary['share_above']:.1f} % above {threshold:g}, "
              f"n={summary['n']} ({generated:.1f} s generating)", flush=True)
    if len(results) == 2:
        comparison = {"first": models[0][0], "second": models[1][0], **compare(results[0][2], results[1][2])}
        atomic_write_json(folder / "comparison.json", comparison)
        print(f"[playpen] {models[1][0]} - {models[0][0]}: {comparison['difference']:+.4f} = "
              f"{comparison['z_stderr']:+.1f} s.e. ({comparison['z_stderr_by_prompt']:+.1f} by prompt)", flush=True)
    plot_histogram(results, folder / "histogram.png", f"{scorer_spec.description} on {Path(args.prompts).name}")
    print(f"[playpen] meter results in {folder}")
    return [summary for _, _, summary in results]


def _flags_parser(where: str) -> argparse.ArgumentParser:
    """`playpen meter`'s own parser, its mistakes raised as one line naming `where`."""
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise PlaypenError(f"{where}: {message}")

    parser = Parser(prog="playpen meter", add_help=False)
    add_arguments(parser)
    return parser


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Key → the flag it sets (not an old spelling's hidden flag)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS}


def parse_config(config: dict, where: str) -> argparse.Namespace:
    """`playpen meter`'s arguments from a YAML mapping whose keys are its flags' names (model, classifier, prompts,
    samples, max_new_tokens, ...): the job's settings are the command's own, checked by the same parser."""
    parser = _flags_parser(where)
    flags = {key: action.option_strings[-1] for key, action in _flags(parser).items()}
    config = renamed(config, flags, where)
    if not config.get("model"):
        raise PlaypenError(f"{where}: missing required key model (the generator to meter)")
    check_keys({k: v for k, v in config.items() if v is not None}, ["model", *flags], where,
               "every key: `playpen submit meter --help`")
    argv = [str(config["model"])]
    for key, value in config.items():
        if key != "model" and value is not None:
            argv += [flags[key], str(value)]
    return parser.parse_args(argv)


def key_docs() -> list[KeyDoc]:
    """The keys of a meter job's YAML (`playpen submit meter`, a sweep's meters:): the command's flags by name."""
    docs = [KeyDoc("model", "str", None, help="registry name or local Hugging Face folder of the generator")]
    for key, action in _flags(_flags_parser("meter")).items():
        kind = "bool" if action.nargs == 0 else "path" if action.type is Path else getattr(action.type, "__name__",
                                                                                           "str")
        default = str(action.default) if isinstance(action.default, Path) else action.default
        help_text = (action.help or "").replace("%(default)s", str(default))
        for said in (f" (default {default})", f" (default: {default})"):  # the entry shows it already
            help_text = help_text.replace(said, "")
        docs.append(KeyDoc(key, kind if default is not None or action.required else f"{kind} | null",
                           None if action.required else value_text(default), help=help_text))
    return docs + [KeyDoc("storage_root", "location | null", "null",
                          help="the output's root: default the cluster profile's, else $PLAYPEN_STORAGE or ./runs")]


def main(args: argparse.Namespace) -> int:
    meter(args)
    return 0
