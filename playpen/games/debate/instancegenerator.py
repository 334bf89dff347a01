"""Writes debate's instances: `python playpen/games/debate/instancegenerator.py`.

Items come from the generated reading set (passages.py): validation (in/instances.json) and train
(in/instances_train.json) passages are disjoint, every instance has its own passage, and within an experiment the
correct answer is A as often as B. Experiments are protocols: one round of simultaneous openings; simultaneous
openings then a sequential rebuttal; sequential openings and rebuttal with a scratchpad. Validation is scored by
judge accuracy, train by the judge's preference for Debater A's answer (what a learner seated as A learns from).
in/instances_best_of_n.json: the validation items with a best-of-4 Debater A (the judge chooses its speeches).
"""
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.debate import protocol as pr
from playpen.games.debate.master import render_prompts
from playpen.games.debate.passages import reading_set

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {
    "simultaneous_1_round": {"rounds": 1, "openings": "simultaneous"},
    "simultaneous_2_rounds": {"rounds": 2, "openings": "simultaneous", "rebuttals": "sequential"},
    "sequential_2_rounds_scratchpad": {"rounds": 2, "openings": "sequential", "rebuttals": "sequential",
                                       "scratchpad": True},
}
MAIN_SCORE = {"validation": "judge_correct", "train": "player_1_preference"}
VALIDATION_PER_EXPERIMENT = 10
TRAIN_PER_EXPERIMENT = 40
TRAIN_ID_OFFSET = 10000
OPPONENT_SKILL = 0.5
BEST_OF_N = {"n": 4, "chooser": "judge"}
ITEM_KEYS = ("passage", "question", "answers", "correct", "subject", "kind")


class DebateInstanceGenerator(GameInstanceGenerator):
    """Also double consultancy's (its own folder, experiments and prompts over the same reading items)."""

    game_dir = GAME_DIR
    experiments = EXPERIMENTS
    render_prompts = staticmethod(render_prompts)

    def __init__(self):
        super().__init__(str(self.game_dir))

    def on_generate(self, seed: int, split: str = "validation", programmatic_partners: bool | None = None,
                    best_of_n: dict | None = None):
        """programmatic_partners (default: on for train, off for validation): pin the programmatic judge and the
        expert Debater B to their seats (experiment keys judge/opponent), so a learner seated as Debater A learns
        against fixed partners whatever fills the other seats. best_of_n: every experiment's best-of-N advocates
        (best_of_n.py), e.g. {"n": 4, "chooser": "judge"}: Debater A samples 4 speeches per turn."""
        pinned = split == "train" if programmatic_partners is None else programmatic_partners
        per_experiment = VALIDATION_PER_EXPERIMENT if split == "validation" else TRAIN_PER_EXPERIMENT
        groups = reading_set(seed, split, per_experiment, len(self.experiments))
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for (name, settings), items in zip(self.experiments.items(), groups):
            experiment = self.add_experiment(name)
            experiment.update(settings, max_words=100, main_score=MAIN_SCORE[split])
            experiment.update(judge=pr.PROGRAMMATIC if pinned else None, opponent=pr.PROGRAMMATIC if pinned else None)
            if pinned:  # an expert that slips half the time: a learner can win some debates from the start
                experiment["opponent_skill"] = OPPONENT_SKILL
            if best_of_n is not None:
                experiment["best_of_n"] = best_of_n
            protocol = pr.Protocol.from_experiment(experiment)
            for item in items:
                instance = self.add_game_instance(experiment, game_id)
                instance.update({k: item[k] for k in ITEM_KEYS})
                instance.update(self.render_prompts(protocol, instance))
                game_id += 1


if __name__ == "__main__":
    DebateInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    DebateInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
    # the validation items with a best-of-4 Debater A chosen by the judge: `--instance-set instances_best_of_n`
    DebateInstanceGenerator().generate("instances_best_of_n.json", seed=SEED, split="validation",
                                       best_of_n=BEST_OF_N)
