"""Writes wordle's instances: `python playpen/games/wordle/instancegenerator.py`.

in/instances.json (validation, what `clem run` and `playpen eval` play) and in/instances_train.json (train) draw
their target words from disjoint parts of one seeded shuffle of the word list, so no validation target is ever a
train target (every word stays guessable: the vocabulary is shared). Experiments are difficulty levels: the
prompt reveals the first and last letter (easy), the first letter (medium) or nothing (hard).
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.common import read_lines

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = ("easy", "medium", "hard")
VALIDATION_PER_EXPERIMENT = 7  # 21 validation targets; the other 39 words give 117 train instances
TRAIN_ID_OFFSET = 10000  # train and validation game_ids never collide in records or datasets


def hint_for(experiment: str, word: str) -> str:
    if experiment == "easy":
        return f" Hint: the word starts with '{word[0]}' and ends with '{word[-1]}'."
    if experiment == "medium":
        return f" Hint: the word starts with '{word[0]}'."
    return ""


class WordleInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation"):
        words = sorted(read_lines(GAME_DIR / "resources" / "words.txt"))
        random.Random(seed).shuffle(words)
        n_val = VALIDATION_PER_EXPERIMENT * len(EXPERIMENTS)
        pool = words[:n_val] if split == "validation" else words[n_val:]
        template = (GAME_DIR / "resources" / "prompt.txt").read_text(encoding="utf-8")
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for index, name in enumerate(EXPERIMENTS):
            experiment = self.add_experiment(name)
            # validation: 7 different targets per level; train: every train word at every level
            targets = pool[index::len(EXPERIMENTS)] if split == "validation" else pool
            for word in targets:
                instance = self.add_game_instance(experiment, game_id)
                instance["target_word"] = word
                instance["prompt"] = template.replace("$HINT$", hint_for(name, word))
                game_id += 1


if __name__ == "__main__":
    WordleInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    WordleInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
