"""knownanswer: the GRPO known-answer test game (tests/test_grpo_correctness.py). One reply, `Answer: <word>`;
Main Score 100 when the word is the instance's `pays` and 0 for anything else (never an abort: the reward is 1/0).
With `pays: "coin"` the score is a coin flip independent of the reply: the negative control, whose groups vary
as much as the real game's but whose reward says nothing about the answer."""
import random
import re

from clemcore.clemgame import GameBenchmark, Player

from playpen.games.common import PlaypenGameMaster, PlaypenGameScorer

COIN = random.Random(0)  # one stream per process: episodes get independent flips


class Chooser(Player):
    def _custom_response(self, context):
        return "Answer: first"


class KnownAnswer(PlaypenGameMaster):

    def _on_setup(self, **game_instance):
        self.pays = game_instance["pays"]
        self.chooser = Chooser(self.player_models[0], game_role="Chooser")
        self.add_player(self.chooser, initial_context=game_instance["prompt"])

    def _parse_response(self, player, response: str) -> str:
        match = re.match(r"\s*answer\s*:\s*(\w+)", response, flags=re.IGNORECASE)
        return match.group(1).lower() if match else ""

    def _advance_game(self, player, answer: str):
        self.log_to_self("answer", answer)
        won = COIN.random() < 0.5 if self.pays == "coin" else answer == self.pays
        if won:
            self.state.succeed()
        else:
            self.state.failed()


class KnownAnswerScorer(PlaypenGameScorer):

    def compute_round_score(self, round_idx, round_events):
        pass


class KnownAnswerBenchmark(GameBenchmark):

    def create_game_master(self, experiment, player_models):
        return KnownAnswer(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return KnownAnswerScorer(self.game_name, experiment, game_instance)
