"""arithmetic: a static game (one request, automatically verifiable) for statscore. The player solves a short
word problem with small numbers and replies `ANSWER: <int>`.

Main Score: 100 for the right number, 0 for a wrong one, NaN when aborted (not one `ANSWER: <int>` line).
The sentence templates live here because both the instance generator (writing problems) and the expert
(reading them) use them.
"""
import re

from clemcore.clemgame import GameBenchmark, ParseError

from playpen.games.common import ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer, gm_events, tagged_line

NAMES = ("Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Leo")
ITEMS = ("apples", "books", "coins", "cards", "stickers", "marbles", "pencils", "shells", "stamps", "cookies")
START = "{name} has {n} {item}."
BAGS = "{name} has {n} bags with {m} {item} in each."
ADD = ("{name} gets {n} more.", "{name} finds {n} more.", "A friend gives {name} {n} more.")
SUBTRACT = ("{name} gives {n} away.", "{name} loses {n}.")
QUESTION = "How many {item} does {name} have now?"


def solve(problem: str) -> int:
    """Reads a problem written from the templates above, sentence by sentence."""
    total = 0
    for sentence in re.split(r"(?<=[.?])\s+", problem):
        if bags := re.search(r"has (\d+) bags with (\d+)", sentence):
            total = int(bags.group(1)) * int(bags.group(2))
        elif start := re.search(r"has (\d+) ", sentence):
            total = int(start.group(1))
        elif more := re.search(r"(\d+) more", sentence):
            total += int(more.group(1))
        elif fewer := re.search(r"gives (\d+) away|loses (\d+)", sentence):
            total -= int(fewer.group(1) or fewer.group(2))
    return total


class Solver(ExpertPlayer):
    """Expert: the right answer with probability `skill`, otherwise a near miss (off by 1 or 2)."""

    def expert_response(self, messages, rng, skill):
        answer = solve(messages[-1]["content"])
        if rng.random() >= skill:
            answer = max(0, answer + rng.choice((-2, -1, 1, 2)))
        return f"ANSWER: {answer}"


def parse_answer(response: str) -> int:
    text = tagged_line(response, "ANSWER").rstrip(".")
    if not re.fullmatch(r"-?\d+", text):
        raise ParseError(reason="the answer must be a whole number", response=response)
    return int(text)


class Arithmetic(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.answer = game_instance["answer"]
        self.solver = Solver(self.player_models[0], game_role="Solver")
        self.add_player(self.solver, initial_context=game_instance["prompt"])

    def _parse_response(self, player, response: str) -> int:
        return parse_answer(response)

    def _advance_game(self, player, answer: int):
        self.log_to_self("answer", answer)
        if answer == self.answer:
            self.log_to_self("correct answer", "end game")
            self.state.succeed()
        else:
            self.log_to_self("wrong answer", f"expected {self.answer}")
            self.state.failed()


class ArithmeticScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        if gm_events(round_events, "answer"):
            self.log_round_score(round_idx, "Accuracy", int(bool(gm_events(round_events, "correct answer"))))


class ArithmeticBenchmark(GameBenchmark):
    roles = {"Solver": Solver}

    def create_game_master(self, experiment, player_models):
        return Arithmetic(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return ArithmeticScorer(self.game_name, experiment, game_instance)
