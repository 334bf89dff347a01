"""Writes taboo's instances: `python playpen/games/taboo/instancegenerator.py`.

Validation (in/instances.json) and train (in/instances_train.json) targets come from disjoint parts of one seeded
shuffle of resources/words.txt: validation targets are held out. Experiments are difficulty levels by how many
of the target's related words are taboo: 1 (easy), 2 (medium) or 3 (hard).
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.common import read_lines

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"easy": 1, "medium": 2, "hard": 3}  # name -> number of taboo words
VALIDATION_PER_EXPERIMENT = 7  # 21 held-out targets; the other 37 give 111 train instances
TRAIN_ID_OFFSET = 10000


class TabooInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation"):
        entries = {}
        for line in read_lines(GAME_DIR / "resources" / "words.txt"):
            target, related, *_ = [part.strip() for part in line.split("|")]
            entries[target] = [w.strip() for w in related.split(",")]
        targets = sorted(entries)
        rng = random.Random(seed)
        rng.shuffle(targets)
        n_val = VALIDATION_PER_EXPERIMENT * len(EXPERIMENTS)
        pool = targets[:n_val] if split == "validation" else targets[n_val:]
        describer = (GAME_DIR / "resources" / "describer_prompt.txt").read_text(encoding="utf-8")
        guesser = (GAME_DIR / "resources" / "guesser_prompt.txt").read_text(encoding="utf-8")
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for index, (name, n_taboo) in enumerate(EXPERIMENTS.items()):
            experiment = self.add_experiment(name)
            experiment["n_taboo_words"] = n_taboo
            experiment["max_turns"] = 3
            for target in pool[index::len(EXPERIMENTS)] if split == "validation" else pool:
                taboo = rng.sample(entries[target], n_taboo)
                instance = self.add_game_instance(experiment, game_id)
                instance["target_word"] = target
                instance["taboo_words"] = taboo
                instance["describer_prompt"] = (describer.replace("$TABOO$", ", ".join(taboo))
                                                .replace("$TARGET$", target))
                instance["guesser_prompt"] = guesser
                game_id += 1


if __name__ == "__main__":
    TabooInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    TabooInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
