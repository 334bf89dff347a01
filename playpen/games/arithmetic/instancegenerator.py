"""Writes arithmetic's instances: `python playpen/games/arithmetic/instancegenerator.py`.

One seeded stream of distinct problems per experiment: its first items are validation (in/instances.json), the
next ones train (in/instances_train.json). Problems are distinct by their arithmetic (numbers and operations),
not just their wording, so no validation sum reappears in train under other names. Experiments are difficulty
levels: one step (easy), two steps (medium), a multiplication then one step (hard).
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.arithmetic.master import ADD, BAGS, ITEMS, NAMES, QUESTION, START, SUBTRACT, solve

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"easy": "one_step", "medium": "two_steps", "hard": "multiply"}
VALIDATION_PER_EXPERIMENT = 7
TRAIN_PER_EXPERIMENT = 40
TRAIN_ID_OFFSET = 10000


def make_problem(kind: str, rng: random.Random) -> tuple[tuple, str, int]:
    """(arithmetic key, text, answer) for one random problem of a kind."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if kind == "multiply":
        n, m = rng.randint(2, 5), rng.randint(2, 6)
        sentences, total, key = [BAGS.format(name=name, n=n, m=m, item=item)], n * m, [("*", n, m)]
    else:
        n = rng.randint(2, 12)
        sentences, total, key = [START.format(name=name, n=n, item=item)], n, [("=", n)]
    for _ in range(2 if kind == "two_steps" else 1):
        k = rng.randint(1, 9)
        if total >= k and rng.random() < 0.5:  # never below zero
            sentences.append(rng.choice(SUBTRACT).format(name=name, n=k))
            total, step = total - k, ("-", k)
        else:
            sentences.append(rng.choice(ADD).format(name=name, n=k))
            total, step = total + k, ("+", k)
        key.append(step)
    sentences.append(QUESTION.format(item=item, name=name))
    text = " ".join(sentences)
    assert solve(text) == total, text  # the expert can read every template
    return tuple(key), text, total


def problem_stream(kind: str, seed: int, count: int) -> list[tuple[str, int]]:
    rng = random.Random(f"{seed}-{kind}")
    seen, problems = set(), []
    while len(problems) < count:
        key, text, answer = make_problem(kind, rng)
        if key not in seen:
            seen.add(key)
            problems.append((text, answer))
    return problems


class ArithmeticInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation",
                    validation_per_experiment: int = VALIDATION_PER_EXPERIMENT,
                    train_per_experiment: int = TRAIN_PER_EXPERIMENT):
        """The counts are arguments for larger sets (`generate: {seed: N, train_per_experiment: 150}`); one_step
        has 170 distinct problems, so their sum stays at or below that."""
        template = (GAME_DIR / "resources" / "prompt.txt").read_text(encoding="utf-8")
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for name, kind in EXPERIMENTS.items():
            experiment = self.add_experiment(name)
            experiment["kind"] = kind
            stream = problem_stream(kind, seed, validation_per_experiment + train_per_experiment)
            part = stream[:validation_per_experiment] if split == "validation" else stream[validation_per_experiment:]
            for text, answer in part:
                instance = self.add_game_instance(experiment, game_id)
                instance["problem"] = text
                instance["answer"] = answer
                instance["prompt"] = template.replace("$PROBLEM$", text)
                game_id += 1


if __name__ == "__main__":
    ArithmeticInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    ArithmeticInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
