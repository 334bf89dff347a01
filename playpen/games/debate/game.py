"""The game-master skeleton debate and consultancy share (clemcore's DialogueGameMaster underneath): a fixed
schedule of turns, advocates' speeches read through the protocol, a judge whose last turn is a verdict, and the
scorer. Each game's master.py adds its schedule, its prompts and what each player is told at each turn.

GM notes in interactions.json (what the scorer and the tools read): "speech" {speaker, round, shown, quotes,
truncated} for every speech, "question" for a judge's question, "verdict" {side, probability, correct,
player_1_side}, and "best of n" for every choice of a best-of-N advocate (best_of_n.py).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from clemcore.backends import CustomResponseModel, HumanModel
from clemcore.clemgame import ParseError
from clemcore.clemgame.metrics import BENCH_SCORE, METRIC_ABORTED

from playpen.games.common import (ExpertModel, ExpertPlayer, PlaypenGameMaster, PlaypenGameScorer,
                                  episode_gm_events, gm_events)
from playpen.games.debate import best_of_n as bon
from playpen.games.debate import protocol as pr


@dataclass(frozen=True)
class Turn:
    who: str      # "A", "B", "C" (consultant), "J" (judge), "QA"/"QB" (double consultancy's questioners)
    round: int
    kind: str     # "speech", "question" (the judge or a questioner asks) or "verdict"


class Advocate(ExpertPlayer):
    """A debater or consultant. Expert policy: `protocol.advocate_speech` on its own prompt.

    Its random stream is drawn when the player is made, not at its first move: clemcore's Player deep copy keeps
    the model object shared, so a stream drawn later from the model would differ between the branches of a
    branched episode (the engine copies the game before the learner's reply), and a pinned expert opponent would
    play differently in each branch: preference pairs would then reward the learner for the opponent's luck."""

    def __init__(self, model, *, game_role: str | None = None, best_of_n: bon.BestOfN | None = None,
                 chooser=None):
        super().__init__(model, game_role=game_role)
        model_rng = getattr(model, "rng", None)
        if model_rng is not None:
            self._expert_rng = random.Random(model_rng.random())
        self.best_of_n = best_of_n
        self._chooser = chooser  # (texts, the advocate's view) -> index of the speech to give; set by the GM
        self._chosen = False     # the reply about to be given was chosen among candidates

    def expert_response(self, messages, rng, skill):
        prompt = messages[0]["content"]
        turn = sum(m["role"] == "assistant" for m in messages)
        return pr.advocate_speech(prompt, rng, skill, turn, "<scratchpad>" in prompt)

    # ------------------------------------------------------------ best of n (best_of_n.py)

    @property
    def candidates_per_turn(self) -> int:
        """Replies the rollout engine samples for this player per turn (it then asks `choose`)."""
        return self.best_of_n.n if self.best_of_n else 1

    @property
    def candidate_temperature(self) -> float | None:
        return self.best_of_n.temperature if self.best_of_n else None

    def choose(self, texts: list[str]) -> int:
        """The index of the candidate this advocate gives (the chooser's favourite); recorded by the GM."""
        index = self._chooser(list(texts), [dict(m) for m in self.get_perspective()])
        self._chosen = True
        return index

    def _custom_response(self, context: dict) -> str:
        if self.best_of_n is None:
            return super()._custom_response(context)
        texts = [super(Advocate, self)._custom_response(context) for _ in range(self.best_of_n.n)]
        return texts[self.choose(texts)]

    def __call__(self, context: dict, memorize: bool = True) -> str:
        inner = bon.unwrapped(self.model)
        if self.best_of_n is None or (inner is self.model and isinstance(inner, (CustomResponseModel, HumanModel))):
            return super().__call__(context, memorize)
        perspective = self.perceive_context(context, memorize=memorize)
        if isinstance(inner, CustomResponseModel):  # a best-of-n seat around an expert
            text = self._custom_response(context)
        else:
            texts = bon.sample(inner, perspective, self.best_of_n.n, self.best_of_n.temperature)
            text = texts[self.choose(texts)]
        self.perceive_response(text, memorize=memorize, metadata={
            "prompt": perspective, "response_object": {"best_of_n": self.best_of_n.n, "model": inner.name}})
        return text

    def perceive_response(self, response: str, **kwargs):
        if self.best_of_n is not None and not self._chosen:
            raise RuntimeError(f"{self.game_role} plays best of {self.best_of_n.n}, but this reply was not chosen "
                               f"among candidates (clemcore's batch runner asks models without the player): play "
                               f"best-of-n seats with clemcore's sequential runner or playpen's rollout engine")
        self._chosen = False
        return super().perceive_response(response, **kwargs)


class Judge(ExpertPlayer):
    """The judge. Programmatic policy: `protocol.judge_reply` (deterministic; it ignores skill)."""

    def expert_response(self, messages, rng, skill):
        return pr.judge_reply(messages)


class SpeechChooser:
    """An advocate's way to its game master's `choose_speech`. An object, not a closure: when the engine copies
    a game (branching), deepcopy follows an object's attributes, so the copied advocate reaches the copied game
    master, but keeps a function as it is (a closure would reach the original one)."""

    def __init__(self, game: "AdvocacyGame", who: str):
        self.game, self.who = game, who

    def __call__(self, texts: list[str], view: list[dict]) -> int:
        return self.game.choose_speech(self.who, texts, view)


class AdvocacyGame(PlaypenGameMaster):
    """Subclasses set self.schedule (list of Turn), self.players_by_side ({"A"|"B"|"C"|"J"|...: Player}) and
    self.player_1_side in `_setup_players` (advocates made with `advocate`), say what a player is told in
    `_context`, and what the judge would read if asked for its verdict now in `_verdict_context`."""

    player_1_speaker = "A"  # the speaker player 1 plays (consultancy: "C")

    def _on_setup(self, **instance):
        pr.check_instance(instance)
        self.protocol = pr.Protocol.from_experiment(self.experiment)
        self.instance = instance
        self.passage, self.correct = instance["passage"], instance["correct"]
        self.speeches: list[pr.Speech] = []
        self.questions: list[tuple[str, str]] = []  # (who asked, question)
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

    def advocate(self, index: int, who: str, role: str, pinned: str | None = None, skill: float = 1.0) -> Advocate:
        """The advocate speaking as `who` from seat `index`; best-of-N where its seat model or the experiment
        says so."""
        model = self.seat_model(index, pinned, skill)
        setting = self.protocol.best_of_n
        from_experiment = bon.BestOfN.from_setting(setting) if setting is not None else None
        if from_experiment is not None and who not in (from_experiment.seats or (self.player_1_speaker,)):
            from_experiment = None
        from_seat = model.best_of_n if isinstance(model, bon.BestOfNModel) else None
        if from_experiment and from_seat:
            raise ValueError(f"{role}: best-of-n is set twice, by the experiment and by the seat's model "
                             f"{model.name}; set it in one place")
        choice = from_experiment or from_seat
        if choice is None:
            return Advocate(model, game_role=role)
        if choice.chooser not in (bon.JUDGE, bon.PROGRAMMATIC) and not (from_seat and model.scorer):
            bon.load_callable(choice.chooser)  # a chooser that cannot be imported fails the setup, not turn 1
        return Advocate(model, game_role=role, best_of_n=choice, chooser=SpeechChooser(self, who))

    def side_of(self, who: str) -> str:
        """The answer speaker `who` argues for."""
        return self.player_1_side if who == "C" else who

    def _context(self, index: int) -> str:
        """What the player of schedule[index] is told at that turn."""
        raise NotImplementedError

    def _verdict_context(self, extra: pr.Speech) -> str:
        """What the judge would be told if asked for its verdict now, `extra` being the newest speech (without
        marking anything read)."""
        raise NotImplementedError

    def unread(self, who: str) -> list[pr.Speech]:
        """Speeches by others that `who` has not been shown yet (nothing is marked read)."""
        read = self.read.get(who, set())
        return [s for i, s in enumerate(self.speeches) if s.speaker != who and i not in read]

    # ---------------------------------------------------------------- best of n

    def choose_speech(self, who: str, texts: list[str], view: list[dict]) -> int:
        """The candidate speech `who` gives: the chooser's argmax (candidates that are no speech score nothing).
        Logged as a "best of n" note with every candidate, its score and the choice."""
        turn, advocate = self.turn, self.players_by_side[who]
        choice = advocate.best_of_n
        scorer = advocate.model.scorer if isinstance(advocate.model, bon.BestOfNModel) else None
        speeches = []
        for text in texts:
            try:
                speeches.append(pr.read_speech(text, who, turn.round, self.protocol, self.passage))
            except ValueError:
                speeches.append(None)
        side = self.side_of(who)
        if scorer is not None or choice.chooser not in (bon.JUDGE, bon.PROGRAMMATIC):
            scores = bon.call_scorer(scorer or bon.load_callable(choice.chooser), texts, view)
            scores = [score if speech is not None else None for score, speech in zip(scores, speeches)]
        else:
            scores = [None if speech is None else self.judge_preference(side, speech,
                                                                        choice.chooser == bon.PROGRAMMATIC)
                      for speech in speeches]
        index = bon.argmax(scores)
        self.log_to_self(bon.NOTE, {"speaker": who, "round": turn.round, "side": side,
                                    "chooser": choice.chooser,
                                    "prompt": view, "candidates": [{"text": t, "score": s}
                                                                   for t, s in zip(texts, scores)],
                                    "chosen": index})
        return index

    def judge_preference(self, side: str, speech: pr.Speech, programmatic: bool) -> float | None:
        """The probability the judge gives `side` after reading the episode so far with `speech` as the newest
        speech (None when its reply has no verdict line). The judge's own memory is left as it was."""
        judge = self.players_by_side["J"]
        content = self._verdict_context(speech)
        pending = self.initial_prompt_for_player.get(judge.name)
        if pending is not None:
            content = f"{pending['content']}\n\n{content}"
        messages = [{"role": m["role"], "content": m["content"]} for m in judge.get_perspective()]
        messages.append({"role": "user", "content": content})
        if programmatic or isinstance(bon.unwrapped(judge.model), CustomResponseModel):
            reply = pr.judge_reply(messages)
        else:
            reply = judge.model.generate_response(messages)[2]
        try:
            verdict = pr.parse_verdict(reply)
        except ValueError:
            verdict = None
        if verdict is None:
            return None
        picked, probability = verdict
        return probability if picked == side else 1 - probability

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
        if turn.kind == "speech":
            try:
                return pr.read_speech(response, turn.who, turn.round, self.protocol, self.passage)
            except ValueError as e:
                raise ParseError(reason=str(e), response=response) from None
        try:
            verdict = pr.parse_verdict(response)
        except ValueError as e:
            raise ParseError(reason=str(e), response=response) from None
        if verdict is not None and turn.who == "J":  # the judge may decide early; a questioner only asks
            return verdict
        if turn.kind == "question" and pr.parse_question(response):
            return pr.parse_question(response)
        wanted = ("a last line 'Verdict: A|B <p>'" if turn.kind == "verdict" else "'Question: ...' or a verdict line"
                  if turn.who == "J" else "one line 'Question: ...'")
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
            self.questions.append((self.turn.who, parsed))
        next_turn = self.schedule[self.turn_index + 1]
        self.set_context_for(self.players_by_side[next_turn.who], self._context(self.turn_index + 1))

    def may_read(self, turn: Turn, speech: pr.Speech) -> bool:
        """Whether the player of `turn` may read `speech` (someone else's) by now: the judge reads all; an advocate
        its opponent's from earlier rounds, and from this round when the round is sequential (the opponent spoke
        first)."""
        sequential = (self.protocol.openings if speech.round == 0 else self.protocol.rebuttals) == "sequential"
        return turn.who == "J" or speech.round < turn.round or sequential

    def news_for(self, index: int) -> list[pr.Speech]:
        """Speeches the player of schedule[index] may read now and has not read yet (`may_read`). Marks them as
        read."""
        turn = self.schedule[index]
        read = self.read.setdefault(turn.who, set())
        news = []
        for i, speech in enumerate(self.speeches):
            if speech.speaker == turn.who or i in read:
                continue
            if self.may_read(turn, speech):
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
