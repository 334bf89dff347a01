"""What `clem run -m MODEL PARTNER -e NAME` adds to a one-model eval: a partner in the other seat, and experiment
selection.

    playpen eval RUN gpt-4o -g taboo              # RUN in seat 0 (describer), gpt-4o in seat 1 → RUN--gpt-4o/
    playpen eval RUN programmatic -g referencegame  # the game's programmatic expert as the partner
    playpen eval RUN -g taboo -e high_en -e low_en

Seats are clemcore's: its GameMaster gives `player_models[0]` to the game's first role and `player_models[1]` to
the second, so the model goes first and the partner second, and the records folder is clemcore's
`Model.to_identifier([model, partner])` ("MODEL--PARTNER"). A partner plays two-player games only (clemcore
refuses two models for a game of one or three players). `programmatic` is clemcore's programmatic player, which
in playpen's built-in games plays the game's expert (playpen.games.common.ExpertPlayer); other games' programmatic
players are mocks, so there it is refused.

A pair of models here, not preference pairs (playpen.reward.preference_pairs, playpen.debate_tools.best_of_n_pairs).
"""
from __future__ import annotations

from playpen.errors import PlaypenError
from playpen.games.registry import GameEntry
from playpen.models import service
from playpen.models.specs import model_folder
from playpen.storage import check_name

PROGRAMMATIC = "programmatic"


def resolve_partner(partner: str | dict | None) -> dict | None:
    """The partner's ModelSpec dict (key.json checked now, one line), or None for self-play."""
    if partner is None:
        return None
    spec = service.resolve(partner, "partner")
    model_folder(spec)  # its name becomes part of a folder name: one line now if it cannot
    return spec


def results_folder(spec: dict, partner: dict | None) -> str:
    """The records folder clemcore names after the players ('MODEL' or 'MODEL--PARTNER'), checked as a name."""
    from clemcore.backends import Model

    names = [model_folder(spec)] + ([model_folder(partner)] if partner else [])
    # to_identifier only joins str(model) of each player, which for a clemcore Model is its name
    return check_name(Model.to_identifier(names), "results folder")


def plays_with(entry: GameEntry, partner: dict | None) -> bool:
    """Whether the game has a seat for the partner (and, for programmatic, an expert to put in it)."""
    return partner is None or (entry.players == 2 and (partner["model_name"] != PROGRAMMATIC or entry.builtin))


def pair_games(entries: list[GameEntry], partner: dict | None, named: bool) -> list[GameEntry]:
    """The games a model pair plays: two-player games (named others are one line; by default they are left out)."""
    if partner is None:
        return entries
    if named:
        odd = [e for e in entries if e.players != 2]
        if odd:
            raise PlaypenError(f"a partner plays the second seat of two-player games (as `clem run -m MODEL PARTNER`)"
                               f"; {', '.join(f'{e.name} has {e.players}' for e in odd)} player(s): drop the "
                               f"partner or those -g")
    pairs = [e for e in entries if e.players == 2]
    if not pairs:
        raise PlaypenError(f"none of the games ({', '.join(e.name for e in entries)}) has two players; a partner "
                           f"plays the second seat of two-player games only")
    if partner["model_name"] == PROGRAMMATIC:
        foreign = [e for e in pairs if not e.builtin]
        if foreign:
            raise PlaypenError(f"partner programmatic plays the built-in games' experts; "
                               f"{', '.join(f'{e.name} (from {e.source})' for e in foreign)} has none: name a model")
    return pairs


def select_experiments(plan: list[tuple], names: list[str] | None) -> list[tuple]:
    """Keep, per (entry, path, pairs) in the plan, the instances of the named experiments, as `clem run -e` does
    (before `--instances` cuts). A name no game has: one line listing each game's experiments. A game without any
    of the names is left out (clem plays nothing of it)."""
    if not names:
        return plan
    have = {entry.name: list(dict.fromkeys(e["name"] for e, _ in pairs)) for entry, _, pairs in plan}
    unknown = [n for n in dict.fromkeys(names) if not any(n in exps for exps in have.values())]
    if unknown:
        listing = "; ".join(f"{game}: {', '.join(exps)}" for game, exps in have.items())
        raise PlaypenError(f"no experiment {', '.join(unknown)} in the chosen games; they have {listing}")
    kept = [(entry, path, [(e, i) for e, i in pairs if e["name"] in names]) for entry, path, pairs in plan]
    return [step for step in kept if step[2]]
