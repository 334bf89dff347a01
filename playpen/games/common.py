"""What the built-in games share: outcome logging, the scorer skeleton, and programmatic expert players.

Each game's master.py imports from here. clemcore loads master.py as a free-standing module (not as
`playpen.games.<name>.master`), so everything a game needs at play or scoring time lives in this module, its own
folder, or clemcore.

Expert players: every role class of a built-in game is an `ExpertPlayer`. With a learned model behind it, it is
an ordinary clemcore Player. With a programmatic model (clemcore's `CustomResponseModel`, e.g. `-m mock`, or this
module's `ExpertModel`) clemcore calls its `_custom_response`, which plays the game's expert policy. The policy
sees only what the role sees (its own dialogue history), so an expert can partner a learner anywhere.
"""
import random
import re
from pathlib import Path

from clemcore.backends import CustomResponseModel, ModelSpec
from clemcore.clemgame import DialogueGameMaster, GameScorer, Player
from clemcore.clemgame.errors import GameError, ParseError
from clemcore.clemgame.master import Outcome
from clemcore.clemgame.metrics import BENCH_SCORE, METRIC_ABORTED, METRIC_LOSE, METRIC_SUCCESS

PROGRAMMATIC = "programmatic"  # clemcore's name for non-learning players; records show it as the model name


class ExpertModel(CustomResponseModel):
    """A programmatic model whose players answer with their game's expert policy.

    `skill` in [0, 1] is the probability of the expert's best move at each decision (the rest are plausible but
    weaker moves, never rule breaks), `seed` makes its choices reproducible. Named "programmatic" like clemcore's
    own CustomResponseModel, so records never count it as a learner.
    """

    def __init__(self, skill: float = 1.0, seed: int = 0):
        super().__init__(ModelSpec(model_name=PROGRAMMATIC))
        self.skill = skill
        self.rng = random.Random(seed)


class ExpertPlayer(Player):
    """A game role whose programmatic response is an expert policy over the role's own dialogue history."""

    def __init__(self, model, *, game_role: str | None = None):
        super().__init__(model, game_role=game_role)
        self._expert_rng: random.Random | None = None

    def _custom_response(self, context: dict) -> str:
        if self._expert_rng is None:
            # one stream per player drawn from the model's, so two experts in one episode don't mirror each other
            model_rng = getattr(self.model, "rng", None)
            self._expert_rng = random.Random(model_rng.random() if model_rng else 0)
        messages = self.get_perspective()
        if not messages or messages[-1]["role"] != "user":  # the context was not memorized (memorize=False)
            messages = messages + [context]
        return self.expert_response(messages, self._expert_rng, getattr(self.model, "skill", 1.0))

    def expert_response(self, messages: list[dict], rng: random.Random, skill: float) -> str:
        """The expert's next message given the dialogue so far (user/assistant turns, a user message last)."""
        raise NotImplementedError


class PlaypenGameMaster(DialogueGameMaster):
    """DialogueGameMaster with the playpen convention: any malformed response or rule break aborts the episode,
    and the outcome is logged under clemcore's metric names so that GameScorer (and `clem score`) can read it."""

    def _on_parse_error(self, error: ParseError):
        self.log_to_self("invalid format", error.reason)
        self.state.abort()

    def _on_game_error(self, error: GameError):
        self.log_to_self("rule violation", error.reason)
        self.state.abort()

    def _on_after_game(self):
        outcome = self.state.outcome
        self.log_to_self("game end", outcome.value)
        self.log_key(METRIC_ABORTED, int(outcome is Outcome.ABORTED))
        self.log_key(METRIC_LOSE, int(outcome is Outcome.FAILURE))
        self.log_key(METRIC_SUCCESS, int(outcome is Outcome.SUCCESS))


class PlaypenGameScorer(GameScorer):
    """Main Score is NaN when aborted, 0 when lost, and `success_score` when won (clembench's convention)."""

    def success_score(self, interactions: dict) -> float:
        return 100.0

    def compute_episode_scores(self, interactions: dict):
        if interactions[METRIC_ABORTED]:
            main_score = float("nan")
        elif interactions[METRIC_SUCCESS]:
            main_score = self.success_score(interactions)
        else:
            main_score = 0.0
        self.log_episode_score(BENCH_SCORE, main_score)


def gm_events(round_events: list[dict], event_type: str) -> list:
    """Contents of the game master's notes to itself (log_to_self) of one type within a round."""
    return [e["action"]["content"] for e in round_events
            if e["from"] == "GM" and e["to"] == "GM" and e["action"]["type"] == event_type]


def episode_gm_events(interactions: dict, event_type: str) -> list[tuple[int, object]]:
    """(round index, content) of every GM note of one type in the episode."""
    return [(i, content) for i, events in enumerate(interactions["turns"])
            for content in gm_events(events, event_type)]


def tagged_line(response: str, tag: str) -> str:
    """The text after `TAG:` in a one-line response; anything else is a format error.

    Case-insensitive on the tag and tolerant of surrounding whitespace, strict otherwise: a model that adds chatter
    around its move has not followed the protocol (clembench aborts such episodes too).
    """
    text = response.strip()
    match = re.fullmatch(rf"{re.escape(tag)}\s*:\s*(.+)", text, flags=re.IGNORECASE)
    if match is None or "\n" in text:
        raise ParseError(reason=f"expected one line '{tag}: ...'", response=response)
    return match.group(1).strip()


def read_lines(path: Path) -> list[str]:
    """Non-empty, non-comment lines of a small resource file."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
