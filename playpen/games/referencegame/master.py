"""referencegame (the clembench 2.0 kind): an instruction giver sees three 3x3 ASCII grids and a target, and
describes the target; a follower, who sees the same grids in another order, answers which one is meant.

Main Score as clembench: 100 if the follower picks the target, else 0; NaN when aborted (a response that is not
one `Expression: ...` / `Answer: first|second|third` line).
"""
import itertools
import re

from clemcore.clemgame import GameBenchmark, ParseError

from playpen.games.common import ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer, gm_events, tagged_line

POSITIONS = ("first", "second", "third")
ROWS = ("top", "middle", "bottom")
COLUMNS = ("left", "middle", "right")
GRID_LINES = re.compile(r"^(first|second|third):\n([X.]{3})\n([X.]{3})\n([X.]{3})$", re.MULTILINE)


def render_grids(grids: list[list[str]]) -> str:
    return "\n".join(f"{name}:\n" + "\n".join(rows) for name, rows in zip(POSITIONS, grids))


def read_grids(prompt: str) -> list[tuple[str, ...]]:
    return [match[1:] for match in GRID_LINES.findall(prompt)]


def features(grid) -> list[tuple[str, str, str]]:
    """What an expression can say about a grid: its rows, its columns, its number of X."""
    columns = ["".join(row[i] for row in grid) for i in range(3)]
    return ([("row", name, row) for name, row in zip(ROWS, grid)]
            + [("column", name, col) for name, col in zip(COLUMNS, columns)]
            + [("count", "", str("".join(grid).count("X")))])


def say(feature_set) -> str:
    parts = [f"{pos} {kind} is {value}" for kind, pos, value in feature_set if kind != "count"]
    counts = [value for kind, _, value in feature_set if kind == "count"]
    text = "the grid whose " + " and ".join(parts) if parts else "the grid"
    return text + (f" with {counts[0]} X" if counts else "")


def matches(grid, expression: str) -> bool:
    """Whether a grid fits every row/column/count constraint the expression states."""
    own = features(grid)
    said = ([("row", p, v) for p, v in re.findall(r"(top|middle|bottom) row is ([X.]{3})", expression)]
            + [("column", p, v) for p, v in re.findall(r"(left|middle|right) column is ([X.]{3})", expression)]
            + [("count", "", v) for v in re.findall(r"with (\d) X", expression)])
    return bool(said) and all(f in own for f in said)


class InstructionGiver(ExpertPlayer):
    """Expert: with probability `skill` the shortest distinguishing description (one feature, else two, else all
    rows), in random choice among equals; otherwise one random feature of the target, which may be ambiguous."""

    def expert_response(self, messages, rng, skill):
        prompt = messages[0]["content"]
        grids = read_grids(prompt)
        target = grids[POSITIONS.index(re.search(r"target is the (\w+) grid", prompt).group(1))]
        others = [g for g in grids if g != target]
        own = features(target)
        if rng.random() < skill:
            for size in (1, 2):
                unique = [combo for combo in itertools.combinations(own, size)
                          if not any(matches(g, say(combo)) for g in others)]
                if unique:
                    return f"Expression: {say(rng.choice(unique))}"
            return f"Expression: {say(own[:3])}"
        return f"Expression: {say([rng.choice(own)])}"


class InstructionFollower(ExpertPlayer):
    """Expert: a grid that fits the expression (random among those that do), with probability `skill`."""

    def expert_response(self, messages, rng, skill):
        prompt = messages[-1]["content"]
        grids = read_grids(prompt)
        expression = re.search(r"describes one of them: (.*)", prompt).group(1)
        fitting = [i for i, g in enumerate(grids) if matches(g, expression)]
        if not fitting or rng.random() >= skill:
            fitting = range(len(POSITIONS))
        return f"Answer: {POSITIONS[rng.choice(list(fitting))]}"


class ReferenceGame(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.follower_prompt = game_instance["player_2_prompt"]
        self.answer = game_instance["player_2_target"]
        self.giver = InstructionGiver(self.player_models[0], game_role="Instruction Giver")
        self.follower = InstructionFollower(self.player_models[1], game_role="Instruction Follower")
        self.add_player(self.giver, initial_context=game_instance["player_1_prompt"])
        self.add_player(self.follower)  # gets its prompt once the expression is known

    def _parse_response(self, player, response: str) -> str:
        if player is self.giver:
            return tagged_line(response, "Expression")
        answer = tagged_line(response, "Answer").lower().strip(" .")
        if answer not in POSITIONS:
            raise ParseError(reason="the answer must be first, second or third", response=response)
        return answer

    def _advance_game(self, player, parsed: str):
        if player is self.giver:
            self.log_to_self("expression", parsed)
            self.set_context_for(self.follower, self.follower_prompt.replace("$EXPRESSION$", parsed))
            return
        self.log_to_self("answer", parsed)
        if parsed == self.answer:
            self.log_to_self("correct answer", "end game")
            self.state.succeed()
        else:
            self.log_to_self("wrong answer", f"the target was {self.answer}")
            self.state.failed()


class ReferenceGameScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        if gm_events(round_events, "answer"):
            self.log_round_score(round_idx, "Accuracy", int(bool(gm_events(round_events, "correct answer"))))


class ReferenceGameBenchmark(GameBenchmark):
    roles = {"Instruction Giver": InstructionGiver, "Instruction Follower": InstructionFollower}

    def create_game_master(self, experiment, player_models):
        return ReferenceGame(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return ReferenceGameScorer(self.game_name, experiment, game_instance)
