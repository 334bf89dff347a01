"""playpen's built-in games, each a clemcore game folder (clemgame.json, master.py, instancegenerator.py,
in/instances.json = validation, in/instances_train.json = train) that `clem run` can play too.

- `wordle`, `taboo`, `referencegame`: interactive games ("benchmark": ["playpen"]), counted in clemscore;
- `debate`, `consultancy`, `double_consultancy`: reading comprehension argued before a judge who cannot see the
  passage (three, two and three seats; see debate/README.md), counted in clemscore;
- `arithmetic`: a static game ("benchmark": ["static"]), counted in statscore.

Which game a name means (built-ins, or a registered clembench's game of the same name) is playpen.games.registry's
question, and which instances a split means is playpen.games.instances'. This module offers the built-ins'
own helpers: their folders and specs, their benchmark and instances as clemcore objects, programmatic expert players
(`expert_model`, `expert_player`), `play_episode`, and `demonstrations()`, the expert transcripts
the tiny model is built from. clemcore is imported lazily: it takes seconds (gradio via openenv).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clemcore.clemgame import GameBenchmark, GameInstances, GameMaster, Player

from playpen.games.registry import BUILTIN_DIR, BUILTIN_GAMES, is_static  # noqa: F401  (re-exported)

SPLITS = {"validation": "instances", "train": "instances_train"}  # a built-in's split -> its file under in/


def game_path(name: str) -> Path:
    if name not in BUILTIN_GAMES:
        raise ValueError(f"unknown built-in game '{name}'; built-in games: {', '.join(BUILTIN_GAMES)}")
    return BUILTIN_DIR / name


def game_spec(name: str) -> dict:
    """The built-in game's clemgame.json."""
    return json.loads((game_path(name) / "clemgame.json").read_text(encoding="utf-8"))


def _builtin(name: str):
    from playpen.games.registry import BUILTIN_SOURCE, GameEntry

    return GameEntry(name, game_path(name), BUILTIN_SOURCE, game_spec(name))


def load_benchmark(name: str) -> GameBenchmark:
    """The built-in game's GameBenchmark, loaded the way `clem run` loads it (kept open: it is reused)."""
    from playpen.games.instances import load_benchmark as load

    return load(_builtin(name))


def load_instances(name: str, split: str = "validation") -> GameInstances:
    """A built-in game's instances as clemcore's GameInstances (what `clem run` iterates over)."""
    from clemcore.clemgame import GameInstances

    from playpen.games.instances import instances_file

    path = instances_file(_builtin(name), split)
    return GameInstances.from_file(name, str(path.parent), path.stem)


def expert_model(skill: float = 1.0, seed: int = 0):
    """A programmatic model: pass it as a player model of any built-in game and that role is played by the
    game's expert (recorded as model "programmatic", never as a learner). See common.ExpertModel."""
    from playpen.games.common import ExpertModel

    return ExpertModel(skill=skill, seed=seed)


def expert_player(game: str, role: str, *, skill: float = 1.0, seed: int = 0) -> Player:
    """A stand-alone expert for one role (a clemcore Player: `player(context) -> str`, remembering the dialogue).
    Inside a game master prefer `expert_model()` as that role's model: the game then builds the player itself."""
    roles = load_benchmark(game).roles
    if role not in roles:
        raise ValueError(f"{game} has no role '{role}'; its roles: {', '.join(roles)}")
    return roles[role](expert_model(skill, seed), game_role=role)


def play_episode(game: str, row: dict, player_models: list) -> GameMaster:
    """Plays one instance row (`{"experiment", "game_instance"}`, as GameInstances yields) to the end with
    clemcore's sequential step loop, without recording; returns the finished game master."""
    master = load_benchmark(game).create_game_master(row["experiment"], player_models)
    master.setup(**row["game_instance"])
    master.before_game()
    done = False
    while not done:
        player = master.current_player
        done, _ = master.step(player(master.get_context_for(player)))
    return master


# The games playpen-tiny is built from (playpen/models/tiny.py): the built-ins as they were when it was built.
# Games added since (debate, consultancy: long passages, three seats) are left out, so the shipped build stays valid.
DEMONSTRATION_GAMES = ("wordle", "taboo", "referencegame", "arithmetic")


def demonstrations(episodes_per_game: int, seed: int, games: tuple[str, ...] = DEMONSTRATION_GAMES,
                   skill_range: tuple[float, float] = (0.5, 1.0), split: str = "train",
                   roles: tuple[str, ...] | None = None) -> list[list[dict]]:
    """Expert transcripts for building the tiny model: each game's TRAIN instances played by programmatic experts
    through the real game masters, returned as every player's perspective (alternating user/assistant messages,
    the assistant last), both roles of 2-player games. Each episode draws its expert skill from `skill_range`,
    so games are sometimes lost or slow (diverse, partly imperfect play), but never malformed; aborted episodes
    would be dropped. Deterministic in (episodes_per_game, seed). `split` names another instance set, `roles`
    keeps only those roles' perspectives."""
    from clemcore.clemgame.master import Outcome

    conversations = []
    for game in games:
        rows = list(load_instances(game, split))
        rng = random.Random(f"{seed}-{game}")
        order = []
        for episode in range(episodes_per_game):
            if not order:  # every train instance once before any repeats
                order = rng.sample(range(len(rows)), len(rows))
            model = expert_model(skill=rng.uniform(*skill_range), seed=rng.randrange(2 ** 32))
            master = play_episode(game, rows[order.pop()], [model])
            if master.state.outcome is Outcome.ABORTED:
                continue
            for player in master.get_players():
                if roles is not None and player.game_role not in roles:
                    continue
                messages = [{"role": m["role"], "content": m["content"]} for m in player.get_perspective()]
                if messages and messages[-1]["role"] == "assistant":
                    conversations.append(messages)
    return conversations
