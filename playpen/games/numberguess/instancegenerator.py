"""Writes numberguess's instances: `python playpen/games/numberguess/instancegenerator.py`.

Three sets, none sharing a secret or a range start with another:
- train (in/instances_train.json): ranges of 16 numbers starting at 1-40, 5 guesses;
- validation (in/instances.json), held out in domain: the same shape, ranges starting at 60-100 (secrets 60-115,
  disjoint from train's 1-55);
- out of domain (in/instances_ood.json), never trained on: ranges of 32 numbers starting at 150-300, 6 guesses.
Binary search needs 4 guesses for 16 numbers and 5 for 32, so the expert wins every instance of every set.
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

GAME_DIR = Path(__file__).parent
SEED = 42
# split -> (experiment name, range width, guesses, first range start, last range start, instances)
SETS = {
    "train": ("width16", 16, 5, 1, 40, 400),
    "validation": ("width16", 16, 5, 60, 100, 400),
    "ood": ("width32", 32, 6, 150, 300, 300),
}
ID_OFFSET = {"validation": 0, "train": 10000, "ood": 20000}


class NumberGuessInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation", instances: int | None = None):
        """`instances` overrides the set's count (`generate: {seed: N, split: train, instances: 800}`); pairs of
        (range start, secret) are distinct within a set."""
        name, width, guesses, first, last, count = SETS[split]
        count = instances or count
        pairs = [(lo, secret) for lo in range(first, last + 1) for secret in range(lo, lo + width)]
        if count > len(pairs):
            raise ValueError(f"{split} has {len(pairs)} distinct (range, secret) pairs; asked for {count}")
        template = (GAME_DIR / "resources" / "prompt.txt").read_text(encoding="utf-8")
        experiment = self.add_experiment(name)
        experiment["width"], experiment["max_guesses"] = width, guesses
        for game_id, (lo, secret) in enumerate(random.Random(f"{seed}-{split}").sample(pairs, count),
                                               start=ID_OFFSET[split]):
            instance = self.add_game_instance(experiment, game_id)
            hi = lo + width - 1
            instance.update(lo=lo, hi=hi, secret=secret, max_guesses=guesses, prompt=template.replace(
                "$LO$", str(lo)).replace("$HI$", str(hi)).replace("$GUESSES$", str(guesses)).strip())


if __name__ == "__main__":
    for split, file in (("validation", "instances.json"), ("train", "instances_train.json"),
                        ("ood", "instances_ood.json")):
        NumberGuessInstanceGenerator().generate(file, seed=SEED, split=split)
