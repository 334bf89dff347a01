"""Best-of-N advocates (NYU's BestOfNDebater): at each of its turns the advocate samples `n` speeches and gives
the one a chooser prefers. Shared by debate, consultancy and double_consultancy.

Choosers:
- `judge` (default): the judge of this episode (the model in the judge's seat, or the programmatic judge where the
  experiment pins it) reads the debate so far with the candidate as the newest speech and gives its verdict; the
  candidate's score is the probability the judge gives the advocate's side (p for its side, 1 - p for the other;
  no verdict line: no score);
- `programmatic`: the programmatic judge reads it the same way, whoever sits in the judge's seat;
- `package.module:function`: a callable scorer, as `playpen meter` and GRPO's learned reward name them: it takes
  the list of candidate texts (and, if it has a `prompts` parameter, the advocate's view before the speech, one
  per text) and returns one number per text. A reward model (a classifier) is loaded by the tool that plays: a
  tournament file's `best_of_n:` entry may name one.

Where N and the chooser are set: the experiment key `best_of_n: {n, chooser, temperature, seats}` (seats: the
speakers that sample, "A"/"B" or "C" for consultancy's consultant; default player 1's), or a seat model wrapped
in `BestOfNModel` (what a tournament file's `best_of_n:` entries make).

Who samples: the advocate's own model, at `temperature` (candidates must differ). The rollout engine samples a
local policy's N candidates in its batched waves (the learner's trace then holds the chosen speech's tokens);
clemcore models are asked N times (a batch of N where the backend batches); a programmatic expert draws N moves.
clemcore's batch runner calls models without the player, so best-of-N seats are played by its sequential runner
(`playpen eval` and tournaments choose it); an advocate that was not asked to choose raises instead of playing
one sample silently.

Records: every choice is a GM note "best of n" {speaker, round, side, chooser, prompt (the advocate's view),
candidates [{text, score}], chosen}: all candidates and the choice. `preference_pairs` turns each note into a DPO
pair (the chosen candidate against the lowest-scored one, both scores in meta), the way NYU built its DPO data.
"""
from __future__ import annotations

import copy
import importlib
import inspect
import math
from dataclasses import dataclass

from clemcore.backends import Model, ModelSpec

from playpen.games.common import episode_gm_events

JUDGE, PROGRAMMATIC = "judge", "programmatic"
NOTE = "best of n"
GAMES = ("debate", "consultancy", "double_consultancy")  # the games whose advocates may be best-of-N


@dataclass(frozen=True)
class BestOfN:
    """How a best-of-N advocate samples and chooses."""
    n: int = 4                          # candidates per turn (>= 2)
    chooser: str = JUDGE                # judge | programmatic | package.module:function
    temperature: float = 1.0            # sampling temperature of the candidates (> 0: they must be able to differ)
    seats: tuple[str, ...] | None = None  # the speakers that sample ("A", "B", "C"); None: player 1's

    @classmethod
    def from_setting(cls, setting) -> "BestOfN":
        """From an experiment's or a file's `best_of_n:` value: a number (n) or a dict. ValueError names the
        problem."""
        if isinstance(setting, bool) or not isinstance(setting, (int, dict)):
            raise ValueError(f"best_of_n must be a number of candidates or {{n, chooser, temperature, seats}}, "
                             f"got {setting!r}")
        values = {"n": setting} if isinstance(setting, int) else dict(setting)
        unknown = set(values) - {"n", "chooser", "temperature", "seats"}
        if unknown:
            raise ValueError(f"best_of_n has unknown keys {sorted(unknown)}; use n, chooser, temperature, seats")
        n, chooser = values.get("n", cls.n), values.get("chooser", cls.chooser)
        temperature, seats = values.get("temperature", cls.temperature), values.get("seats")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"best_of_n.n must be an integer >= 2 (one candidate is an ordinary seat), got {n!r}")
        if not isinstance(chooser, str) or not (chooser in (JUDGE, PROGRAMMATIC) or is_callable_name(chooser)):
            raise ValueError(f"best_of_n.chooser must be judge, programmatic or a callable scorer "
                             f"package.module:function, got {chooser!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature <= 0:
            raise ValueError(f"best_of_n.temperature must be > 0 (the candidates are sampled), got {temperature!r}")
        if seats is not None:
            if isinstance(seats, str):
                seats = [seats]
            if not isinstance(seats, list) or not seats or any(s not in ("A", "B", "C") for s in seats):
                raise ValueError(f"best_of_n.seats must list speakers A, B (debaters, double consultancy's "
                                 f"consultants) or C (consultancy's consultant), got {seats!r}")
            seats = tuple(seats)
        return cls(n, chooser, float(temperature), seats)


def is_callable_name(name: str) -> bool:
    module, sep, function = name.partition(":")
    return bool(sep and module and function.isidentifier() and "/" not in name)


class BestOfNModel(Model):
    """A seat model that makes its advocate best-of-N: `model` writes the candidates, `best_of_n` says how many
    and who chooses, `scorer` (optional) is a loaded callable chooser (a reward model) that replaces
    `best_of_n.chooser`. Records name the seat `name` (default: the model's own name). Not batchable: clemcore's
    runner then plays it sequentially, asking its player, which samples and chooses."""

    def __init__(self, model: Model, best_of_n: BestOfN, name: str | None = None, scorer=None):
        super().__init__(ModelSpec(model_name=name or model.name, backend="best_of_n"))
        self.inner, self.best_of_n, self.scorer = model, best_of_n, scorer
        self.set_gen_args(**model.gen_args)

    def __getattr__(self, name):  # an expert inside: its rng and skill, as ExpertPlayer reads them
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __deepcopy__(self, memo):  # game states are copied when branching; models never are
        return self

    def supports_batching(self) -> bool:
        return False

    def generate_response(self, messages):
        raise RuntimeError(f"{self.name} is a best-of-{self.best_of_n.n} seat: its player samples and chooses "
                           f"(it is not called as a model)")


def unwrapped(model: Model) -> Model:
    return model.inner if isinstance(model, BestOfNModel) else model


def sample(model: Model, messages: list[dict], n: int, temperature: float) -> list[str]:
    """n replies of a clemcore model to the same messages, at `temperature` (restored afterwards)."""
    saved = dict(model.gen_args)
    model.set_gen_args(**{**saved, "temperature": temperature})
    try:
        if model.supports_batching():
            results = model.generate_batch_response([copy.deepcopy(messages) for _ in range(n)])
        else:
            results = [model.generate_response(copy.deepcopy(messages)) for _ in range(n)]
    finally:
        model.set_gen_args(**saved)
    return [text for _, _, text in results]


def load_callable(name: str):
    module_name, _, attribute = name.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"best_of_n.chooser {name}: cannot import it ({e})") from None
    if not callable(function):
        raise ValueError(f"best_of_n.chooser {name} is not callable")
    return function


def call_scorer(scorer, texts: list[str], prompt: list[dict]) -> list[float | None]:
    """One score per text from a callable scorer (with the advocate's view as `prompts` where it takes them)."""
    try:
        takes_prompts = "prompts" in inspect.signature(scorer).parameters
    except (TypeError, ValueError):
        takes_prompts = False
    returned = scorer(list(texts), prompts=[prompt] * len(texts)) if takes_prompts else scorer(list(texts))
    scores = [None if s is None or (isinstance(s, float) and math.isnan(s)) else float(s) for s in returned]
    if len(scores) != len(texts):
        raise ValueError(f"the best-of-n scorer returned {len(scores)} scores for {len(texts)} candidates")
    return scores


def argmax(scores: list[float | None]) -> int:
    """The index of the highest score (the first of equals); 0 when no candidate has one."""
    valid = [i for i, s in enumerate(scores) if s is not None]
    return max(valid, key=lambda i: (scores[i], -i)) if valid else 0


# ---------------------------------------------------------------- preference pairs from the records

def preference_pairs(interactions: dict, min_margin: float = 0.0) -> list[dict]:
    """DPO pairs from one episode's "best of n" notes: per turn, the chosen candidate against the lowest-scored
    one when their scores differ by more than `min_margin` (candidates without a score take no part), in TRL's
    conversational format: {"prompt": [the advocate's view], "chosen": [reply], "rejected": [reply], "meta":
    {..., "chooser", "chosen_score", "rejected_score", "scores"}}; with a judge as chooser the scores are the
    judge's probabilities for the advocate's side."""
    meta = interactions.get("meta") or {}
    pairs = []
    for round_index, note in episode_gm_events(interactions, NOTE):
        candidates = note["candidates"]
        best = candidates[note["chosen"]]
        scored = [c for c in candidates if c["score"] is not None]
        if best["score"] is None or len(scored) < 2:
            continue
        worst = min(scored, key=lambda c: c["score"])
        if best["score"] - worst["score"] <= min_margin or best["text"] == worst["text"]:
            continue
        pairs.append({
            "prompt": [dict(m) for m in note["prompt"]],
            "chosen": [{"role": "assistant", "content": best["text"]}],
            "rejected": [{"role": "assistant", "content": worst["text"]}],
            "meta": {"game": meta.get("game_name"), "experiment": meta.get("experiment_name"),
                     "game_id": meta.get("game_id"), "speaker": note["speaker"], "side": note["side"],
                     "round": note["round"], "chooser": note["chooser"], "chosen_score": best["score"],
                     "rejected_score": worst["score"], "scores": [c["score"] for c in candidates]}})
    return pairs
