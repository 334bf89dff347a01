"""double_consultancy (NYU's conversion of single consultancy): Consultant A argues for answer A, Consultant B for
answer B, about a passage only they can see. The judge questions each of them in a session of its own (`questions`
questions each, every one answered in a further speech): neither consultant sees the other's session, and the
questions to one are asked without the other's answers in view. Then the judge reads both sessions, speeches and
questions, and ends with `Verdict: A|B <probability>`.

Seats: Consultant A (player 1), Consultant B, Judge. The judge's seat model plays three players: "Questioner A"
and "Questioner B" (one conversation per session, their own memory each) and "Judge" (the verdict, a fresh
conversation that reads both sessions). Main Score as debate (experiment key main_score): judge_correct
(validation) = 100 if the judge picks the correct answer, player_1_preference (train split) = 100 x the judge's
probability for answer A; scores per consultant as debate's per debater. See ../debate/README.md.
"""
from pathlib import Path

from clemcore.clemgame import GameBenchmark

from playpen.games.debate import protocol as pr
from playpen.games.debate.game import AdvocacyGame, AdvocacyScorer, Advocate, Judge, Turn

RESOURCES = Path(__file__).parent / "resources"
QUESTIONERS = {"A": "QA", "B": "QB"}  # who questions each consultant


def schedule(protocol: pr.Protocol) -> list[Turn]:
    """Per round r: Consultant A speaks, then (but in the last round) its questioner asks; the same for B; then
    the verdict in a round of its own."""
    turns = []
    for r in range(protocol.questions + 1):
        for side in pr.SIDES:
            turns.append(Turn(side, r, "speech"))
            if r < protocol.questions:
                turns.append(Turn(QUESTIONERS[side], r, "question"))
    return turns + [Turn("J", protocol.questions + 1, "verdict")]


def label(speaker: str) -> str:
    return f"Consultant {speaker}"


def render_prompts(protocol: pr.Protocol, instance: dict) -> dict:
    """The players' first prompts (the instance's own *_prompt fields win over these)."""
    values = pr.item_values(instance)
    prompts = {}
    for side in pr.SIDES:
        prompts[f"consultant_{side.lower()}_prompt"] = pr.fill(
            pr.template("consultant_prompt.txt", RESOURCES), side=side, other=pr.other(side),
            max_words=protocol.max_words, scratchpad=pr.scratchpad_rule(protocol), **values)
        prompts[f"questioner_{side.lower()}_prompt"] = pr.fill(
            pr.template("questioner_prompt.txt", RESOURCES), side=side, other=pr.other(side), **values)
    prompts["judge_prompt"] = pr.fill(pr.template("judge_prompt.txt", RESOURCES), **values)
    return prompts


class DoubleConsultancy(AdvocacyGame):

    def _setup_players(self, instance):
        prompts = {**render_prompts(self.protocol, instance),
                   **{k: v for k, v in instance.items() if k.endswith("_prompt")}}
        self.schedule = schedule(self.protocol)
        self.player_1_side = "A"
        self.players_by_side = {
            "A": self.advocate(0, "A", "Consultant A"),
            "B": self.advocate(1, "B", "Consultant B", self.protocol.opponent, self.protocol.opponent_skill),
            "J": Judge(self.seat_model(2, self.protocol.judge), game_role="Judge"),
            "QA": Judge(self.seat_model(2, self.protocol.judge), game_role="Questioner A"),
            "QB": Judge(self.seat_model(2, self.protocol.judge), game_role="Questioner B")}
        for who, key in (("A", "consultant_a_prompt"), ("B", "consultant_b_prompt"), ("J", "judge_prompt"),
                         ("QA", "questioner_a_prompt"), ("QB", "questioner_b_prompt")):
            self.add_player(self.players_by_side[who], initial_prompt=prompts[key])

    def may_read(self, turn, speech):
        """The judge reads both sessions; a questioner its consultant's speeches; a consultant nothing of the
        other's."""
        return turn.who == "J" or turn.who == QUESTIONERS.get(speech.speaker)

    def questions_to(self, side: str) -> list[str]:
        return [text for who, text in self.questions if who == QUESTIONERS[side]]

    def _context(self, index):
        turn, rounds = self.schedule[index], self.protocol.questions + 1
        news = self.news_for(index)
        if turn.who == "J":
            return self._verdict_text(self.speeches)
        if turn.kind == "question":
            said = pr.render_speeches(news, rounds, label)
            return f"{said}\n\n{pr.ASK}: reply with one line 'Question: ...'."
        if turn.round == 0:
            return f"Round 1 of {rounds}: give your opening speech."
        question = self.questions_to(turn.who)[-1]
        return f"The judge asks: {question}\nRound {turn.round + 1} of {rounds}: answer the judge."

    def session(self, side: str, speeches: list[pr.Speech]) -> str:
        """One consultant's session as the judge reads it: its speeches, each question under its own header."""
        rounds, questions = self.protocol.questions + 1, self.questions_to(side)
        parts = []
        for speech in (s for s in speeches if s.speaker == side):
            parts.append(pr.render_speeches([speech], rounds, label))
            if speech.round < len(questions):
                parts.append(f"[Judge's question to Consultant {side}]\nQuestion: {questions[speech.round]}")
        return "\n\n".join(parts) or "(no speech yet)"

    def _verdict_text(self, speeches):
        sessions = "\n\n".join(f"Session with Consultant {side}:\n\n{self.session(side, speeches)}"
                               for side in pr.SIDES)
        return f"{sessions}\n\nYour verdict?"

    def _verdict_context(self, extra):
        return self._verdict_text(self.speeches + [extra])


class DoubleConsultancyScorer(AdvocacyScorer):
    speakers = ("A", "B")


class DoubleConsultancyBenchmark(GameBenchmark):
    roles = {"Consultant A": Advocate, "Consultant B": Advocate, "Judge": Judge}

    def create_game_master(self, experiment, player_models):
        return DoubleConsultancy(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return DoubleConsultancyScorer(self.game_name, experiment, game_instance)
