"""minibench wordle's instances: `python instancegenerator.py` in this folder writes in/instances.json (wordle)
and in/instances_hard.json (wordle_hard). Experiments are named like clembench's wordle ones; targets come from one
seeded shuffle of resources/words.txt (SEED below)."""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.common import read_lines

GAME_DIR = Path(__file__).parent
SEED = 2024
PER_EXPERIMENT = 3


def hint_for(experiment: str, word: str) -> str:
    return "" if experiment.endswith("no_clue") else f" Hint: the word starts with '{word[0]}'."


class MiniWordleInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, experiments=("high_frequency_words_clue", "medium_frequency_words_no_clue")):
        words = sorted(read_lines(GAME_DIR / "resources" / "words.txt"))
        random.Random(seed).shuffle(words)
        template = (GAME_DIR / "resources" / "prompt.txt").read_text(encoding="utf-8")
        game_id = 0
        for index, name in enumerate(experiments):
            experiment = self.add_experiment(name)
            for word in words[index * PER_EXPERIMENT:(index + 1) * PER_EXPERIMENT]:
                instance = self.add_game_instance(experiment, game_id)
                instance["target_word"] = word
                instance["prompt"] = template.replace("$HINT$", hint_for(name, word))
                game_id += 1


if __name__ == "__main__":
    MiniWordleInstanceGenerator().generate("instances.json", seed=SEED)
    MiniWordleInstanceGenerator().generate("instances_hard.json", seed=SEED + 1, experiments=("hard_no_clue",))
