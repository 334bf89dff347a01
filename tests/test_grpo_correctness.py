"""Is multi-turn GRPO's gradient the right one? Three checks on playpen-tiny that fail on a real bug:

- token in, token out: every sequence TRL trains is exactly the learner's view of its episode as clemcore recorded
  it, rendered independently with the chat template, and TRL's loss mask is 1 on exactly the learner's own sampled
  tokens (its end-of-turn token included), 0 on game-master, partner and template tokens;
- sampling = training distribution: the log-probabilities the engine recorded while sampling equal TRL's own
  recomputation of the same tokens under the same weights and temperature (max |Δ| ≤ 1e-3, float32);
- a known answer: GRPO moves the greedy answer of a one-turn game from the model's prior to the one answer that
  pays, within 12 steps; a negative control (a coin-flip reward, independent of the answer) does not move it.

The known answer is learned with use_vllm too (vLLM plays, weights synced each step).
`pytest -k "token_in or logprob or known_answer"` runs them alone.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from clemcore.backends.utils import ensure_alternating_roles

from playpen.storage import read_jsonl
from tests.helpers import needs_vllm

GAMES = Path(__file__).resolve().parent / "data" / "games"  # knownanswer: the known-answer test game
TEMPERATURE = 1.3  # not 1, so a trainer that forgot the temperature scores other log-probabilities


def grpo(storage: Path, *overrides: str):
    from playpen.train import train

    return train("grpo", None, [f"storage_root={storage}", "cpu_threads=1", "experiment=correctness", *overrides])


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """Two GRPO steps of taboo self-play (both seats the learner: multi-turn, partner messages in every sequence),
    with what the engine played and what TRL made of it captured at the second step (the first has LoRA's B = 0,
    where adapter dropout changes nothing): TRL's padded batch and TRL's own recomputed log-probabilities of it,
    under the weights of that step."""
    from trl import GRPOTrainer

    from playpen.rollout import RolloutEngine

    played, batches = [], []
    play, score = RolloutEngine.play, GRPOTrainer._generate_and_score_completions

    def spy_play(self, *args, **kwargs):
        episodes = play(self, *args, **kwargs)
        played.append(episodes)
        return episodes

    def spy_score(self, inputs):
        out = score(self, inputs)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():  # the model as TRL's loss will see it: training mode, this step's weights
            logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, mask, out["completion_ids"].size(1))
        batches.append((out, logps))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RolloutEngine, "play", spy_play)
        mp.setattr(GRPOTrainer, "_generate_and_score_completions", spy_score)
        run = grpo(tmp_path_factory.mktemp("two-steps"), "game=taboo", "instances=4", "group_size=4",
                   "max_new_tokens=24", f"temperature={TEMPERATURE}", "trainer.max_steps=2",
                   "trainer.per_device_train_batch_size=16", "trainer.learning_rate=1e-3")
    (_, episodes), (_, (out, recomputed)) = played, batches
    from transformers import AutoTokenizer

    from playpen.models.tiny import ensure_tiny_model

    return {"run": run, "episodes": episodes, "out": out, "recomputed": recomputed,
            "tokenizer": AutoTokenizer.from_pretrained(ensure_tiny_model())}


def learner_view(interactions: dict, player: str, sampled: list[str]) -> list[dict]:
    """What clemcore's record says `player` was sent and answered, in order: the chat its model saw, as clemcore's
    backends hand it over (consecutive messages of one role merged). The record keeps replies stripped, as the game
    master got them; the model saw them as sampled: `sampled` gives those texts, checked to strip to the record."""
    view, replies = [], iter(sampled)
    for turn in interactions["turns"]:
        for event in turn:
            action = event["action"]
            if event["to"] == player and event["from"] == "GM" and action["type"] == "send message":
                view.append({"role": "user", "content": action["content"]})
            elif event["from"] == player and action["type"] == "get message":
                reply = next(replies)
                assert reply.strip() == action["content"], f"{reply!r} is not the recorded {action['content']!r}"
                view.append({"role": "assistant", "content": reply})
    assert next(replies, None) is None, "every sampled reply is in the record"
    return ensure_alternating_roles(view)


def unpadded(out: dict, row: int) -> tuple[list[int], list[int], list[int]]:
    """Row `row` of TRL's batch without padding: prompt ids, completion ids, and the loss mask on the completion."""
    prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()
    keep = out["completion_mask"][row].bool()
    completion = out["completion_ids"][row][keep].tolist()
    loss_mask = (out["completion_mask"][row] * out["tool_mask"][row])[keep].tolist()
    return prompt, completion, loss_mask


def spans(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """Runs of equal mask value: (1, learner tokens) and (0, environment tokens) in order."""
    runs: list[tuple[int, list[int]]] = []
    for token, value in zip(ids, mask):
        if runs and runs[-1][0] == value:
            runs[-1][1].append(token)
        else:
            runs.append((value, [token]))
    return runs


def test_multi_turn_token_in_token_out(two_steps):
    """TRL's sequences against the learner's view rendered from clemcore's record. Where the model sampled a
    reply as the tokenizer would encode it, the ids and the loss mask equal the template's exactly
    (`return_assistant_tokens_mask`: reply + end-of-turn); a reply sampled as another split of the same text stays
    as sampled (that is what was sampled), so there every trained span must decode to exactly one reply and its
    end-of-turn token, and every environment span must be the tokenizer's own encoding of its text."""
    tokenizer, out, episodes = two_steps["tokenizer"], two_steps["out"], two_steps["episodes"]
    assert len(episodes) == out["prompt_ids"].size(0) == 16
    assert max(e.learner_turns for e in episodes) >= 2, "the check needs multi-turn episodes"
    exact = as_sampled = partner_tokens = 0
    for row, episode in enumerate(episodes):
        seats = [t for t in episode.traces if t.completion_ids]
        trace = seats[row % len(seats)]  # self-play trains the seats of a group in turn (GameRollouts.trained_seat)
        if trace.cut_replies or trace.learner_turns == 0:
            continue  # a reply cut at max_new_tokens has no sampled end-of-turn token: the template would mark one
        replies = [m["content"] for m in trace.messages if m["role"] == "assistant"]
        view = learner_view(episode.interactions, trace.player, replies)
        expected = tokenizer.apply_chat_template(view, tokenize=True, return_dict=True,
                                                 return_assistant_tokens_mask=True)
        prompt, completion, loss_mask = unpadded(out, row)
        assert tokenizer.decode(prompt + completion) == tokenizer.apply_chat_template(view, tokenize=False)
        assert prompt == expected["input_ids"][:len(prompt)], f"row {row}: the first prompt is the template's"
        trained = [tokens for value, tokens in spans(completion, loss_mask) if value]
        assert [tokenizer.decode(t) for t in trained] == [r + "<|im_end|>" for r in replies], \
            f"row {row}: trained spans are not exactly the replies and their end-of-turn tokens"
        for value, tokens in spans(completion, loss_mask):
            if not value:
                assert tokenizer.encode(tokenizer.decode(tokens), add_special_tokens=False) == tokens, \
                    f"row {row}: environment tokens are not the tokenizer's encoding of their text"
                partner_tokens += len(tokens)
        if prompt + completion == expected["input_ids"]:
            assert loss_mask == expected["assistant_masks"][len(prompt):], f"row {row}: loss mask is not the replies"
            exact += 1
        else:
            as_sampled += 1
    assert exact >= 8 and partner_tokens > 0, (exact, as_sampled)


def test_sampling_logprobs_equal_trainer_logprobs(two_steps):
    """The engine's sampling log-probabilities reach TRL unchanged (sampling_per_token_logps) and equal what TRL's
    loss computes for the same tokens (float32, the rollout temperature, dropout off as GRPO's defaults set it)."""
    out, recomputed = two_steps["out"], two_steps["recomputed"]
    trained = (out["completion_mask"] * out["tool_mask"]).bool()
    assert trained.sum() > 50
    sampled = out["sampling_per_token_logps"]
    assert (sampled[trained] < 0).all(), "real log-probabilities, not zeros, on every trained token"
    worst = (sampled - recomputed)[trained].abs().max().item()
    assert worst <= 1e-3, f"sampling and training log-probabilities differ by up to {worst:.2e}"


@pytest.fixture
def known_answer_game(tmp_path, monkeypatch):
    """The knownanswer test game registered as a benchmark, as a clembench checkout is (game_registry.json)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "game_registry.json").write_text(json.dumps([{"benchmark_path": str(GAMES)}]))
    return tmp_path / "runs"


def greedy_paying_share(run, step: int) -> float:
    """Held-out greedy validation (12 instances) at `step`: the share of answers that pay."""
    (row,) = [r for r in read_jsonl(run.metrics) if r.get("step") == step and "val/reward" in r]
    return row["val/reward"]


KNOWN_ANSWER = ("game=knownanswer", "group_size=8", "max_new_tokens=8", "temperature=1.0", "abort_reward=0",
                "validation_instances=12", "trainer.max_steps=12", "trainer.per_device_train_batch_size=32",
                "trainer.learning_rate=2e-3", "trainer.beta=0", "trainer.save_steps=100")


@pytest.mark.slow
def test_grpo_learns_a_known_answer_and_a_coin_teaches_nothing(known_answer_game):
    """playpen-tiny answers 'third' greedily on every held-out prompt and about uniformly at T=1; only 'second'
    pays. GRPO must make 'second' the greedy answer; with a coin-flip reward (groups vary just as much) the greedy
    answer must stay."""
    learned = grpo(known_answer_game, *KNOWN_ANSWER, "run_id=pays-second")
    assert greedy_paying_share(learned, 0) == 0.0
    assert greedy_paying_share(learned, 12) >= 0.9
    control = grpo(known_answer_game, *KNOWN_ANSWER, "split=instances_train_coin", "run_id=coin")
    assert greedy_paying_share(control, 0) == greedy_paying_share(control, 12) == 0.0
    flat = [r["frac_reward_zero_std"] for r in read_jsonl(control.metrics) if "frac_reward_zero_std" in r]
    assert sum(flat) / len(flat) < 0.5, "the control's groups vary: it had gradient, just none that points anywhere"


# ---------------------------------------------------------------- learning-signal options (no model)

@pytest.mark.slow
@needs_vllm
def test_grpo_with_vllm_learns_the_known_answer_and_a_coin_teaches_nothing(known_answer_game):
    """The same test with use_vllm: vLLM plays every rollout, its weights synced after every optimizer step."""
    learned = grpo(known_answer_game, *KNOWN_ANSWER, "use_vllm=true", "run_id=vllm-pays-second")
    assert greedy_paying_share(learned, 0) == 0.0
    assert greedy_paying_share(learned, 12) >= 0.9
    control = grpo(known_answer_game, *KNOWN_ANSWER, "use_vllm=true", "split=instances_train_coin",
                   "run_id=vllm-coin")
    assert greedy_paying_share(control, 0) == greedy_paying_share(control, 12) == 0.0


def test_dynamic_sampling_refills_uniform_groups_and_keeps_the_step_size():
    from playpen.train.dynamic_sampling import fresh_instance_drawer, refill_uniform_groups

    instances = list(range(10))  # instance i: its episodes score i % 3 == 0 alike (uniform), else they vary
    played: list[list[int]] = []

    def play(chosen):
        played.append(chosen)
        return [(i, g % 2 if i % 3 else 0) for i in chosen for g in range(4)]

    def reward(episode):
        return episode[1]

    first = play([0, 1, 3, 4])  # groups of instances 0 and 3 are uniform
    episodes, stats = refill_uniform_groups(first, 4, reward, play, fresh_instance_drawer(instances, {0, 1, 3, 4}, 7),
                                            rounds=3)
    assert len(episodes) == 16 and [e[0] for e in episodes[::4]][1::2] == [1, 4]  # varying groups keep their slots
    assert all(len({e[1] for e in episodes[k:k + 4]}) == 2 for k in range(0, 16, 4)), "every group varies now"
    assert stats["dynamic/uniform_share"] == 0.5 and stats["dynamic/uniform_left"] == 0.0
    assert stats["dynamic/refill_groups"] == sum(len(p) for p in played[1:])
    assert not {0, 1, 3, 4} & {i for p in played[1:] for i in p}, "refills are fresh instances"
    again, _ = refill_uniform_groups(first, 4, reward, lambda c: [(i, g % 2 if i % 3 else 0) for i in c
                                                                   for g in range(4)],
                                     fresh_instance_drawer(instances, {0, 1, 3, 4}, 7), rounds=3)
    assert again == episodes, "the same seed refills the same way (a resumed run replays its step)"
    none_vary = [(0, 0)] * 8
    kept, stats = refill_uniform_groups(none_vary, 4, reward, lambda c: [(i, 0) for i in c for _ in range(4)],
                                        fresh_instance_drawer(instances, set(), 1), rounds=2)
    assert kept == none_vary and stats["dynamic/uniform_left"] == 1.0, "bounded: after `rounds` the slots stay"


def test_variant_groups_are_shuffled_and_cut_whole():
    from playpen.games.instances import load_instances

    pairs = load_instances("referencegame", "instances_train_variants", limit=7, seed=3)
    assert len(pairs) == 6, "7 rounds down to two whole groups of three"
    groups = [i["variant_group"] for _, i in pairs]
    assert groups[0] == groups[1] == groups[2] != groups[3] == groups[4] == groups[5]
    assert sorted(i["player_2_target"] for _, i in pairs[:3]) == ["first", "second", "third"]
    everything = load_instances("referencegame", "instances_train_variants", seed=3)
    assert len(everything) == 288 and everything[:6] == pairs, "the same seed, the same order"
    heldout = load_instances("referencegame", "instances_heldout")
    assert len(heldout) == 153 and all(sum(i["player_2_target"] == p for _, i in heldout) == 51
                                       for p in ("first", "second", "third"))


def test_screening_keeps_instances_with_a_pass_rate_strictly_between_0_and_1(known_answer_game, capsys):
    """`playpen screen` through the command line on the registered known-answer game; the file it writes is an
    instances set that GRPO's `split:` (and every loader) reads."""
    from playpen.cli import main
    from playpen.games.instances import load_instances

    out = known_answer_game.parent / "screened.json"
    assert main(["screen", "playpen-tiny", "-g", "knownanswer", "-k", "6", "-T", "1.0", "-L", "8", "-o",
                 str(out)]) == 0
    kept = load_instances("knownanswer", str(out))
    assert 0 < len(kept) <= 12 and all(0 < i["pass_rate"] < 1 for _, i in kept)
    assert "kept" in capsys.readouterr().out
    # near-greedy sampling leaves nothing with signal: one line, nothing written
    assert main(["screen", "playpen-tiny", "-g", "knownanswer", "-k", "2", "-T", "0.01", "-L", "8", "-o",
                 str(out.with_name("none.json"))]) == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err and not out.with_name("none.json").exists()
