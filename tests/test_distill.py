"""`playpen train distill`: DAgger targets are the game expert's replies to the learner's own recorded histories,
trained on exactly those tokens; a model teacher's reverse KL is zero against itself and falls against another
model, whose greedy tokens the student moves toward."""
from __future__ import annotations

import json
import random

import pytest
import torch

from playpen.storage import read_jsonl
from tests.helpers import numberguess_messages, train

pytestmark = pytest.mark.slow

SMALL = ("game=numberguess", "instances=12", "max_new_tokens=10", "temperature=1.0",
         "trainer.per_device_train_batch_size=8", "trainer.save_steps=100")


def rows_of(run, k: int = 0) -> list[dict]:
    return [json.loads(line) for line in (run.path / "targets" / f"iter_{k:02d}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def dagger(tmp_path_factory):
    """Two DAgger rounds from playpen-tiny, which has never seen numberguess (it answers in wordle's words)."""
    storage = tmp_path_factory.mktemp("dagger") / "runs"
    return train("distill", storage, "experiment=dagger", "teacher=programmatic", "lora=null", "rounds=2", *SMALL,
                 "trainer.max_steps=10", "trainer.learning_rate=2e-3")


def test_dagger_targets_are_the_experts_replies_to_the_recorded_histories(dagger, tiny):
    from transformers import AutoTokenizer

    from playpen.games import expert_player

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    expert = expert_player("numberguess", "Guesser")
    rows = rows_of(dagger)
    episodes = {r["meta"]["episode"] for r in rows}
    assert len(episodes) == 12  # every episode of the round gave its turns
    records = {p.name: p for p in dagger.records.glob("*/iter_00000/numberguess/*/instance_*")}
    for row in rows:
        history = numberguess_messages(records[row["meta"]["episode"]])
        replies = [i for i, m in enumerate(history) if m["role"] == "assistant"]
        seen = history[:replies[row["meta"]["turn"]]]  # what the learner saw before this reply
        assert row["meta"]["reply"].strip() == history[replies[row["meta"]["turn"]]]["content"]
        assert row["meta"]["target"] == expert.expert_response(seen, random.Random(0), 1.0)
        trained = [t for t, label in zip(row["input_ids"], row["labels"]) if label != -100]
        assert trained == row["labels"][-len(trained):] == row["input_ids"][-len(trained):]  # the end, nothing else
        assert tokenizer.decode(trained) == row["meta"]["target"] + tokenizer.eos_token
        # the context is the learner's own view: its prompt rendered by the chat template and its earlier replies
        context = tokenizer.decode(row["input_ids"][:-len(trained)])
        assert context == tokenizer.apply_chat_template(seen, tokenize=False, add_generation_prompt=True)


def test_dagger_rounds_log_agreement_and_learn_the_format(dagger):
    rounds = [r for r in read_jsonl(dagger.metrics) if "round" in r]
    assert [r["round"] for r in rounds] == [0, 1]
    assert rounds[0]["aborted_pct"] == 100 and rounds[0]["agreement"] == 0  # playpen-tiny knows no numberguess
    # after ten steps on the expert's answers to its own states, its guesses are well-formed often enough to go on
    assert rounds[1]["turns"] > 1.5 * rounds[0]["turns"], rounds
    assert (dagger.checkpoints / "iter_01" / "round_done.json").is_file() and (dagger.path / "final").is_dir()


def test_a_teacher_equal_to_the_student_gives_zero_loss_and_moves_nothing(tmp_path):
    from safetensors.torch import load_file

    # plain SGD: the gradient is zero up to float rounding (~1e-6), which Adam would normalise to steps of size lr
    run = train("distill", tmp_path / "runs", "experiment=self", "teacher=playpen-tiny", "rounds=1", *SMALL,
                "trainer.max_steps=3", "trainer.optim=sgd", "trainer.learning_rate=1e-3")
    rows = [r for r in read_jsonl(run.metrics) if "distill/loss_kl" in r]
    assert len(rows) == 3 and max(abs(r["distill/loss_kl"]) for r in rows) < 1e-6
    assert max(r["grad_norm"] for r in rows) < 1e-4 and max(abs(r["distill/reverse_kl_sampled"]) for r in rows) < 1e-6
    adapter = load_file(run.path / "final" / "adapter_model.safetensors")
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]  # LoRA starts at B = 0
    assert lora_b and max(v.abs().max().item() for v in lora_b) < 1e-7


def reverse_kl_and_agreement(student, teacher, sequences) -> tuple[float, float]:
    """Mean KL(student || teacher) over the learner positions of held-out sequences, and the share of those
    positions where the student's most likely token is the teacher's."""
    kl = agree = n = 0.0
    for ids, mask in sequences:
        x = torch.tensor([ids])
        with torch.no_grad():
            s = torch.log_softmax(student(x).logits[0, :-1], -1)
            t = torch.log_softmax(teacher(x).logits[0, :-1], -1)
        where = torch.tensor(mask[1:], dtype=torch.bool)
        kl += (s.exp() * (s - t)).sum(-1)[where].sum().item()
        agree += (s.argmax(-1) == t.argmax(-1))[where].sum().item()
        n += where.sum().item()
    return kl / n, agree / n


def test_a_model_teacher_pulls_the_student_toward_it_on_held_out_play(tmp_path, numberguess_player, tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from playpen.games.instances import load_instances
    from playpen.rollout import LocalPolicy, RolloutEngine

    teacher = AutoModelForCausalLM.from_pretrained(numberguess_player).eval()
    policy = LocalPolicy(teacher, AutoTokenizer.from_pretrained(numberguess_player))
    engine = RolloutEngine(policy, max_new_tokens=10, temperature=0.0, batch_size=16, progress=False)
    held_out = engine.play("numberguess", load_instances("numberguess", "validation", limit=16, seed=0))
    sequences = [(e.prompt_ids + e.completion_ids, [0] * len(e.prompt_ids) + e.env_mask) for e in held_out]
    before = reverse_kl_and_agreement(AutoModelForCausalLM.from_pretrained(tiny).eval(), teacher, sequences)

    run = train("distill", tmp_path / "runs", "experiment=gkd", f"teacher={numberguess_player}", "lora=null",
                "rounds=2", *SMALL, "trainer.max_steps=10", "trainer.learning_rate=2e-3")
    rows = [r for r in read_jsonl(run.metrics) if "distill/loss_kl" in r]
    assert rows[-1]["distill/loss_kl"] < rows[0]["distill/loss_kl"]
    after = reverse_kl_and_agreement(AutoModelForCausalLM.from_pretrained(run.path / "final").eval(), teacher,
                                     sequences)
    assert after[0] < 0.5 * before[0], (before, after)  # reverse KL to the teacher on the teacher's held-out play
    assert after[1] > before[1] + 0.2, (before, after)  # greedy tokens moved toward the teacher's


def test_a_teacher_with_another_tokenizer_is_refused_in_one_line(capsys, storage, tiny):
    import shutil

    from transformers import AutoTokenizer

    from tests.helpers import fails

    other = storage.parent / "other-tokenizer"
    shutil.copytree(tiny, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<another-token>"])
    tokenizer.save_pretrained(other)
    err = fails(capsys, ["train", "distill", f"storage_root={storage}", "experiment=x", "game=numberguess",
                         f"teacher={other}"], storage)
    assert "has another tokenizer than the learner playpen-tiny" in err
