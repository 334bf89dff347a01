"""wordle: one player guesses a secret 5-letter word in at most 6 tries; the game master answers with
per-letter feedback (clembench's `h<yellow> o<green> u<red> ...`).

Main Score as clembench: 100 for a win in 1-3 guesses, 50/30/20 for 4/5/6, 0 on a loss, NaN when aborted
(a response that is not one `GUESS: <word>` line, or a guess that is not 5 letters).
Guesses are not checked against a dictionary: any 5 letters are a move, the feedback says how good it was.
"""
import re
from collections import Counter
from pathlib import Path

from clemcore.clemgame import GameBenchmark, RuleViolationError

from playpen.games.common import (ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer, episode_gm_events,
                                  gm_events, read_lines, tagged_line)

MAX_GUESSES = 6
WORD_LENGTH = 5
SCORE_BY_GUESSES = {1: 100, 2: 100, 3: 100, 4: 50, 5: 30, 6: 20}
WORDS = read_lines(Path(__file__).parent / "resources" / "words.txt")
FEEDBACK_MARK = re.compile(r"([a-z])<(green|yellow|red)>")


def letter_marks(guess: str, target: str) -> list[str]:
    """Wordle colours; a repeated letter is yellow only as often as the target has it unmatched."""
    marks = ["red"] * WORD_LENGTH
    unmatched = Counter()
    for i, (g, t) in enumerate(zip(guess, target)):
        if g == t:
            marks[i] = "green"
        else:
            unmatched[t] += 1
    for i, g in enumerate(guess):
        if marks[i] != "green" and unmatched[g] > 0:
            marks[i] = "yellow"
            unmatched[g] -= 1
    return marks


def render_feedback(guess: str, marks: list[str]) -> str:
    return " ".join(f"{letter}<{mark}>" for letter, mark in zip(guess, marks))


def parse_guess(response: str) -> str:
    return tagged_line(response, "GUESS").lower().strip(" .!\"'")


class WordGuesser(ExpertPlayer):
    """Expert: a random word from the vocabulary that is consistent with the hint and all feedback so far
    (with probability `skill`; otherwise any word not guessed yet)."""

    def expert_response(self, messages, rng, skill):
        prompt = messages[0]["content"]
        starts = re.search(r"starts with '([a-z])'", prompt)
        ends = re.search(r"ends with '([a-z])'", prompt)
        history = []  # (guess, observed marks)
        for answer, reply in zip(messages[1::2], messages[2::2]):
            history.append((parse_guess(answer["content"]), [m for _, m in FEEDBACK_MARK.findall(reply["content"])]))

        def consistent(word: str) -> bool:
            return ((not starts or word[0] == starts.group(1)) and (not ends or word[-1] == ends.group(1))
                    and all(letter_marks(guess, word) == marks for guess, marks in history))

        guessed = {guess for guess, _ in history}
        candidates = [w for w in WORDS if w not in guessed and consistent(w)]
        if not candidates or rng.random() >= skill:
            candidates = [w for w in WORDS if w not in guessed] or WORDS
        return f"GUESS: {rng.choice(candidates)}"


class Wordle(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.target = game_instance["target_word"]
        self.guesses: list[str] = []
        self.guesser = WordGuesser(self.player_models[0], game_role="Word Guesser")
        self.add_player(self.guesser, initial_context=game_instance["prompt"])

    def _parse_response(self, player, response: str) -> str:
        return parse_guess(response)  # raises ParseError

    def _advance_game(self, player, guess: str):
        if not re.fullmatch(rf"[a-z]{{{WORD_LENGTH}}}", guess):
            raise RuleViolationError(reason=f"the guess must be one word of {WORD_LENGTH} letters", response=guess)
        self.guesses.append(guess)
        feedback = render_feedback(guess, letter_marks(guess, self.target))
        self.log_to_self("guess", guess)
        self.log_to_self("feedback", feedback)
        if guess == self.target:
            self.log_to_self("correct guess", "end game")
            self.state.succeed()
        elif len(self.guesses) >= MAX_GUESSES:
            self.log_to_self("max guesses reached", "end game")
            self.state.failed()
        else:
            self.set_context_for(self.guesser, f"FEEDBACK: {feedback}")


class WordleScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        for feedback in gm_events(round_events, "feedback"):
            marks = [m for _, m in FEEDBACK_MARK.findall(feedback)]
            # clembench's closeness: 5 per green letter, 3 per yellow one
            self.log_round_score(round_idx, "closeness score", 5 * marks.count("green") + 3 * marks.count("yellow"))

    def success_score(self, interactions):
        return SCORE_BY_GUESSES[len(episode_gm_events(interactions, "guess"))]

    def compute_episode_scores(self, interactions):
        super().compute_episode_scores(interactions)
        guesses = [guess for _, guess in episode_gm_events(interactions, "guess")]
        repetitions = len(guesses) - len(set(guesses))
        aborted = bool(interactions["Aborted"])
        self.log_episode_score("repeats guess", float("nan") if aborted else int(repetitions > 0))
        self.log_episode_score("total guess repetitions", float("nan") if aborted else repetitions)


class WordleBenchmark(GameBenchmark):
    roles = {"Word Guesser": WordGuesser}

    def create_game_master(self, experiment, player_models):
        return Wordle(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return WordleScorer(self.game_name, experiment, game_instance)
