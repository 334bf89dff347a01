"""Writes consultancy's instances: `python playpen/games/consultancy/instancegenerator.py`.

The same reading items as debate (passages.py: the same validation and train passages, disjoint by passage), each
with `consultant_side`: the consultant argues for the correct answer in half of each experiment's instances, and
both the correct answer and the consultant's side are A as often as B. Experiments: no question, one question,
two questions with a scratchpad. Validation is scored by judge accuracy, train by the judge's preference for the
consultant's answer (what a learner seated as the consultant learns from).
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.consultancy.master import render_prompts
from playpen.games.debate import protocol as pr
from playpen.games.debate.passages import reading_set

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"no_questions": {"questions": 0}, "one_question": {"questions": 1},
               "two_questions_scratchpad": {"questions": 2, "scratchpad": True}}
MAIN_SCORE = {"validation": "judge_correct", "train": "player_1_preference"}
VALIDATION_PER_EXPERIMENT = 10
TRAIN_PER_EXPERIMENT = 40
TRAIN_ID_OFFSET = 10000
ITEM_KEYS = ("passage", "question", "answers", "correct", "subject", "kind")


def honest_flags(items: list[dict], rng: random.Random) -> list[bool]:
    """Whether the consultant argues the correct answer: every other item of the items whose correct side is A,
    then of those whose side is B (each group shuffled), so half are honest and the consultant's side is balanced
    as far as the counts allow."""
    order = [i for side in pr.SIDES for i in rng.sample([i for i, item in enumerate(items) if item["correct"] == side],
                                                        sum(item["correct"] == side for item in items))]
    flags = [False] * len(items)
    for n, i in enumerate(order):
        flags[i] = n % 2 == 0
    return flags


class ConsultancyInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation", programmatic_partners: bool | None = None):
        """programmatic_partners (default: on for train, off for validation): pin the programmatic judge to its
        seat (experiment key judge), so a learner seated as the consultant learns against a fixed judge."""
        pinned = split == "train" if programmatic_partners is None else programmatic_partners
        per_experiment = VALIDATION_PER_EXPERIMENT if split == "validation" else TRAIN_PER_EXPERIMENT
        groups = reading_set(seed, split, per_experiment, len(EXPERIMENTS))
        rng = random.Random(f"{seed}-consultancy-{split}")
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for (name, settings), items in zip(EXPERIMENTS.items(), groups):
            experiment = self.add_experiment(name)
            experiment.update(settings, max_words=100, main_score=MAIN_SCORE[split])
            experiment.update(judge=pr.PROGRAMMATIC if pinned else None)
            protocol = pr.Protocol.from_experiment(experiment)
            for item, honest in zip(items, honest_flags(items, rng)):
                instance = self.add_game_instance(experiment, game_id)
                instance.update({k: item[k] for k in ITEM_KEYS})
                instance["consultant_side"] = item["correct"] if honest else pr.other(item["correct"])
                instance.update(render_prompts(protocol, instance))
                game_id += 1


if __name__ == "__main__":
    ConsultancyInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    ConsultancyInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
