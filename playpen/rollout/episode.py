"""What a rollout returns: `Episode`, and the token-level trace of one learner seat (`Trace`).

Invariant (tested): for every trace,

    prompt_ids + completion_ids == tokenizer(render(messages)).input_ids   as text:
    tokenizer.decode(prompt_ids + completion_ids) == apply_chat_template(messages, tokenize=False)

where `messages` holds the learner's replies exactly as generated (decoded without the stop token, before the
`.strip()` the game master gets). The ids are the tokens the model actually saw and sampled, so they also equal
`apply_chat_template(messages, tokenize=True)` whenever each reply's sampled tokens are the tokenizer's own
encoding of its text (true for almost all replies; a model may sample a non-canonical split of the same text).
After the last reply the template's end-of-turn text is appended as environment tokens (mask 0).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

from clemcore.backends.utils import ensure_alternating_roles

from playpen.games.scores import main_score
from playpen.rollout.generation import Generated, Sequence
from playpen.rollout.policy import LocalPolicy

GAME_ENDED_CONTEXT = {"role": "user", "content": "The game ended before your turn."}  # clemcore's own wording


@dataclass
class Trace:
    """One learner seat's conversation and tokens in one episode."""
    player: str  # clemcore player name, e.g. "Player 1"
    role: str  # game role, e.g. "Guesser"
    messages: list[dict]
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    learner_turns: int
    segments: int = 1  # > 1 only if the game rewrote the player's history; fields then hold the first segment
    cut_replies: int = 0  # replies that hit max_new_tokens instead of ending with a stop token


@dataclass
class BranchInfo:
    root: str  # uid of the episode the branch was split from (its own uid for the root)
    turn: int  # learner turn (0-based, of the traced seat) at which the branches diverge
    index: int  # 0 = the root's own continuation


@dataclass
class Episode:
    game: str
    experiment: str
    game_id: int
    group_index: int
    messages: list[dict]  # the (first) learner seat's conversation, user/assistant alternating
    prompt_ids: list[int]  # first learner prompt, chat template applied with generation prompt
    completion_ids: list[int]  # everything after it: learner replies and later environment/partner messages
    env_mask: list[int]  # 1 = sampled by the learner, 0 = environment/partner/template tokens
    logprobs: list[float]  # sampling logprob of learner tokens (log_softmax(logits / T); T = 1 when greedy)
    episode_scores: dict  # clemcore's scorer output (Main Score, Success, Lose, Aborted, Request Count, ...)
    reward: float  # Main Score / 100 if played, 0 on loss, -1 if aborted
    aborted: bool
    success: bool
    num_turns: int  # game rounds played (clemcore's round_count)
    record_path: Path | None = None
    # beyond the contract
    uid: str = ""
    learner_turns: int = 0  # replies sampled by the traced learner seat
    player: str = ""
    role: str = ""
    traces: list[Trace] = field(default_factory=list)  # every learner seat (both seats in 2-player self-play)
    turn_scores: dict = field(default_factory=dict)  # clemcore's "round scores"
    step_infos: list[dict] = field(default_factory=list)  # what GameMaster.step returned each step
    interactions: dict = field(default_factory=dict)  # clemcore's interactions record
    instance: dict = field(default_factory=dict)
    branch: BranchInfo | None = None
    error: str | None = None  # set when the game crashed or the context window ran out (aborted, reward -1)

    @property
    def main_score(self) -> float:
        return main_score(self.episode_scores)


def reward_from(scores: dict) -> tuple[float, bool, bool]:
    aborted = bool(scores.get("Aborted", 0))
    success = bool(scores.get("Success", 0))
    if aborted:
        return -1.0, True, success
    main = main_score(scores)
    return (0.0 if math.isnan(main) else main / 100.0), False, success


def _plain(messages: list[dict]) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class Conversation:
    """Builds one learner seat's token trace turn by turn, keeping the `Sequence` the generator extends."""

    def __init__(self, policy: LocalPolicy, player: str, role: str):
        self.policy, self.player, self.role = policy, player, role
        self.seq: Sequence | None = None
        self.prompt_len = 0
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.messages: list[dict] = []  # replies as generated
        self.clean: list[dict] = []  # the same conversation as the player's memory holds it (replies stripped)
        self.turns = 0
        self.last_stopped = False
        self.cut_replies = 0
        self.closed: list[Trace] = []  # earlier segments, if the game rewrote the history
        self.finished = False

    def copy(self) -> "Conversation":
        other = copy.copy(self)
        other.seq = self.seq.copy() if self.seq is not None else None
        other.mask, other.logprobs = list(self.mask), list(self.logprobs)
        other.messages, other.clean = copy.deepcopy(self.messages), copy.deepcopy(self.clean)
        other.closed = list(self.closed)
        return other

    def _env(self, ids: list[int]) -> None:
        self.seq.ids.extend(ids)
        self.mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def prepare(self, perspective: list[dict]) -> Sequence:
        """Take the player's view before a reply; append what is new to the token sequence."""
        msgs = ensure_alternating_roles(_plain(perspective))  # plain first: clemcore deep-copies what it gets
        n = len(self.clean)
        if self.seq is not None and len(msgs) == n + 1 and msgs[:n] == self.clean and msgs[-1]["role"] == "user":
            suffix = self.policy.suffix_after_reply(self.messages, msgs[-1], self.last_stopped)
            self._env(self.policy.encode(suffix))
            self.messages.append(msgs[-1])
            self.clean.append(msgs[-1])
            return self.seq
        if self.seq is not None:  # not a continuation of what the model saw: start a new segment
            self.closed.append(self._trace())
            self.mask, self.logprobs = [], []
        ids = self.policy.encode(self.policy.render(msgs, add_generation_prompt=True))
        self.seq = Sequence(ids)
        self.prompt_len = len(ids)
        self.messages, self.clean = copy.deepcopy(msgs), copy.deepcopy(msgs)
        return self.seq

    def add_reply(self, out: Generated, raw_text: str, clean_text: str) -> None:
        self.mask.extend([1] * len(out.ids))
        self.logprobs.extend(out.logprobs)
        self.messages.append({"role": "assistant", "content": raw_text})
        self.clean.append({"role": "assistant", "content": clean_text})
        self.last_stopped = out.stopped
        self.cut_replies += not out.stopped
        self.turns += 1

    def finish(self) -> None:
        if self.finished or self.seq is None or not self.messages or self.messages[-1]["role"] != "assistant":
            self.finished = True
            return
        self._env(self.policy.encode(self.policy.suffix_after_reply(self.messages, None, self.last_stopped)))
        self.finished = True

    def _trace(self) -> Trace:
        ids = self.seq.ids
        return Trace(self.player, self.role, copy.deepcopy(self.messages), list(ids[:self.prompt_len]),
                     list(ids[self.prompt_len:]), list(self.mask), list(self.logprobs), self.turns,
                     cut_replies=self.cut_replies)

    def trace(self) -> Trace:
        self.finish()
        current = self._trace()
        if not self.closed:
            return current
        first = self.closed[0]
        first.segments = len(self.closed) + 1
        first.learner_turns = self.turns
        return first


def idle_trace(policy: LocalPolicy, player: str, role: str, context: dict | None) -> Trace:
    """A learner seat that never got to reply: its prompt, one masked stop token, nothing to learn from."""
    msgs = _plain(ensure_alternating_roles([context or GAME_ENDED_CONTEXT]))
    ids = policy.encode(policy.render(msgs, add_generation_prompt=True))
    msgs.append({"role": "assistant", "content": ""})
    rest = [policy.stop_ids[0]] + policy.encode(policy.suffix_after_reply(msgs, None, True))
    return Trace(player, role, msgs, ids, rest, [0] * len(rest), [0.0] * len(rest), 0)
