"""numberguess: the player guesses a secret whole number in a range; the game master answers each `GUESS: n` with
"Higher." or "Lower." until the guess is right or the guesses run out. Winning needs the other side's feedback: a
player that ignores it is a random guesser.

Main Score: 100 for finding the number, 0 when the guesses run out, NaN when aborted (a reply that is not one
`GUESS: <whole number>` line). Episode scores beside it: `Guesses` (turns used) and `Feedback Consistency`, the
share of guesses inside the interval that the range and every earlier answer leave open (a guess outside it, or a
repeat, throws information away). The expert is binary search over its own dialogue history, so it wins every
instance whose range has at most 2**max_guesses - 1 numbers.
"""
import re

from clemcore.clemgame import GameBenchmark, ParseError

from playpen.games.common import ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer, episode_gm_events, tagged_line

HIGHER, LOWER, CORRECT = "Higher.", "Lower.", "Correct!"
RANGE = re.compile(r"from (-?\d+) to (-?\d+)")


def parse_guess(response: str) -> int:
    text = tagged_line(response, "GUESS").rstrip(".")
    if not re.fullmatch(r"-?\d+", text):
        raise ParseError(reason="the guess must be a whole number", response=response)
    return int(text)


def open_interval(lo: int, hi: int, history: list[tuple[int, str]]) -> tuple[int, int]:
    """The numbers still possible after the answers so far: [lo, hi] narrowed by each (guess, answer)."""
    for guess, answer in history:
        if answer == HIGHER:
            lo = max(lo, guess + 1)
        elif answer == LOWER:
            hi = min(hi, guess - 1)
    return lo, hi


def consistency(lo: int, hi: int, guesses: list[int], answers: list[str]) -> float:
    """Share of guesses inside the interval the range and every earlier answer leave open."""
    inside = 0
    for k, guess in enumerate(guesses):
        low, high = open_interval(lo, hi, list(zip(guesses[:k], answers[:k])))
        inside += low <= guess <= high
    return inside / len(guesses) if guesses else float("nan")


def read_dialogue(messages: list[dict]) -> tuple[int, int, list[tuple[int, str]]]:
    """(lo, hi, [(guess, answer), ...]) from the guesser's own view of the dialogue."""
    lo, hi = map(int, RANGE.search(messages[0]["content"]).groups())
    history = [(parse_guess(reply["content"]), answer["content"].strip())
               for reply, answer in zip(messages[1::2], messages[2::2])]
    return lo, hi, history


class Guesser(ExpertPlayer):
    """Expert: the midpoint of the numbers still possible (binary search); with probability 1 - skill, any number
    still possible instead."""

    def expert_response(self, messages, rng, skill):
        lo, hi, history = read_dialogue(messages)
        low, high = open_interval(lo, hi, history)
        if low > high:  # the answers contradict each other (they never do in this game); stay in range
            low, high = lo, hi
        guess = (low + high) // 2 if rng.random() < skill else rng.randint(low, high)
        return f"GUESS: {guess}"


class NumberGuess(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.secret = game_instance["secret"]
        self.max_guesses = game_instance["max_guesses"]
        self.guesses: list[int] = []
        self.guesser = Guesser(self.player_models[0], game_role="Guesser")
        self.add_player(self.guesser, initial_context=game_instance["prompt"])

    def _parse_response(self, player, response: str) -> int:
        return parse_guess(response)

    def _advance_game(self, player, guess: int):
        self.guesses.append(guess)
        self.log_to_self("guess", guess)
        if guess == self.secret:
            self.log_to_self("answer", CORRECT)
            self.state.succeed()
            return
        answer = HIGHER if self.secret > guess else LOWER
        self.log_to_self("answer", answer)
        if len(self.guesses) >= self.max_guesses:
            self.log_to_self("max guesses reached", "end game")
            self.state.failed()
        else:
            self.set_context_for(self.guesser, answer)


class NumberGuessScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        pass  # one guess per round; the episode scores say everything

    def compute_episode_scores(self, interactions):
        super().compute_episode_scores(interactions)
        aborted = bool(interactions["Aborted"])
        guesses = [g for _, g in episode_gm_events(interactions, "guess")]
        answers = [a for _, a in episode_gm_events(interactions, "answer")]
        instance = self.game_instance
        self.log_episode_score("Guesses", float("nan") if aborted else len(guesses))
        self.log_episode_score("Feedback Consistency", float("nan") if aborted or not guesses else
                               consistency(instance["lo"], instance["hi"], guesses, answers))


class NumberGuessBenchmark(GameBenchmark):
    roles = {"Guesser": Guesser}

    def create_game_master(self, experiment, player_models):
        return NumberGuess(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return NumberGuessScorer(self.game_name, experiment, game_instance)
