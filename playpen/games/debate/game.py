"""The game-master skeleton debate and consultancy share (clemcore's DialogueGameMaster underneath): a fixed
schedule of turns, advocates' speeches read through the protocol, a judge whose last turn is a verdict, and the
scorer. Each game's master.py adds its schedule, its prompts and what each player is told at each turn.

GM notes in interactions.json (what the scorer and the tools read): "speech" {speaker, round, shown, quotes,
truncated} for every speech, "question" for a judge's question, "verdict" {side, probability, correct,
player_1_side}.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from clemcore.clemgame import ParseError
from clemcore.clemgame.metrics import BENCH_SCORE, METRIC_ABORTED

from playpen.games.common import (ExpertModel, ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer,
                                  episode_gm_events, gm_events)
from playpen.games.debate import protocol as pr


@dataclass(frozen=True)
class Turn:
    who: str      # "A", "B", "C" (consultant) or "J" (judge)
    round: int
    kind: str     # "speech", "question" (the judge asks) or "verdict"


class Advocate(ExpertPlayer):
    """A debater or consultant. Expert policy: `protocol.advocate_speech` on its own prompt.

    Its random stream is drawn when the player is made, not at its first move: clemcore's Player deep copy keeps
    the model object shared, so a stream drawn later from the model would differ between the branches of a
    branched episode (the engine copies the game before the learner's reply), and a pinned expert opponent would
    play differently in each branch: preference pairs would then reward the learner for the opponent's luck."""

    def __init__(self, model, *, game_role: str | None = None):
        super().__init__(model, game_role=game_role)
        model_rng = getattr(model, "rng", None)
        if model_rng is not None:
            self._expert_rng = random.Random(model_rng.random())

    def expert_response(self, messages, rng, skill):
        prompt = messages[0]["content"]
        turn = sum(m["role"] == "assistant" for m in messages)
        return pr.advocate_speech(prompt, rng, skill, turn, "<scratchpad>" in prompt)


class Judge(ExpertPlayer):
    """The judge. Programmatic policy: `protocol.judge_reply` (deterministic; it ignores skill)."""

    def expert_response(self, messages, rng, skill):
        return pr.judge_reply(messages)


class AdvocacyGame(PlaypenGameMaster):
    """Subclasses set self.schedule (list of Turn), self.players_by_side ({"A"|"B"|"C"|"J": Player}) and
    self.player_1_side in `_setup_players`, and say what a player is told in `_context`."""

    def _on_setup(self, **instance):
        pr.check_instance(instance)
        self.protocol = pr.Protocol.from_experiment(self.experiment)
        self.instance = instance
        self.passage, self.correct = instance["passage"], instance["correct"]
        self.speeches: list[pr.Speech] = []
        self.questions: list[str] = []
        self.verdict: tuple[str, float] | None = None  # (side, probability) once the judge has decided
        self.read: dict[str, set[int]] = {}  # speeches each player has been shown (indices into self.speeches)
        self.turn_index = 0
        self._setup_players(instance)

    def _setup_players(self, instance: dict):
        raise NotImplementedError

    def seat_model(self, index: int, pinned: str | None, skill: float = 1.0):
        """The model of seat `index`: the one given, or a programmatic expert when the experiment pins the seat
        (its records then say "programmatic": a pinned seat is never a learner). Seeded by the instance, so every
        branch of an episode meets the same expert."""
        if not pinned:
            return self.player_models[index]
        return ExpertModel(skill=skill, seed=int(self.instance.get("game_id") or 0))

    def _context(self, index: int) -> str:
        """What the player of schedule[index] is told at that turn."""
        raise NotImplementedError

    @property
    def turn(self) -> Turn:
        return self.schedule[self.turn_index]

    def _on_before_game(self):
        self.set_context_for(self.players_by_side[self.turn.who], self._context(0))

    # clemcore's turn taking, driven by the schedule
    def _should_pass_turn(self):
        return not self.state.outcome.is_terminal

    def _next_player(self):
        self.turn_index += 1
        return self.players_by_side[self.turn.who]

    def _start_next_round(self):
        return (not self.state.outcome.is_terminal and self.turn_index > 0
                and self.schedule[self.turn_index].round != self.schedule[self.turn_index - 1].round)

    def _parse_response(self, player, response: str):
        turn = self.turn
        if turn.who != "J":
            try:
                return pr.read_speech(response, turn.who, turn.round, self.protocol, self.passage)
            except ValueError as e:
                raise ParseError(reason=str(e), response=response) from None
        try:
            verdict = pr.parse_verdict(response)
        except ValueError as e:
            raise ParseError(reason=str(e), response=response) from None
        if verdict is not None:
            return verdict
        if turn.kind == "question" and pr.parse_question(response):
            return pr.parse_question(response)
        wanted = "'Question: ...' or a verdict line" if turn.kind == "question" else "a last line 'Verdict: A|B <p>'"
        raise ParseError(reason=f"expected {wanted}", response=response)

    def _advance_game(self, player, parsed):
        if isinstance(parsed, pr.Speech):
            self.speeches.append(parsed)
            self.log_to_self("speech", parsed.log())
        elif isinstance(parsed, tuple):
            side, probability = self.verdict = parsed
            self.log_to_self("verdict", {"side": side, "probability": probability, "correct": self.correct,
                                         "player_1_side": self.player_1_side})
            won = side == (self.correct if self.protocol.main_score == "judge_correct" else self.player_1_side)
            self.state.succeed() if won else self.state.failed()
            return
        else:
            self.log_to_self("question", parsed)
            self.questions.append(parsed)
        next_turn = self.schedule[self.turn_index + 1]
        self.set_context_for(self.players_by_side[next_turn.who], self._context(self.turn_index + 1))

    def news_for(self, index: int) -> list[pr.Speech]:
        """Speeches the player of schedule[index] may read now and has not read yet: its opponent's from earlier
        rounds, and from this round when the round is sequential (the opponent spoke first); the judge reads all.
        Marks them as read."""
        turn = self.schedule[index]
        read = self.read.setdefault(turn.who, set())
        news = []
        for i, speech in enumerate(self.speeches):
            if speech.speaker == turn.who or i in read:
                continue
            sequential = (self.protocol.openings if speech.round == 0 else self.protocol.rebuttals) == "sequential"
            if turn.who == "J" or speech.round < turn.round or sequential:
                news.append(speech)
                read.add(i)
        return news


class AdvocacyScorer(PlaypenGameScorer):
    """Main Score: `judge_correct` (default): 100 if the judge picks the correct answer, else 0;
    `player_1_preference`: 100 x the judge's probability for the answer player 1 argues for. NaN when aborted.
    Episode scores also: Judge Correct, Judge Probability Correct, Player 1 Wins, Correct Is A, and per advocate
    Quotes / Verified Quotes / Quote Precision (NaN without quotes). Round scores: Quotes, Verified Quotes."""

    speakers: tuple[str, ...] = ("A", "B")

    def compute_round_score(self, round_idx, round_events):
        speeches = gm_events(round_events, "speech")
        if speeches:
            quotes = [q for s in speeches for q in s["quotes"]]
            self.log_round_score(round_idx, "Quotes", len(quotes))
            self.log_round_score(round_idx, "Verified Quotes", sum(q["verified"] for q in quotes))

    def compute_episode_scores(self, interactions):
        verdicts = [v for _, v in episode_gm_events(interactions, "verdict")]
        played = not interactions[METRIC_ABORTED] and verdicts
        nan = float("nan")
        if played:
            v = verdicts[-1]
            right = v["side"] == v["correct"]
            p_correct = v["probability"] if right else 1 - v["probability"]
            p_player_1 = v["probability"] if v["side"] == v["player_1_side"] else 1 - v["probability"]
            main = 100.0 * (right if self.experiment.get("main_score", "judge_correct") == "judge_correct"
                            else p_player_1)
        else:
            right = p_correct = p_player_1 = main = nan
        self.log_episode_score(BENCH_SCORE, main)
        self.log_episode_score("Judge Correct", nan if not played else int(right))
        self.log_episode_score("Judge Probability Correct", p_correct)
        self.log_episode_score("Player 1 Wins", nan if not played else
                               int(verdicts[-1]["side"] == verdicts[-1]["player_1_side"]))
        self.log_episode_score("Correct Is A", int(self.game_instance.get("correct") == "A"))
        speeches = [s for _, s in episode_gm_events(interactions, "speech")]
        for who in self.speakers:
            quotes = [q for s in speeches if s["speaker"] == who for q in s["quotes"]]
            verified = sum(q["verified"] for q in quotes)
            suffix = "" if len(self.speakers) == 1 else f" {who}"
            self.log_episode_score(f"Quotes{suffix}", len(quotes))
            self.log_episode_score(f"Verified Quotes{suffix}", verified)
            self.log_episode_score(f"Quote Precision{suffix}", verified / len(quotes) if quotes else nan)
