"""`playpen` command line: parse, then call one function. Heavy imports (torch, trl) happen inside commands.

    playpen list models [-v] | games [-v]
    playpen train {sft,dpo,grpo,rloo,reward,rft,distill} --config NAME_OR_PATH [key=value ...]   (-h: every key)
    playpen run my_trainer.py -l LEARNER [-p PARTNER] [-L MAX_NEW_TOKENS] [-T TEMPERATURE]
    playpen eval MODEL [PARTNER] [-g GAME ...] [-r RESULTS_DIR] [--skip-gameplay] [--instance-set SET]
    playpen data RESULTS_DIR -o dataset.jsonl [--game G] [--outcome success] [--model M] | --expert GAME
    playpen meter MODEL --classifier C --prompts FILE [-n K] [-T T] [--label L] [--compare OTHER]
    playpen screen MODEL -g GAME -o FILE [--split train] [-k 8] [-T 0.7] [-p programmatic --partner-seats 0]
    playpen submit {sft,...,eval,meter,sweep,tournament,doctor} [--config ...] [--nodes N] [--dry-run] [--wait]
    playpen submit status|logs RUN_OR_SWEEP_DIR                         (= python -m playpen.submit ...)
    playpen demo [--config ...]
    playpen debate {tournament,curve,rejudge,transcripts,pairs} ...    (= python -m playpen.debate_tools.TOOL)
    playpen models build-tiny|convert-smol [--out DIR] [--force]   (= python -m playpen.models.tiny|smol)
    playpen configs list | copy NAME [DEST]                         (the shipped configs, by name)
    playpen containers render|check                                 (= python -m playpen.containers)
    playpen doctor [--storage-root DIR] [--skip FEATURE] [--json]   (as a job: playpen submit doctor --nodes N)

Flags are spelled with dashes; clem's underscore spellings (--results_dir, --skip_gameplay, --instance_set,
--batch_size) are read as the same flags. The old routes (MOVED, DEPRECATED) still work, with a note.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import textwrap

from playpen.config import deprecated
from playpen.config_help import help_width
from playpen.errors import OneLineParser, ends_quietly_on_closed_pipe, guarded

# command → module that provides add_arguments(parser) and main(args) -> int; imported only when needed
COMMANDS = {
    "train": ("playpen.train.cli", "train a model with one method (sft, dpo, grpo, rloo, reward, rft, distill) "
                                   "from a YAML config"),
    "run": ("playpen.train.base", "run a user-written trainer class (playpen run FILE -l LEARNER)"),
    "eval": ("playpen.eval.cli", "play and score the validation games: clemscore and statscore"),
    "data": ("playpen.dataset_from_records", "turn interactions.json files, or a game's expert play, into a "
                                             "conversational dataset (jsonl)"),
    "submit": ("playpen.submit.cli", "send a train, eval, meter, sweep or tournament job to SLURM or local "
                                     "processes; status and logs of a job (= python -m playpen.submit)"),
    "demo": ("playpen.demo", "evaluate the demo run: untrained vs trained on held-out instances"),
    "meter": ("playpen.reward.meter", "score a model's sampled completions with a classifier or scorer"),
    "debate": ("playpen.debate_tools.cli", "debate tools: tournament, curve, rejudge, transcripts, pairs"),
    "sweep-local": ("playpen.eval.sweep", "run a sweep's pending cells here, one after the other (no SLURM; "
                                          "= python -m playpen.eval.sweep)"),
    "screen": ("playpen.eval.screening", "each instance's pass rate under a model; write those strictly between "
                                         "0 and 1 as an instances file (GRPO's split:)"),
    "models": ("playpen.models.cli", "build the bundled models: build-tiny, convert-smol"),
    "configs": ("playpen.configs_cli", "the shipped configs: list them, copy one to edit (--config takes a "
                                       "file or a shipped name, e.g. grpo/demo)"),
    "containers": ("playpen.containers", "render the Apptainer defs from the lock file, or check they match it"),
    "doctor": ("playpen.doctor.cli", "will a job run here? software, devices, features tried for real, storage "
                                     "(as a job: playpen submit doctor --nodes N)"),
}
LIST_HELP = "list registered models or games"
# `playpen --help` lists the commands by what they are for; a command not named here is listed under tools
GROUPS = {"learn": ("train", "run", "data", "screen"), "evaluate": ("eval", "meter", "debate", "demo"),
          "cluster": ("submit", "doctor", "containers"), "tools": ("list", "models", "configs")}
# old routes → the one route of the same action: they still work, with one deprecation note, and are not listed
MOVED = {"build-tiny": "models build-tiny", "status": "submit status", "logs": "submit logs", "sweep": "submit sweep"}
# old commands of their own, until they go: `sweep-local` runs a sweep's cells in this process
DEPRECATED = {"sweep-local": "submit sweep --executor local --wait (and submit status SWEEP_DIR)"}


def list_models(verbose: bool) -> None:
    from playpen.model_registry import model_entries, resolution

    entries = model_entries(clemcore=True)  # every model `clem list models` lists, and mock
    first: dict[str, str] = {}  # name -> the source whose entry wins
    for entry in entries:
        state = f"  (shadowed by the {first[entry.name]} entry)" if entry.name in first else ""
        first.setdefault(entry.name, entry.source)
        where = resolution(entry, entries) if verbose else ""
        print(f"{entry.name:32s} {entry.spec.get('backend', '?'):18s} {entry.source}{state}")
        if verbose:
            print(f"{'':32s} {where}")
            print(f"{'':32s} model_config={json.dumps(entry.spec.get('model_config', {}))}")


def _table(rows: list[list[str]]) -> str:
    """Columns as wide as their longest cell, so long game names keep the table aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def list_games(verbose: bool, selector: str | None = None) -> None:
    """Every game a name reaches (the first of a name wins, as in clem); -v adds the games that lose their name to
    another and are not reachable at all, each game's folder and validation instances file."""
    from playpen.games.instances import validation_file_name
    from playpen.games.registry import all_games, game_entries, select_games, shadowed

    found = all_games()
    lost = shadowed(found)
    shown = game_entries(found=found)
    if verbose:
        shown += [e for e in found if (e.path, e.name) in lost and not e.builtin]
    chosen = {e.name for e in select_games([selector])} if selector else None
    rows = [["game", "players", "kind", "source"] + (["folder", "validation instances"] if verbose else [])]
    for entry in shown:
        if chosen is not None and entry.name not in chosen:
            continue
        source = entry.source
        winner = lost.get((entry.path, entry.spec["game_name"]))
        if winner is not None:
            reach = f"reachable as {entry.name}" if entry.name != entry.spec["game_name"] else "unreachable"
            source += f" (shadowed by {winner.path}; {reach})"
        row = [entry.name, str(entry.players), "static" if entry.static else "dialogue", source]
        if verbose:
            row += [str(entry.path), validation_file_name(entry) + ".json"]
        rows.append(row)
    print(_table(rows))


def main(argv: list[str] | None = None) -> int:
    """The one entry point: `playpen`, `python -m playpen.submit`, `python -m playpen.demo` all come here."""
    return ends_quietly_on_closed_pipe(_main, sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    if argv and argv[0] in MOVED:
        deprecated(f"playpen {argv[0]}", f"playpen {MOVED[argv[0]]}")
        argv = [*MOVED[argv[0]].split(), *argv[1:]]
    elif argv and argv[0] in DEPRECATED:
        deprecated(f"playpen {argv[0]}", f"playpen {DEPRECATED[argv[0]]}")
    parser = build_parser_for(argv)
    try:  # usage mistakes end here with OneLineParser's line (and -h with its help), as an exit code
        args, extra = parser.parse_known_args(argv)
        # argparse stops filling `overrides` at the first option: `train grpo --config X k=v` leaves k=v over
        if extra and (not hasattr(args, "overrides") or any(a.startswith("-") for a in extra)):
            flags = [a for a in extra if a.startswith("-")] if hasattr(args, "overrides") else extra
            command_parser(parser, args).refuse_unrecognized(flags)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if extra:
        args.overrides = [*args.overrides, *extra]
    return guarded(dispatch, args)


def command_parser(parser: OneLineParser, args: argparse.Namespace) -> OneLineParser:
    """The parser of the (sub)command that was given (`playpen submit sft`'s): its flags, its prog, its -h."""
    while True:
        commands = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = commands.choices.get(getattr(args, commands.dest, None)) if commands else None
        if not isinstance(chosen, OneLineParser):
            return parser
        parser = chosen


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "list":
        if args.what == "models":
            list_models(args.verbose)
        else:
            list_games(args.verbose, args.selector)
        return 0
    module = importlib.import_module(COMMANDS[args.command][0])
    return (module.run(args) if args.command == "submit" else module.main(args)) or 0


def build_parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """Only the chosen command's module is imported to add its arguments (keeps `playpen list` instant)."""
    parser = OneLineParser(prog="playpen", usage="playpen [-h] COMMAND ...", description=commands_help(),
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog=textwrap.fill("`playpen COMMAND -h` shows a command's flags; `playpen train METHOD "
                                                "-h` and `playpen submit KIND -h` list every config key.",
                                                help_width(), break_on_hyphens=False))
    # (the commands are listed by group in the description instead of argparse's one list)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS,
                                     prog="playpen")
    listing = commands.add_parser("list", help=LIST_HELP)
    listing.add_argument("what", choices=["models", "games"])
    listing.add_argument("-v", "--verbose", action="store_true")
    listing.add_argument("-s", "--selector", default=None,
                         help="games only: a name or clem's selector, e.g. \"{'benchmark':['2.0']}\"")
    chosen = argv[0] if argv else None
    for name, (module, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, **({} if name in DEPRECATED else {"help": help_text}))
        if name == chosen:
            importlib.import_module(module).add_arguments(sub)
    return parser


def commands_help() -> str:
    """The commands by what they are for (learn, evaluate, cluster, tools), one line of help each."""
    helps = {"list": LIST_HELP, **{name: help_text for name, (_, help_text) in COMMANDS.items()
                                    if name not in DEPRECATED}}
    grouped = {group: [name for name in names if name in helps] for group, names in GROUPS.items()}
    grouped["tools"] += [name for name in helps if not any(name in names for names in GROUPS.values())]
    width, column = help_width(), max(map(len, helps)) + 4
    lines = ["Train and evaluate chat LLMs in interaction."]
    for group, names in grouped.items():
        lines += ["", f"{group}:"]
        for name in names:
            lines += textwrap.wrap(helps[name], width, initial_indent=f"  {name}".ljust(column),
                                   subsequent_indent=" " * column, break_on_hyphens=False)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
