"""Writes double_consultancy's instances: `python playpen/games/double_consultancy/instancegenerator.py`.

The same reading items as debate (passages.py: the same validation and train passages, disjoint by passage);
within an experiment the correct answer is A as often as B. Experiments: no question (each consultant gives one
speech), one question per consultant, two questions per consultant with a scratchpad. Validation is scored by
judge accuracy, train by the judge's preference for Consultant A's answer, with the programmatic judge and an
expert Consultant B that slips half the time pinned (what a learner seated as Consultant A learns against).
"""
from pathlib import Path

from playpen.games.debate.instancegenerator import DebateInstanceGenerator
from playpen.games.double_consultancy.master import render_prompts

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"no_questions": {"questions": 0}, "one_question": {"questions": 1},
               "two_questions_scratchpad": {"questions": 2, "scratchpad": True}}


class DoubleConsultancyInstanceGenerator(DebateInstanceGenerator):
    """Debate's generator (reading items, splits, pinned partners: the programmatic judge and an expert Consultant
    B) with this game's folder, experiments and prompts."""

    game_dir = GAME_DIR
    experiments = EXPERIMENTS
    render_prompts = staticmethod(render_prompts)


if __name__ == "__main__":
    DoubleConsultancyInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    DoubleConsultancyInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
