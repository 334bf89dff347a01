"""Writes referencegame's instances: `python playpen/games/referencegame/instancegenerator.py`.

Target grids of validation (in/instances.json) and train (in/instances_train.json) come from disjoint parts of
one seeded shuffle of all 512 3x3 grids. Experiments are difficulty levels by how close the two distractors are
to the target: random grids (easy), 2 cells changed (medium), 1 cell changed (hard). Within an experiment the
target's position is balanced over first/second/third for each player, so no position is a shortcut to reward.

Two more files for learning experiments (bench/studies/bench_learning.py):
- in/instances_heldout.json: 51 validation-pool targets per experiment (153 instances, 17 per target position
  and experiment): one standard error is ~4 points where the 60 of instances.json give ~6;
- in/instances_train_variants.json: 32 train targets per experiment, each grid triple three times with the
  follower's target in each position (`variant_group` ties them; 288 instances). Playpen keeps a group together
  in one GRPO step (games/instances.py), so a policy that always names one position earns exactly 1/3 there.
"""
import random
from pathlib import Path

from clemcore.clemgame import GameInstanceGenerator

from playpen.games.referencegame.master import POSITIONS, render_grids

GAME_DIR = Path(__file__).parent
SEED = 42
EXPERIMENTS = {"easy": None, "medium": 2, "hard": 1}  # name -> cells in which a distractor differs (None: any)
VALIDATION_PER_EXPERIMENT = 20  # 60 episodes: a 1-in-3 game needs that many to tell models apart
TRAIN_PER_EXPERIMENT = 40
VALIDATION_POOL = 64  # target grids reserved for validation
TRAIN_ID_OFFSET = 10000


def to_grid(bits: int) -> list[str]:
    cells = ["X" if bits >> i & 1 else "." for i in range(9)]
    return ["".join(cells[r * 3:r * 3 + 3]) for r in range(3)]


def distractor(target: int, n_changed: int | None, rng: random.Random) -> int:
    if n_changed is None:
        return rng.randrange(512)
    for cell in rng.sample(range(9), n_changed):
        target ^= 1 << cell
    return target


def balanced(n: int, rng: random.Random) -> list[int]:
    """n target positions, each of 0, 1, 2 as often as n allows, in random order."""
    positions = [i % 3 for i in range(n)]
    rng.shuffle(positions)
    return positions


def placed(target: int, distractors: list[int], position: int, rng: random.Random) -> list[int]:
    order = rng.sample(distractors, 2)
    order.insert(position, target)
    return order


class ReferenceGameInstanceGenerator(GameInstanceGenerator):

    def __init__(self):
        super().__init__(str(GAME_DIR))

    def on_generate(self, seed: int, split: str = "validation", per_experiment: int | None = None,
                    variants: bool = False):
        rng = random.Random(seed)
        all_grids = list(range(512))
        rng.shuffle(all_grids)
        pool = all_grids[:VALIDATION_POOL] if split == "validation" else all_grids[VALIDATION_POOL:]
        rng = random.Random(f"{seed}-{split}")  # the split's own stream: validation does not shift train
        if per_experiment is not None:  # another set size: its own stream too
            rng = random.Random(f"{seed}-{split}-{per_experiment}-{variants}")
        per_experiment = per_experiment or (VALIDATION_PER_EXPERIMENT if split == "validation"
                                            else TRAIN_PER_EXPERIMENT)
        wanted = per_experiment * len(EXPERIMENTS)
        if wanted <= len(pool):
            targets = iter(rng.sample(pool, wanted))
        else:  # more targets than the pool holds (the held-out set): every grid once before any twice
            targets = iter([grid for _ in range(-(-wanted // len(pool))) for grid in rng.sample(pool, len(pool))])
        game_id = 0 if split == "validation" else TRAIN_ID_OFFSET
        for name, n_changed in EXPERIMENTS.items():
            experiment = self.add_experiment(name)
            experiment["distractor_distance"] = n_changed or "random"
            giver_positions, follower_positions = balanced(per_experiment, rng), balanced(per_experiment, rng)
            for group, (giver_at, follower_at) in enumerate(zip(giver_positions, follower_positions)):
                target = next(targets)
                grids = {target}
                while len(grids) < 3:  # two distinct distractors
                    grids.add(distractor(target, n_changed, rng))
                giver_order = placed(target, sorted(grids - {target}), giver_at, rng)
                for position in (range(len(POSITIONS)) if variants else [follower_at]):
                    self.add_instance(experiment, game_id, target, giver_order, position, rng,
                                      f"{name}-{group}" if variants else None)
                    game_id += 1

    def add_instance(self, experiment, game_id: int, target: int, giver_order: list[int], follower_at: int,
                     rng: random.Random, variant_group: str | None):
        giver_template = (GAME_DIR / "resources" / "giver_prompt.txt").read_text(encoding="utf-8")
        follower_template = (GAME_DIR / "resources" / "follower_prompt.txt").read_text(encoding="utf-8")
        distractors = sorted(set(giver_order) - {target})
        follower_order = giver_order
        while follower_order == giver_order:  # the giver is told the follower's order differs
            follower_order = placed(target, distractors, follower_at, rng)
        giver_grids = [to_grid(g) for g in giver_order]
        follower_grids = [to_grid(g) for g in follower_order]
        instance = self.add_game_instance(experiment, game_id)
        instance["target_grid"] = to_grid(target)
        instance["player_1_grids"] = giver_grids
        instance["player_1_target"] = POSITIONS[giver_order.index(target)]
        instance["player_2_grids"] = follower_grids
        instance["player_2_target"] = POSITIONS[follower_order.index(target)]
        instance["player_1_prompt"] = (giver_template.replace("$GRIDS$", render_grids(giver_grids))
                                       .replace("$TARGET$", instance["player_1_target"]))
        instance["player_2_prompt"] = follower_template.replace("$GRIDS$", render_grids(follower_grids))
        if variant_group is not None:
            instance["variant_group"] = variant_group


if __name__ == "__main__":
    ReferenceGameInstanceGenerator().generate("instances.json", seed=SEED, split="validation")
    ReferenceGameInstanceGenerator().generate("instances_train.json", seed=SEED, split="train")
    ReferenceGameInstanceGenerator().generate("instances_heldout.json", seed=SEED, split="validation",
                                              per_experiment=51)
    ReferenceGameInstanceGenerator().generate("instances_train_variants.json", seed=SEED, split="train",
                                              per_experiment=32, variants=True)
