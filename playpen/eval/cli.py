"""`playpen eval MODEL`: clemscore/statscore of one model on the validation games (light at import).

    playpen eval playpen-tiny                         # all games → playpen-eval/<timestamp>/playpen-tiny.val.json
    playpen eval playpen-tiny -g wordle -r DIR        # replay wordle in DIR, recompute the scores
    playpen eval runs/grpo/RUN_ID -r DIR              # a training run (its registered adapter/model)
    playpen eval playpen-tiny -r DIR --skip-gameplay  # rescore the records in DIR only
    playpen eval runs/grpo/RUN_ID gpt-4o -g taboo     # against a partner, as `clem run -m RUN gpt-4o` (RUN--gpt-4o/)
    playpen eval playpen-tiny -g taboo -e high_en     # one experiment (-e repeatable), as `clem run -e`

clem's underscore spellings of the flags (--results_dir, --skip_gameplay, --instance_set, --batch_size) work too.
"""
from __future__ import annotations

import argparse

from playpen.defaults import BATCH_SIZE, SEED, TEMPERATURE, add_max_new_tokens, check_flags
from playpen.eval.evaluation import PLAYERS, SUITES  # light: no torch

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="registered model name, training run directory, or checkpoint folder")
    parser.add_argument("partner", nargs="?", default=None,
                        help="plays the second seat of two-player games, as `clem run -m MODEL PARTNER` (records "
                             "under MODEL--PARTNER): any model name or folder, mock, or programmatic (the built-in "
                             "game's expert); default: MODEL plays every seat")
    parser.add_argument("-g", "--game", dest="games", action="append", metavar="GAME",
                        help="game to play (repeatable; default: every registered game in the suite)")
    parser.add_argument("-e", "--experiment", dest="experiments", action="append", metavar="NAME",
                        help="play only this experiment of the games (repeatable), as `clem run -e`; --instances "
                             "then counts within the chosen experiments")
    parser.add_argument("-r", "--results-dir", dest="results_dir", default=None,
                        help="results folder to create or reuse (default: playpen-eval/<timestamp>/)")
    parser.add_argument("--skip-gameplay", dest="skip_gameplay", action="store_true",
                        help="only rescore the records in --results-dir")
    parser.add_argument("--suite", choices=SUITES, default="all",
                        help="dialogue games (clemscore), static games (statscore), or both (default)")
    add_max_new_tokens(parser, help="max new tokens per response (default: %(default)s)")
    parser.add_argument("-T", "--temperature", type=float, default=TEMPERATURE,
                        help="sampling temperature (default: %(default)s)")
    parser.add_argument("--instances", type=int, default=None, metavar="N",
                        help="play at most N instances per game, spread over its experiments (default: all)")
    parser.add_argument("--instance-set", dest="instance_set", default="validation",
                        help="validation (default), train, or an instances file of the game")
    parser.add_argument("--player", choices=PLAYERS, default="auto",
                        help="who drives the model: playpen's rollout engine (local HF models; auto's choice), the "
                             "same engine with vLLM generating (vllm: docs/rollouts.md), or clemcore's runner "
                             "(every backend; auto's choice for API models)")
    parser.add_argument("-b", "--batch-size", dest="batch_size", type=int, default=BATCH_SIZE,
                        help="episodes generated together (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=SEED,
                        help="sampling seed of the rollout engine when -T > 0 (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="clemcore's log lines and progress bars on screen too (always in <results>/clembench.log)")


def main(args: argparse.Namespace) -> int:
    from playpen.eval.evaluation import evaluate, format_val

    check_flags(args)
    if args.player == "vllm" and not args.skip_gameplay:  # (before a results folder is made)
        from playpen.models.vllm_engine import require_vllm

        require_vllm("--player vllm")
    val = evaluate(args.model, games=args.games, results_dir=args.results_dir, skip_gameplay=args.skip_gameplay,
                   suite=args.suite, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   instances=args.instances, batch_size=args.batch_size, instance_set=args.instance_set,
                   player=args.player, seed=args.seed, verbose=args.verbose, partner=args.partner,
                   experiments=args.experiments)
    print(format_val(val))
    return 0
