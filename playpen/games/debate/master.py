"""debate (NYU-style debate on reading comprehension): Debater A and Debater B argue for answers A and B to a
question about a passage only they can see; a judge who cannot see it reads their speeches (quotes marked as
verified or not) and ends with `Verdict: A|B <probability>`.

Turns: `rounds` rounds of one speech per debater (A, then B): openings `simultaneous` (B does not see A's opening
before its own) or `sequential`, rebuttals likewise (default sequential); then the judge's verdict in a round of
its own. Main Score (experiment key main_score): judge_correct (validation, default) = 100 if the judge picks the
correct answer, else 0; player_1_preference (train split) = 100 x the judge's probability for answer A, Debater
A's side, the preference a learner seated as Debater A is trained on. NaN when aborted (an empty speech, a judge
reply without a verdict line). See protocol.py and README.md.
"""
from clemcore.clemgame import GameBenchmark

from playpen.games.debate import protocol as pr
from playpen.games.debate.game import AdvocacyGame, AdvocacyScorer, Advocate, Judge, Turn


def schedule(protocol: pr.Protocol) -> list[Turn]:
    speeches = [Turn(side, r, "speech") for r in range(protocol.rounds) for side in pr.SIDES]
    return speeches + [Turn("J", protocol.rounds, "verdict")]


def render_prompts(protocol: pr.Protocol, instance: dict) -> dict:
    """The players' first prompts (the instance's own *_prompt fields win over these)."""
    values = pr.item_values(instance)
    rounds = f"{protocol.rounds} speech{'es' if protocol.rounds > 1 else ''}"
    prompts = {f"debater_{side.lower()}_prompt": pr.fill(
        pr.template("debater_prompt.txt"), side=side, other=pr.other(side), rounds=rounds,
        max_words=protocol.max_words, scratchpad=pr.scratchpad_rule(protocol), **values) for side in pr.SIDES}
    prompts["judge_prompt"] = pr.fill(pr.template("judge_prompt.txt"), **values)
    return prompts


class Debate(AdvocacyGame):

    def _setup_players(self, instance):
        prompts = {**render_prompts(self.protocol, instance),
                   **{k: v for k, v in instance.items() if k.endswith("_prompt")}}
        self.schedule = schedule(self.protocol)
        self.player_1_side = "A"
        self.players_by_side = {
            "A": self.advocate(0, "A", "Debater A"),
            "B": self.advocate(1, "B", "Debater B", self.protocol.opponent, self.protocol.opponent_skill),
            "J": Judge(self.seat_model(2, self.protocol.judge), game_role="Judge")}
        for who, key in (("A", "debater_a_prompt"), ("B", "debater_b_prompt"), ("J", "judge_prompt")):
            self.add_player(self.players_by_side[who], initial_prompt=prompts[key])

    def _context(self, index):
        turn, news = self.schedule[index], self.news_for(index)
        if turn.who == "J":
            return self._verdict_text(news)
        what = "opening speech" if turn.round == 0 else "rebuttal"
        said = pr.render_speeches(news, self.protocol.rounds) + "\n\n" if news else ""
        return f"{said}Round {turn.round + 1} of {self.protocol.rounds}: give your {what}."


    def _verdict_text(self, speeches):
        return f"The debate:\n\n{pr.render_speeches(speeches, self.protocol.rounds)}\n\nYour verdict?"

    def _verdict_context(self, extra):
        return self._verdict_text(self.unread("J") + [extra])


class DebateScorer(AdvocacyScorer):
    speakers = ("A", "B")


class DebateBenchmark(GameBenchmark):
    roles = {"Debater A": Advocate, "Debater B": Advocate, "Judge": Judge}

    def create_game_master(self, experiment, player_models):
        return Debate(self.game_spec, experiment, player_models)

    def create_game_scorer(self, experiment, game_instance):
        return DebateScorer(self.game_name, experiment, game_instance)
