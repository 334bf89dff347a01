"""taboo: a describer gives clues for a target word without using it, parts of it, or its taboo words; a guesser
has 3 tries. A turn is one clue plus one guess.

Main Score as clembench: 100 / turns needed, 0 if not guessed in 3 turns, NaN when aborted (a clue that breaks
the taboo rule, or a response that is not one `CLUE: ...` / `GUESS: <word>` line).
"""
import re
from functools import lru_cache
from pathlib import Path

from clemcore.clemgame import GameBenchmark, ParseError, RuleViolationError
from nltk.stem import PorterStemmer

from playpen.games.common import (ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer, episode_gm_events,
                                  gm_events, read_lines, tagged_line)

MAX_TURNS = 3
_stem = lru_cache(maxsize=None)(PorterStemmer().stem)


def read_knowledge(path: Path) -> dict[str, dict]:
    """target -> {"related": [...], "clues": [...]} from `target | related, ... | clue | clue | clue` lines."""
    knowledge = {}
    for line in read_lines(path):
        target, related, *clues = [part.strip() for part in line.split("|")]
        knowledge[target] = {"related": [w.strip() for w in related.split(",")], "clues": clues}
    return knowledge


KNOWLEDGE = read_knowledge(Path(__file__).parent / "resources" / "words.txt")
TARGET_BY_CLUE = {clue: target for target, entry in KNOWLEDGE.items() for clue in entry["clues"]}


def taboo_violation(clue: str, target: str, taboo_words: list[str]) -> str | None:
    """The first word of the clue that is the target or a taboo word, a form of one (same stem), or a compound
    starting with one (for words of 4+ letters, so 'snowman' breaks 'snow' but 'that' does not break 'hat')."""
    forbidden = [target] + list(taboo_words)
    stems = {_stem(word) for word in forbidden}
    for token in re.findall(r"[a-z]+", clue.lower()):
        if token in forbidden or _stem(token) in stems:
            return token
        if any(len(word) >= 4 and token.startswith(word) for word in forbidden):
            return token
    return None


def parse_guess(response: str) -> str:
    guess = tagged_line(response, "GUESS").lower().strip(" .!\"'")
    if not re.fullmatch(r"[a-z]+(-[a-z]+)?", guess):
        raise ParseError(reason="the guess must be a single word", response=response)
    return guess


class WordDescriber(ExpertPlayer):
    """Expert: one of its known clues for the target that it has not given yet, in random order."""

    def expert_response(self, messages, rng, skill):
        prompt = messages[0]["content"]
        target = re.search(r"Target word: (\S+)", prompt).group(1).lower()
        taboo = [w.strip() for w in re.search(r"taboo words: (.*?)\.\n", prompt).group(1).split(",")]
        given = {tagged_line(m["content"], "CLUE") for m in messages[1::2]}
        clues = [c for c in KNOWLEDGE.get(target, {}).get("clues", [])
                 if c not in given and not taboo_violation(c, target, taboo)]
        if not clues:  # an unknown target, or all clues used: spell out a safe hint
            return f"CLUE: a word of {len(target)} letters that begins with '{target[0]}'"
        return f"CLUE: {rng.choice(clues)}"


class WordGuesser(ExpertPlayer):
    """Expert: recognises the clues it knows and guesses their word with probability `skill`; otherwise (or for
    clues it does not know) a different word it has not tried yet."""

    def expert_response(self, messages, rng, skill):
        match = re.search(r"CLUE:\s*(.*)", messages[-1]["content"])
        clue = match.group(1).strip() if match else ""
        tried = {parse_guess(m["content"]) for m in messages[1::2]}
        known = TARGET_BY_CLUE.get(clue)
        if known and known not in tried and rng.random() < skill:
            return f"GUESS: {known}"
        others = sorted(set(KNOWLEDGE) - tried - {known})
        return f"GUESS: {rng.choice(others)}"


class Taboo(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.target = game_instance["target_word"]
        self.taboo_words = game_instance["taboo_words"]
        self.max_turns = self.experiment.get("max_turns", MAX_TURNS)
        self.describer = WordDescriber(self.player_models[0], game_role="Describer")
        self.guesser = WordGuesser(self.player_models[1], game_role="Guesser")
        self.add_player(self.describer, initial_context=game_instance["describer_prompt"])
        # the guesser's rules are prefixed to the first clue it gets (clemcore's lazy initial prompt)
        self.add_player(self.guesser, initial_prompt=game_instance["guesser_prompt"])

    def _parse_response(self, player, response: str) -> str:
        if player is self.describer:
            return tagged_line(response, "CLUE")
        return parse_guess(response)

    def _advance_game(self, player, parsed: str):
        if player is self.describer:
            broken = taboo_violation(parsed, self.target, self.taboo_words)
            if broken:
                raise RuleViolationError(reason=f"the clue uses the forbidden word '{broken}'", response=parsed)
            self.log_to_self("valid clue", parsed)
            self.set_context_for(self.guesser, f"CLUE: {parsed}")
            return
        self.log_to_self("valid guess", parsed)
        if parsed == self.target:
            self.log_to_self("correct guess", "end game")
            self.state.succeed()
        elif self.current_round + 1 >= self.max_turns:
            self.log_to_self("max turns reached", "end game")
            self.state.failed()
        else:
            self.set_context_for(self.describer, f"GUESS: {parsed}")


class TabooScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        if gm_events(round_events, "valid guess"):
            self.log_round_score(round_idx, "Accuracy", int(bool(gm_events(round_events, "correct guess"))))

    def success_score(self, interactions):
        (turn, _), = episode_gm_events(interactions, "correct guess")
        return 100 / (turn + 1)


class TabooBenchmark(GameBenchmark):
    roles = {"Describer": WordDescriber, "Guesser": WordGuesser}

    def create_game_master(self, experiment, player_models):
        return Taboo(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return TabooScorer(self.game_name, experiment, game_instance)
