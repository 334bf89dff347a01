"""Debate tournaments: every ordered pair of debaters (both seatings) before every judge, on a game's instances,
played by clemcore's runner with one model per seat; then a results table (win rates per debater, overall, as the
correct and the incorrect side, as A and as B; judge accuracy; a Bradley-Terry rating on the Elo scale) and a
heatmap. Consultancy: every consultant before every judge (no pairs, no rating). Double consultancy: as debate,
the consultants in the debaters' places. A debater may be best-of-N (`best_of_n:`, see best_of_n.py in
playpen/games/debate): its matches are played by clemcore's sequential runner, its choices are in the records.

    playpen debate tournament debate/tournament_tiny [key=value ...]   (here)
    python -m playpen.submit tournament --config debate/tournament_tiny   (one job-array task per match)

Output folder: records/ (clem layout, scored: `playpen debate rejudge` and `playpen data` read
it), played/<seating>.json (one per finished match), matches.json (one row per episode), results.md and
heatmap.png. A finished match is not played again when the tournament is rerun (add debaters or judges and rerun:
only the new matches play). Matches write disjoint record folders, so array tasks play them concurrently.
"""
from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from playpen.config import documented
from playpen.debate_tools.recorded_episodes import ADVOCATES, GAMES, Episode, episodes_under, mean
from playpen.defaults import BATCH_SIZE, EVAL_BOUNDS, EVAL_HELP, MAX_NEW_TOKENS, TEMPERATURE
from playpen.errors import PlaypenError
from playpen.storage import (Location, Name, absolute_location, atomic_write_json, atomic_write_text,
                             exclusive_folder, make_folder, path_under, private_folder, read_json_or_none,
                             remove_abandoned, replace_folder, slug_joined, write_figure)

KEYS_HELP = "every key: `playpen submit tournament --help`"  # (the keys of `playpen debate tournament` too)
PROGRAMMATIC = "programmatic"  # the expert advocate in an advocate's seat, the programmatic judge in the judge's


@dataclass
class TournamentConfig:
    name: Name = documented(help="the tournament's name: its folder is <output_dir>/<name>")
    debaters: list[str] = documented(help="registry names or programmatic (consultants too), or names of "
                                          "best_of_n entries", factory=list)
    judges: list[str] = documented(help="registry names or programmatic", factory=list)
    game: str = documented("debate", help="debate, consultancy or double_consultancy")
    best_of_n: dict = documented(help="debater name -> {model, n, chooser, temperature}: a debater that samples n "
                                      "speeches per turn from model (registry name or programmatic) and gives the "
                                      "one chooser prefers: judge (this match's judge reading it in context), "
                                      "programmatic, a callable scorer package.module:function or a reward model",
                                 factory=dict)
    instances: str = documented("validation", help="instance set (validation: every seat is the model given for "
                                                   "it)")
    max_instances: int | None = EVAL_BOUNDS["instances"].field(6, help="per match, spread over experiments")
    self_play: bool = documented(False, help="debate: also each debater against itself")
    max_new_tokens: int = EVAL_BOUNDS["max_new_tokens"].field(MAX_NEW_TOKENS, help=EVAL_HELP["max_new_tokens"])
    temperature: float = EVAL_BOUNDS["temperature"].field(TEMPERATURE, help=EVAL_HELP["temperature"])
    batch_size: int = EVAL_BOUNDS["batch_size"].field(BATCH_SIZE, help=EVAL_HELP["batch_size"])
    use_vllm: bool = documented(False, help="players that are local Hugging Face models generate with vLLM "
                                            "(clemcore's backend otherwise; other backends play as they are)")
    output_dir: Location = documented("runs/tournaments", help="the tournament folder is <output_dir>/<name>")


def check(cfg: TournamentConfig, where: str) -> None:
    if cfg.game not in GAMES:
        raise PlaypenError(f"{where}: game must be one of {', '.join(GAMES)}, got {cfg.game!r}")
    if not cfg.judges:
        raise PlaypenError(f"{where}: no judge: list at least one under judges: (a registry model or programmatic)")
    if not cfg.debaters or (len(ADVOCATES[cfg.game]) == 2 and len(set(cfg.debaters)) < 2 and not cfg.self_play):
        raise PlaypenError(f"{where}: list at least two debaters (or one with self_play: true)")
    from playpen.models import service

    models = {*cfg.debaters, *cfg.judges} - set(cfg.best_of_n)
    for name, entry in cfg.best_of_n.items():
        if name in cfg.judges:
            raise PlaypenError(f"{where}: best_of_n entry {name} is a judge; best-of-n is for debaters")
        models.add(best_of_n_setting(name, entry, where)[0])
    for name in models - {PROGRAMMATIC}:
        spec = service.resolve(name, "tournament player")  # unknown names, missing keys: one line, before any play
        if cfg.use_vllm and spec.get("backend") == "huggingface_local":
            from playpen.models.vllm_engine import require_vllm
            from playpen.models.vllm_player import check_vllm_player

            check_vllm_player(spec, f"{where}: use_vllm")
            require_vllm(f"{where}: use_vllm")


def best_of_n_setting(name: str, entry, where: str):
    """(model name, BestOfN, reward-model ScorerSpec or None) of a best_of_n entry, checked without loading."""
    from playpen.games.debate.best_of_n import JUDGE, PROGRAMMATIC as CHOSEN_BY_RULE, BestOfN, is_callable_name

    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
        raise PlaypenError(f"{where}: best_of_n.{name} needs {{model: <registry name or programmatic>, n: N}} "
                           f"(optional: chooser, temperature)")
    if "seats" in entry:
        raise PlaypenError(f"{where}: best_of_n.{name}: a tournament debater samples in every seat it takes; "
                           f"remove seats")
    chooser = entry.get("chooser", JUDGE)
    model_chooser = isinstance(chooser, str) and chooser not in (JUDGE, CHOSEN_BY_RULE) \
        and not is_callable_name(chooser)
    setting = {k: v for k, v in entry.items() if k != "model"}
    try:
        choice = BestOfN.from_setting({**setting, "chooser": JUDGE} if model_chooser else setting)
    except ValueError as e:
        raise PlaypenError(f"{where}: best_of_n.{name}: {e}") from None
    if not model_chooser:
        return entry["model"], choice, None
    from dataclasses import replace

    from playpen.reward.scorers import resolve_scorer

    return entry["model"], replace(choice, chooser=chooser), resolve_scorer(chooser, what=f"best_of_n.{name}.chooser")


def matches(cfg: TournamentConfig) -> list[tuple[str, ...]]:
    """Seatings in seat order: (A, B, judge) for two-sided games, (consultant, judge) for consultancy."""
    if len(ADVOCATES[cfg.game]) == 1:
        return [(c, j) for j in cfg.judges for c in dict.fromkeys(cfg.debaters)]
    pairs = list(itertools.product(dict.fromkeys(cfg.debaters), repeat=2))
    return [(a, b, j) for j in cfg.judges for a, b in pairs if a != b or cfg.self_play]


def _model(name: str, cache: dict, cfg: TournamentConfig):
    if name not in cache and name in cfg.best_of_n:
        from playpen.games.debate.best_of_n import BestOfNModel

        model_name, choice, scorer_spec = best_of_n_setting(name, cfg.best_of_n[name], "tournament")
        scorer = None
        if scorer_spec is not None:
            from playpen.reward.scorers import load_scorer

            scorer = load_scorer(scorer_spec)
        cache[name] = BestOfNModel(_model(model_name, cache, cfg), choice, name=name, scorer=scorer)
    if name not in cache:
        if name == PROGRAMMATIC:
            from playpen.games import expert_model

            cache[name] = expert_model()
        else:
            from playpen.models import service

            spec = service.resolve(name, "tournament player")
            if cfg.use_vllm and spec.get("backend") == "huggingface_local":
                from playpen.models.vllm_player import load_vllm_player

                cache[name] = load_vllm_player(spec, cfg.max_new_tokens, cfg.temperature)
            else:
                cache[name] = service.load_player(spec, cfg.max_new_tokens, cfg.temperature)
    return cache[name]


def tournament_dir(cfg: TournamentConfig) -> Path:
    return path_under(absolute_location(cfg.output_dir, "output_dir"), cfg.name, what="tournament folder")


def _instances(cfg: TournamentConfig):
    from playpen.eval.evaluation import in_file_order
    from playpen.games.instances import instances_file, read_instances
    from playpen.games.registry import resolve_game

    entry = resolve_game(cfg.game)
    return entry, in_file_order(read_instances(instances_file(entry, cfg.instances)), cfg.max_instances)


def _played_marker(cfg: TournamentConfig, seating: tuple[str, ...]) -> Path:
    name = slug_joined(seating, "__")
    return tournament_dir(cfg) / "played" / f"{name}.json"


def pending_matches(cfg: TournamentConfig) -> list[tuple[str, ...]]:
    """The seatings not yet played over these instances (cheap: no model is loaded)."""
    _, pairs = _instances(cfg)
    pending = []
    for seating in matches(cfg):
        done = read_json_or_none(_played_marker(cfg, seating))
        done = done if isinstance(done, dict) else {}
        if done.get("episodes") != len(pairs) or done.get("instances") != cfg.instances:
            pending.append(seating)
    return pending


def play_match(cfg: TournamentConfig, seating: tuple[str, ...], cache: dict) -> Path:
    """Plays one seating over the instances into records/ and marks it played; returns its records folder."""
    from clemcore.backends import Model

    from playpen.eval.evaluation import STAGING_DIR, carry_run_file, clemcore_play, publish_run_file, score_game

    entry, pairs = _instances(cfg)
    folder = tournament_dir(cfg)
    records = make_folder(folder / "records", "tournament folder", root=folder)
    marker = _played_marker(cfg, seating)
    make_folder(marker.parent, "tournament folder", root=folder)
    # one process per match: two would write the same episode folders (array tasks share the tournament folder)
    with exclusive_folder(marker.parent, f"match {' vs '.join(seating)} of tournament {cfg.name} is being played "
                          f"by another process", "wait for it to end", lock_file=f".{marker.stem}.lock"):
        models = [_model(name, cache, cfg) for name in seating]
        seated = Model.to_identifier(models)
        match = Path(seated) / entry.name
        # what a killed match left: the other matches' folders are held while they play, so they stay
        remove_abandoned(records, (f"{STAGING_DIR}.",))
        # clemcore writes its records by name: into a private folder, which then replaces the match's records
        with private_folder(records, f"{STAGING_DIR}.") as staging:
            carry_run_file(records, staging, seated)
            failed = clemcore_play(entry, pairs, models, staging, cfg.batch_size)
            if failed:  # some episodes raised: the others are recorded
                print(f"[tournament] {' vs '.join(seating)}: {failed}", file=sys.stderr)
            make_folder(staging / match, "records folder", root=staging)
            score_game(entry, staging / match)
            replace_folder(staging / match, records / match, records)
            publish_run_file(staging, records, seated)
        atomic_write_json(marker, {"seating": seating, "episodes": len(pairs), "instances": cfg.instances,
                                   "records": str(records / match)}, root=folder)
    return records / match


# ---------------------------------------------------------------- results

def match_rows(episodes: list[Episode], game: str) -> list[dict]:
    rows = []
    for e in episodes:
        names = [e.seats.get(role) for role in ADVOCATES[game]]
        row = {"judge": e.seats.get("Judge"), "advocates": names, "experiment": e.experiment,
               "game_id": e.game_id, "correct": e.correct, "player_1_side": e.player_1_side,
               "aborted": e.aborted, "verdict": None if e.aborted else e.verdict["side"],
               "probability": None if e.aborted else e.verdict["probability"],
               "quote_precision": {k: e.scores.get(k) for k in e.scores if k.startswith("Quote Precision")}}
        rows.append(row)
    return rows


def bradley_terry(games: list[tuple[str, str]], players: list[str], iterations: int = 200) -> dict[str, float]:
    """Ratings on the Elo scale (1000 = the geometric mean) from (winner, loser) games; every player also gets one
    virtual win and loss against a 1000-rated anchor, so a player who never (or always) won stays finite."""
    strength = {p: 1.0 for p in players}
    for _ in range(iterations):
        new = {}
        for p in players:
            wins = sum(w == p for w, _ in games) + 1
            denominator = 2 / (strength[p] + 1) + sum(1 / (strength[w] + strength[loser])
                                                     for w, loser in games if p in (w, loser))
            new[p] = wins / denominator
        scale = math.exp(sum(math.log(v) for v in new.values()) / len(new))
        strength = {p: v / scale for p, v in new.items()}
    return {p: round(1000 + 400 * math.log10(v), 1) for p, v in strength.items()}


def summarize(rows: list[dict], game: str) -> dict:
    """Per advocate: episodes, win rate (overall, as correct / incorrect side, as A / B), quote precision; per
    judge: accuracy and % without verdict; debate: ratings and the head-to-head matrix."""
    advocates = sorted({n for r in rows for n in r["advocates"]})
    two_sided = len(ADVOCATES[game]) == 2
    positions = "AB" if two_sided else [None]

    def side(row: dict, seat: str | None) -> str:  # the answer an advocate argued (consultant: its side)
        return seat or row["player_1_side"]

    def won(row: dict, seat: str | None) -> float:
        return float(row["verdict"] == side(row, seat))

    per = {}
    for name in advocates:
        seats = [(r, seat) for r in rows if not r["aborted"] for seat, n in zip(positions, r["advocates"]) if n == name]
        per[name] = {"episodes": len(seats), "win_rate": mean(won(r, s) for r, s in seats),
                     "win_rate_correct_side": mean(won(r, s) for r, s in seats if side(r, s) == r["correct"]),
                     "win_rate_incorrect_side": mean(won(r, s) for r, s in seats if side(r, s) != r["correct"])}
        if two_sided:
            per[name]["win_rate_as_A"] = mean(won(r, s) for r, s in seats if s == "A")
            per[name]["win_rate_as_B"] = mean(won(r, s) for r, s in seats if s == "B")
    judges = {j: {"episodes": sum(r["judge"] == j for r in rows),
                  "accuracy": mean(float(r["verdict"] == r["correct"]) for r in rows
                                   if r["judge"] == j and not r["aborted"]),
                  "no_verdict_pct": 100 * mean(float(r["aborted"]) for r in rows if r["judge"] == j)}
              for j in sorted({r["judge"] for r in rows})}
    out = {"advocates": per, "judges": judges}
    if two_sided:
        games = [(r["advocates"][0], r["advocates"][1]) if r["verdict"] == "A" else (r["advocates"][1],
                                                                                       r["advocates"][0])
                 for r in rows if not r["aborted"] and r["advocates"][0] != r["advocates"][1]]
        for name, rating in bradley_terry(games, advocates).items():
            per[name]["rating"] = rating
        out["head_to_head"] = {a: {b: mean(float(w == a) for w, loser in games if {w, loser} == {a, b})
                                   for b in advocates if b != a} for a in advocates}
    return out


def _fmt(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}" if isinstance(x, float) \
        else str(x)


def results_markdown(name: str, summary: dict) -> str:
    per = summary["advocates"]
    keys = [k for k in next(iter(per.values()), {}) if k != "episodes"]
    lines = [f"# Tournament {name}", "", "| advocate | episodes | " + " | ".join(keys) + " |",
             "|---" * (len(keys) + 2) + "|"]
    lines += [f"| {a} | {v['episodes']} | " + " | ".join(_fmt(v[k]) for k in keys) + " |"
              for a, v in sorted(per.items(), key=lambda kv: -kv[1].get("rating", kv[1]["win_rate"] or 0))]
    lines += ["", "| judge | episodes | accuracy | % no verdict |", "|---|---|---|---|"]
    lines += [f"| {j} | {v['episodes']} | {_fmt(v['accuracy'])} | {_fmt(v['no_verdict_pct'])} |"
              for j, v in summary["judges"].items()]
    return "\n".join(lines) + "\n"


def heatmap(summary: dict, rows: list[dict], out: Path) -> Path:
    """Two-sided games: row advocate's win rate against the column's; consultancy: consultant x judge win rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "head_to_head" in summary:
        names = sorted(summary["head_to_head"])
        cols, title = names, "win rate of row vs column (all judges)"
        grid = [[summary["head_to_head"][a].get(b, float("nan")) for b in cols] for a in names]
    else:
        names, cols = sorted(summary["advocates"]), sorted(summary["judges"])
        title = "consultant win rate per judge"
        grid = [[mean(float(r["verdict"] == r["player_1_side"]) for r in rows
                      if r["advocates"][0] == a and r["judge"] == j and not r["aborted"]) for j in cols]
                for a in names]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(cols), 1.2 + 0.7 * len(names)))
    ax.imshow([[0.5 if math.isnan(v) else v for v in row] for row in grid], vmin=0, vmax=1, cmap="RdYlGn")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, "-" if math.isnan(v) else f"{v:.2f}", ha="center", va="center")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    write_figure(out, fig, dpi=100)
    plt.close(fig)
    return out


def aggregate(cfg: TournamentConfig) -> dict:
    """matches.json, results.md and heatmap.png from every recorded episode; returns the summary."""
    folder = tournament_dir(cfg)
    rows = match_rows(episodes_under(folder / "records"), cfg.game)
    if not rows:
        raise PlaypenError(f"tournament {cfg.name}: no recorded episode under {folder / 'records'}")
    summary = summarize(rows, cfg.game)
    atomic_write_json(folder / "matches.json", rows)
    atomic_write_text(folder / "results.md", results_markdown(cfg.name, summary))
    heatmap(summary, rows, folder / "heatmap.png")
    return {"dir": str(folder), **summary}


def run(cfg: TournamentConfig, where: str = "tournament", log=print) -> dict:
    """Plays the missing matches here, one after the other, then aggregates."""
    check(cfg, where)
    cache: dict = {}
    for seating in pending_matches(cfg):
        log(f"[tournament] {cfg.name}: {' vs '.join(seating[:-1])} before {seating[-1]}")
        play_match(cfg, seating, cache)
    return aggregate(cfg)


def add_arguments(parser) -> None:
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*", help="key=value")


def main(args) -> int:
    from playpen.config import find_config, load_config

    config = find_config(args.config)  # a file, or a shipped config's name (debate/tournament_tiny)
    cfg = load_config(TournamentConfig, config, list(args.overrides), keys_help=KEYS_HELP)
    result = run(cfg, str(config))
    print(results_markdown(cfg.name, result))
    return 0


if __name__ == "__main__":  # python -m playpen.debate_tools.tournament: an alias of `playpen debate tournament`
    from playpen.cli import main as playpen_main

    sys.exit(playpen_main(["debate", "tournament", *sys.argv[1:]]))
