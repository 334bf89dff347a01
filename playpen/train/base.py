"""`playpen run FILE -l LEARNER [-t TEACHER]`: user-written trainers, as in upstream playpen.

    from playpen.train.base import BasePlaypenTrainer

    class MyTrainer(BasePlaypenTrainer):
        def learn(self):
            ...  # self.learner / self.partner are clemcore Models (huggingface_local ones expose .model, .tokenizer)

`playpen run my_trainer.py -l playpen-tiny [-p PARTNER] -L 64` loads the models from the registry (a remote partner
needs its key.json entry: checked before anything loads), takes the first BasePlaypenTrainer subclass defined in
the file and calls `learn()`. Upstream playpen's trainer files run unchanged: `from playpen import BasePlayPen`,
a constructor taking the learner alone, and `learn(self, game_registry)`, which gets clemcore's GameRegistry of
the games a name reaches here (./game_registry.json and the working directory first, then the built-ins).

This module is the `playpen run` command too (`add_arguments`, `main`): light at import, models load in `main`.
Not here: `playpen train`'s methods (playpen.train.runner and the recipes).
"""
from __future__ import annotations

import abc
import argparse
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from playpen.config import read_text
from playpen.defaults import MAX_NEW_TOKENS, TEMPERATURE, OldSpelling, add_max_new_tokens, check_flags
from playpen.errors import PlaypenError


def with_get_name(model: Any) -> Any:
    """`model.get_name()` as clemcore 2's Model answered it (clemcore 3 has the `name` property): upstream trainer
    files call it. The model itself is returned, with the method added where it lacks one."""
    if model is not None and not hasattr(model, "get_name") and hasattr(model, "name"):
        try:
            model.get_name = lambda: model.name
        except AttributeError:  # (a model with __slots__ or a read-only attribute keeps what it has)
            pass
    return model


class BasePlaypenTrainer(abc.ABC):
    """Constructor (learner, teacher=None); subclasses implement learn(). The second model is the partner who plays
    the other roles: `self.partner`, also `self.teacher` as upstream playpen names it."""

    def __init__(self, learner: Any, teacher: Any = None):
        self.learner = with_get_name(learner)
        self.partner = self.teacher = with_get_name(teacher)

    def is_learner(self, player) -> bool:
        return getattr(player, "model", None) is self.learner

    def is_teacher(self, player) -> bool:
        return self.teacher is not None and getattr(player, "model", None) is self.teacher

    @abc.abstractmethod
    def learn(self) -> None:
        """Train self.learner (playing with self.teacher if given)."""


BasePlayPen = BasePlaypenTrainer  # upstream's older name


def find_trainer_class(file: str | Path) -> type[BasePlaypenTrainer]:
    """The first BasePlaypenTrainer subclass defined in `file` (in the order the file defines them)."""
    path = Path(file)
    read_text(path, "trainer file")  # there, a file, readable text: else one line, before anything runs
    name = f"playpen_user_trainer_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # errors in the user's file surface with their own traceback
    for value in vars(module).values():
        if (inspect.isclass(value) and issubclass(value, BasePlaypenTrainer) and value is not BasePlaypenTrainer
                and value.__module__ == name and not inspect.isabstract(value)):
            return value
    raise PlaypenError(f"{file} defines no subclass of BasePlaypenTrainer with a learn() method "
                       f"(from playpen.train.base import BasePlaypenTrainer)")


def game_registry():
    """clemcore's GameRegistry of the games a name reaches here (the same precedence as `playpen list games`), for
    upstream-style learn(game_registry)."""
    from clemcore.clemgame import GameRegistry

    from playpen.games.registry import game_entries

    return GameRegistry([entry.clem_spec() for entry in game_entries()])


def run_trainer(file: str | Path, learner: str, partner: str | None = None, max_tokens: int = MAX_NEW_TOKENS,
                temperature: float = 0.0) -> BasePlaypenTrainer:
    from playpen.models import service

    cls = find_trainer_class(file)
    learner_spec = service.resolve(learner, "learner")  # both checked (keys too) before loading either
    teacher_spec = service.resolve(partner, "partner") if partner else None
    learner_model = with_get_name(service.load_player(learner_spec, max_tokens, temperature))
    teacher_model = with_get_name(service.load_player(teacher_spec, max_tokens, temperature)) \
        if teacher_spec else None
    # upstream trainers take (learner) alone when there is no teacher, as upstream's `playpen run` calls them
    trainer = cls(learner_model, teacher_model) if teacher_model is not None else cls(learner_model)
    params = [p for p in inspect.signature(trainer.learn).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    trainer.learn(game_registry()) if params else trainer.learn()
    return trainer


# ---------------------------------------------------------------- the command

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`playpen run FILE -l LEARNER [-p PARTNER] [-L MAX_NEW_TOKENS] [-T TEMPERATURE]`."""
    parser.add_argument("file", metavar="FILE", help="a Python file defining a BasePlaypenTrainer subclass")
    parser.add_argument("-l", "--learner", required=True, help="learner model name (`playpen list models`)")
    parser.add_argument("-p", "--partner", default=None, help="optional partner model name (plays the other roles)")
    # upstream playpen's spelling: still read as the partner, with a note
    parser.add_argument("-t", "--teacher", dest="partner", action=OldSpelling, help=argparse.SUPPRESS)
    add_max_new_tokens(parser, help="token limit per reply (default %(default)s)")
    parser.add_argument("-T", "--temperature", type=float, default=TEMPERATURE,
                        help="sampling temperature (default %(default)s)")


def main(args: argparse.Namespace) -> int:
    check_flags(args)  # -L and -T mean what they mean in `playpen eval`

    run_trainer(args.file, args.learner, args.partner, args.max_new_tokens, args.temperature)
    return 0
