"""Writes double_consultancy's instances: `python playpen/games/double_consultancy/instancegenerator.py`.

The same reading items as debate (passages.py: the same validation and train passages, disjoint by passage);
within an experiment the correct answer is A as often as B. Experiments: no question (each consultant gives one
speech), one question per consultant, two questions per consultant with a scratchpad. Validation is scored by
judge accuracy, train by the judge's preference for Consultant A's answer, with the programmatic judge and an
expert Consultant B that slips half the time pinned (what a learner seated as Consultant A learns against).
"""
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.debate import protocol as pr
from playpen.games.debate.passages import reading_set
from playpen.games.double_consultancy.master import render_prompts

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"no_questions": {"questions": 0}, "one_question": {"questions": 1},
               "two_questions_scratchpad": {"questions": 2, "scratchpad": True}}
MAIN_SCORE = {"validation": "judge_correct", "train": "player_1_preference"}
VALIDATION_PER_EXPERIMENT = 10
TRAIN_PER_EXPERIMENT = 40
TRAIN_ID_OFFSET = 10000
OPPONENT_SKILL = 0.5
ITEM_KEYS = ("passage", "question", "answers", "correct", "subject", "kind")


class DoubleConsultancyInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation", programmatic_partners: bool | None = None):
        """programmatic_partners (default: on for train, off for validation): pin the programmatic judge and the
        expert Consultant B to their seats (experiment keys judge/opponent)."""
        pinned = split == "train" if programmatic_partners is None else programmatic_partners
        per_experiment = VALIDATION_PER_EXPERIMENT if split == "validation" else TRAIN_PER_EXPERIMENT
        groups = reading_set(seed, split, per_experiment, len(EXPERIMENTS))
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for (name, settings), items in zip(EXPERIMENTS.items(), groups):
            experiment = self.add_experiment(name)
            experiment.update(settings, max_words=100, main_score=MAIN_SCORE[split])
            experiment.update(judge=pr.PROGRAMMATIC if pinned else None, opponent=pr.PROGRAMMATIC if pinned else None)
            if pinned:
                experiment["opponent_skill"] = OPPONENT_SKILL
            protocol = pr.Protocol.from_experiment(experiment)
            for item in items:
                instance = self.add_game_instance(experiment, game_id)
                instance.update({k: item[k] for k in ITEM_KEYS})
                instance.update(render_prompts(protocol, instance))
                game_id += 1


if __name__ == "__main__":
    DoubleConsultancyInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    DoubleConsultancyInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
