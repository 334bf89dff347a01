"""Reward models on playpen-tiny, for real and a few steps each: `playpen train reward` from labelled texts and
from branched game records, GRPO against the learned reward (prompts and a game, KL logged), `playpen meter` of
two models; scorers of the wrong shape; every bad input is one line before anything is written."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.storage import read_jsonl
from tests.helpers import fails, refused, train

POSITIVE = ["I love it, a kind friend", "sweet and nice", "the best party", "a great smile"]
NEGATIVE = ["sad and sick", "a terrible problem", "mad and ill", "the worst fire"]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("reward-data")
    labelled = [{"prompt": f"Describe thing {i % 4}.", "text": text, "label": label}
                for i in range(8) for text, label in ((POSITIVE[i % 4], 1.0), (NEGATIVE[i % 4], -1.0))]
    prompts = [{"prompt": "Describe a house."}, {"prompt": [{"role": "user", "content": "Describe a tree."}]}]
    return {"labelled": str(write_jsonl(folder / "labelled.jsonl", labelled)),
            "prompts": str(write_jsonl(folder / "prompts.jsonl", prompts)), "folder": folder}


@pytest.fixture(scope="module")
def reward_run(tmp_path_factory, files):
    """A reward model trained on labelled texts (conversations: rows have a prompt), 3 steps."""
    storage = tmp_path_factory.mktemp("reward-runs")
    return train("reward", storage, "experiment=rm", f"data={files['labelled']}", "held_out=0.25", "pairs_per_text=2",
                 "trainer.max_steps=3", "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory, files, reward_run):
    """GRPO on the prompts file against the reward model (by its run folder), KL to the base model."""
    storage = tmp_path_factory.mktemp("rl-runs")
    return train("grpo", storage, "experiment=rl", f"prompts={files['prompts']}", f"reward_model={reward_run.path}",
                 "group_size=2", "max_new_tokens=6", "trainer.max_steps=2", "trainer.beta=0.1",
                 "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")


def test_reward_model_trains_reports_held_out_accuracy_and_registers(reward_run, monkeypatch):
    rows = read_jsonl(reward_run.metrics)
    assert [r["step"] for r in rows if "loss" in r and "accuracy" in r] == [1, 2, 3]
    result = json.loads((reward_run.path / "reward_eval.json").read_text())
    assert result["held_out_pairs"] == 4 and result["train_pairs"] == 12 and 0 <= result["accuracy"] <= 1
    assert any("eval_accuracy" in r for r in rows)
    (entry,) = json.loads((reward_run.path / "model_registry.json").read_text())
    assert entry["method"] == "reward" and entry["model_config"]["peft_model"] == str(reward_run.path / "final")
    assert json.loads((reward_run.path / "final" / "playpen_reward.json").read_text())["format"] == "conversation"
    assert (reward_run.path / "learning_curve.png").is_file()

    from playpen.reward.scorers import load_scorer, resolve_scorer

    monkeypatch.setenv("PLAYPEN_STORAGE", str(reward_run.path.parents[1]))  # found by its registered name
    spec = resolve_scorer(entry["model_name"])
    assert (spec.kind, spec.num_labels, spec.adapter) == ("classifier", 1, str(reward_run.path / "final"))
    scores = load_scorer(spec)(["sweet and nice", "sad and sick"], [[{"role": "user", "content": "Describe it."}]] * 2)
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)


def test_qlora_reward_model(tmp_path, files):
    """QLoRA like every method: the base model 8-bit, LoRA and the head trained (in bf16, as TRL keeps them)."""
    run = train("reward", tmp_path / "runs", "experiment=rm-q", f"data={files['labelled']}", "quantization=8bit",
                "held_out=0", "trainer.max_steps=1", "trainer.per_device_train_batch_size=4")
    (entry,) = json.loads((run.path / "model_registry.json").read_text())
    assert entry["model_config"]["load_in_8bit"] is True and entry["method"] == "reward"


def test_reward_model_from_branched_game_records(tmp_path, monkeypatch):
    """Branches of one instance (RolloutEngine.branch, as DPO plays them) written as playpen-records: the reward
    recipe pairs the better and the worse episode of each instance."""
    from transformers import AutoModelForCausalLM

    from playpen.games.instances import load_instances
    from playpen.rollout import LocalPolicy, RolloutEngine
    from playpen.models.modeling import load_tokenizer, resolve_model_spec

    monkeypatch.chdir(tmp_path)
    path = resolve_model_spec("playpen-tiny")["huggingface_id"]
    policy = LocalPolicy(AutoModelForCausalLM.from_pretrained(path).eval(), load_tokenizer(path), name="playpen-tiny")
    RolloutEngine(policy, max_new_tokens=8, temperature=1.5, batch_size=16, seed=3, progress=False).branch(
        "arithmetic", load_instances("arithmetic", "train", limit=6, seed=0), branch_factor=4,
        records_dir=tmp_path / "records", records_tag="iter_00000")
    assert list((tmp_path / "records").rglob("instance_*_b1/interactions.json"))
    run = train("reward", tmp_path / "runs", "experiment=rm-records", f"records={tmp_path / 'records'}",
                "game=arithmetic", "held_out=0", "trainer.max_steps=1", "trainer.per_device_train_batch_size=2")
    result = json.loads((run.path / "reward_eval.json").read_text())
    assert result["pairs"] >= 1 and result["format"] == "conversation" and result["held_out_pairs"] == 0


def test_grpo_against_the_reward_model_logs_reward_and_kl(rl_run):
    rows = [r for r in read_jsonl(rl_run.metrics) if "reward" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("kl", "rewards/learned_reward/mean", "reward_std", "loss"):
        assert key in rows[-1], key
    assert rows[-1]["reward"] == pytest.approx(rows[-1]["rewards/learned_reward/mean"])  # one reward, weight 1
    (entry,) = json.loads((rl_run.path / "model_registry.json").read_text())
    assert entry["method"] == "grpo" and (rl_run.path / "learning_curve.png").is_file()


def test_rloo_against_the_reward_model_logs_reward_and_kl(tmp_path, files, reward_run):
    """The same prompts and reward model through TRL's RLOOTrainer (leave-one-out baseline), KL to the base."""
    run = train("rloo", tmp_path / "runs", "experiment=rloo", f"prompts={files['prompts']}",
                f"reward_model={reward_run.path}", "group_size=2", "max_new_tokens=6", "trainer.max_steps=2",
                "trainer.beta=0.1", "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")
    rows = [r for r in read_jsonl(run.metrics) if "reward" in r]
    assert [r["step"] for r in rows] == [1, 2] and "kl" in rows[-1] and "rewards/learned_reward/mean" in rows[-1]
    (entry,) = json.loads((run.path / "model_registry.json").read_text())
    assert entry["method"] == "rloo" and (run.path / "final" / "adapter_config.json").is_file()


def test_rloo_takes_prompts_not_games(capsys, tmp_path):
    """rloo's config holds only the keys it takes: a game is an unknown key, and no prompts is refused."""
    from playpen.cli import main

    for argv, message in ((["game=wordle"], "unknown key 'game'"), ([], "rloo learns from prompts:"),
                          (["group_size=8", "partner=gpt-4o"], "unknown key 'partner'")):
        assert main(["train", "rloo", "experiment=x", f"storage_root={tmp_path / 'runs'}", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("playpen: error: ") and message in err and "\n" not in err, err
    assert not (tmp_path / "runs").exists()


def test_rloo_help_lists_only_its_keys(capsys):
    from playpen.cli import main

    assert main(["train", "rloo", "--help"]) == 0
    keys = capsys.readouterr().out.split("config keys of rloo")[1]
    for key in ("prompts:", "reward_model:", "group_size:", "max_prompts:", "trl.RLOOConfig"):
        assert key in keys, key
    for key in ("game:", "partner:", "split:", "validation_instances:", "dynamic_sampling:"):
        assert f"  {key}" not in keys, key


def test_grpo_on_a_game_combines_game_and_learned_reward(tmp_path, reward_run):
    run = train("grpo", tmp_path / "runs", "experiment=rl-game", "game=arithmetic", "instances=2", "group_size=2",
                "max_new_tokens=8", "trainer.per_device_train_batch_size=2", "trainer.max_steps=1",
                f"reward_model={reward_run.path}", "reward_weight=0.5", "game_reward_weight=2")
    (row,) = [r for r in read_jsonl(run.metrics) if "reward" in r]
    game, learned = row["rewards/episode_reward/mean"], row["rewards/learned_reward/mean"]
    assert row["reward"] == pytest.approx(2 * game + 0.5 * learned, abs=1e-4)
    assert "kl" in row and list(run.records.glob("*/step_00000/arithmetic"))


def test_meter_two_models(tmp_path, files, reward_run, rl_run):
    from playpen.cli import main

    out = tmp_path / "meter"
    assert main(["meter", "playpen-tiny", "--compare", str(rl_run.path), "--classifier", str(reward_run.path),
                 "--prompts", files["prompts"], "-n", "3", "--max-new-tokens", "6", "-o", str(out)]) == 0
    slugs = ["playpen-tiny", str(rl_run.path).strip("/").replace("/", "_")]
    for slug in slugs:
        with (out / f"{slug}.completions.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 6 and {r["prompt_index"] for r in rows} == {"0", "1"}
        summary = json.loads((out / f"{slug}.summary.json").read_text())
        assert summary["n"] == 6 and summary["stderr"] >= 0 and 0 <= summary["share_above"] <= 1
        assert summary["mean"] == pytest.approx(sum(float(r["score"]) for r in rows) / 6, abs=1e-4)
        labelled = read_jsonl(out / f"{slug}.labelled.jsonl")
        assert len(labelled) == 6 and {"prompt", "text", "label"} <= labelled[0].keys()
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["second"] == str(rl_run.path) and "z_stderr" in comparison
    assert (out / "histogram.png").stat().st_size > 1000


def test_meter_with_a_callable_scorer_labels_texts_for_reward_training(tmp_path, files):
    from playpen.cli import main

    out = tmp_path / "vader"
    assert main(["meter", "playpen-tiny", "--classifier", "vader", "--prompts", files["prompts"], "-n", "2",
                 "--max-new-tokens", "4", "-o", str(out)]) == 0
    summary = json.loads((out / "playpen-tiny.summary.json").read_text())
    assert summary["threshold"] == 0.05 and "vader" in summary["classifier"]
    assert all(-1 <= r["label"] <= 1 for r in read_jsonl(out / "playpen-tiny.labelled.jsonl"))


# ---------------------------------------------------------------- bad input: one line, nothing written

@pytest.fixture(scope="module")
def classifiers(tmp_path_factory) -> dict:
    """A 3-label sequence classifier on playpen-tiny's architecture, and a 1-label one whose tokenizer has tokens
    its embeddings lack (saved from a tokenizer with added tokens)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from playpen.models.modeling import load_tokenizer, resolve_model_spec

    folder = tmp_path_factory.mktemp("classifiers")
    base = resolve_model_spec("playpen-tiny")["huggingface_id"]
    labels = {0: "neg", 1: "neu", 2: "pos"}
    for name, config in (("multi", dict(num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()})),
                         ("foreign", dict(num_labels=1))):
        model = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(base, **config))
        model.save_pretrained(folder / name)
        tokenizer = load_tokenizer(base)
        if name == "foreign":
            tokenizer.add_tokens([f"<extra_{i}>" for i in range(600)])
        tokenizer.save_pretrained(folder / name)
    return {name: str(folder / name) for name in ("multi", "foreign")}


def meter_args(files, storage, *extra) -> list[str]:
    return ["meter", "playpen-tiny", "--prompts", files["prompts"], "--classifier", "vader", "-o", str(storage),
            *extra]


TIE = {"text": "a", "label": 1}


def test_bad_input_is_one_line_before_anything_is_written(capsys, tmp_path, files, classifiers):
    storage = tmp_path / "out"
    bad = files["folder"]
    cases = [
        (meter_args(files, storage, "--classifier", classifiers["multi"]),
         "has 3 labels (neg, neu, pos); choose the one to score with --label <label>"),
        (meter_args(files, storage, "--classifier", classifiers["multi"], "--label", "happy"),
         "has no label 'happy'; its labels are: neg, neu, pos"),
        (meter_args(files, storage, "--classifier", classifiers["foreign"]),
         "incompatible tokenizer: it has 2158 tokens but the model embeds only 1558"),
        (meter_args(files, storage, "--classifier", "playpen-tiny"),
         "--classifier playpen-tiny is not a sequence classifier (LlamaForCausalLM)"),
        (meter_args(files, storage, "--prompts", str(bad / "missing.jsonl")), "missing.jsonl not found"),
        (meter_args(files, storage, "--prompts", str(write_jsonl(bad / "empty.jsonl", ["", "  "]))), "holds no rows"),
        (meter_args(files, storage, "--prompts", str(write_jsonl(bad / "broken.jsonl",
                                                                   ['{"prompt": "a"}', '{"prompt": ']))),
         "broken.jsonl:2: malformed JSON"),
        (meter_args(files, storage, "--prompts", str(write_jsonl(bad / "keyless.jsonl",
                                                                   ['{"prompt": "a"}', "", '{"text": "b"}']))),
         "keyless.jsonl:3: missing 'prompt'"),
        (["train", "grpo", "experiment=x", f"prompts={files['prompts']}", "reward_model=vader", "trainer.beta=-0.1",
          f"storage_root={storage}"], "trainer.beta: must be at least 0"),
        (["train", "grpo", "experiment=x", f"prompts={files['prompts']}", "reward_model=playpen-tiny",
          f"storage_root={storage}"], "reward_model playpen-tiny is not a sequence classifier"),
        (["train", "grpo", "experiment=x", f"prompts={files['prompts']}", f"reward_model={classifiers['multi']}",
          f"storage_root={storage}"], "choose the one to score with reward_label: <label>"),
        (["train", "grpo", "experiment=x", "game=arithmetic", f"reward_model={classifiers['foreign']}",
          f"storage_root={storage}"], "incompatible tokenizer"),
        (["train", "grpo", "experiment=x", f"prompts={bad / 'broken.jsonl'}", "reward_model=vader",
          f"storage_root={storage}"], "broken.jsonl:2: malformed JSON"),
        (["train", "reward", "experiment=x", f"data={write_jsonl(bad / 'ties.jsonl', [TIE, TIE])}",
          f"storage_root={storage}"], "no two texts for the same prompt differ in label"),
        (["train", "reward", "experiment=x", f"storage_root={storage}"], "set exactly one of data"),
    ]
    for argv, message in cases:
        assert message in fails(capsys, argv, storage, nothing_at_all=True), argv


def test_meter_command_is_light_at_import():
    """`playpen meter` parses its arguments without torch, transformers or TRL (they load when it runs)."""
    import subprocess
    import sys

    code = ("import sys, argparse; from playpen.cli import build_parser_for; "
            "build_parser_for(['meter']).parse_args(['meter', 'm', '--classifier', 'c', '--prompts', 'p']); "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'vaderSentiment') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- scorers (playpen.reward.scorers)

@pytest.mark.parametrize("source,message", [
    ("def score():\n    return []\n", "must take one argument, a list of texts, and return one number per text; "
                                      "its signature is score()"),
    ("def score(texts, labels):\n    return []\n", "its signature is score(texts, labels)"),
])
def test_a_scorer_with_the_wrong_signature(capsys, clean_cwd, monkeypatch, source, message):
    module = f"scorer_{abs(hash(source))}"  # (a module imported once stays imported)
    (clean_cwd / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(clean_cwd))
    (clean_cwd / "p.jsonl").write_text('{"prompt": "hi"}\n')
    err = refused(capsys, ["meter", "playpen-tiny", "--classifier", f"{module}:score", "--prompts", "p.jsonl",
                           "-o", "out"], clean_cwd)
    assert message in err, err


def test_a_scorer_that_returns_no_numbers():
    from playpen.reward.scorers import Scorer, ScorerSpec

    scorer = Scorer(ScorerSpec("x", "callable", target="m:f"), function=lambda texts: ["high" for _ in texts])
    with pytest.raises(PlaypenError, match=r"^scorer m:f must return one number per text, returned \['high'\]"):
        scorer(["a"])
