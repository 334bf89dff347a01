"""Trainers on playpen-tiny, for real, a few steps each: SFT full/LoRA/QLoRA, DPO static and from rollouts,
GRPO self-play and with a teacher (one that fails stops the run), resume equals an uninterrupted run, and every
bad input is one clear line before anything is written. DeepSpeed under torchrun lives in test_train_distributed.py."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from playpen.storage import read_jsonl
from tests.helpers import fails, playpen_ok, refused_in_subprocess, train

REPO = Path(__file__).resolve().parents[1]
WORDS = ["apple", "crane", "slate", "house", "table", "plant", "light", "sound"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    """Small conversational SFT data (as `playpen data` writes) and a static preference file."""
    folder = tmp_path_factory.mktemp("train-data")
    sft, prefs = folder / "sft.jsonl", folder / "prefs.jsonl"
    with sft.open("w") as f:
        for i in range(24):
            messages = [{"role": "user", "content": "Guess a five-letter word. Reply only with: GUESS: <word>"},
                        {"role": "assistant", "content": f"GUESS: {WORDS[i % 8]}"},
                        {"role": "user", "content": "<red> <red> <green> <yellow> <red>. Guess again."},
                        {"role": "assistant", "content": f"GUESS: {WORDS[(i + 3) % 8]}"}]
            f.write(json.dumps({"messages": messages, "meta": {"game": "wordle"}}) + "\n")
    with prefs.open("w") as f:
        for i in range(16):
            prompt = [{"role": "user", "content": "Guess a five-letter word. Reply only with: GUESS: <word>"}]
            chosen = [{"role": "assistant", "content": f"GUESS: {WORDS[i % 8]}"}]
            f.write(json.dumps({"prompt": prompt, "chosen": chosen,
                                "rejected": [{"role": "assistant", "content": "maybe a word"}]}) + "\n")
    return {"sft": str(sft), "prefs": str(prefs)}


def losses(run) -> list[tuple[int, float]]:
    return [(r["step"], round(r["loss"], 5)) for r in read_jsonl(run.metrics) if "loss" in r]


def registry(run) -> dict:
    (entry,) = json.loads((run.path / "model_registry.json").read_text())
    return entry


# ---------------------------------------------------------------- SFT

def test_sft_lora_trains_registers_and_plots(storage, data):
    run = train("sft", storage, "experiment=sft", f"data={data['sft']}", "trainer.max_steps=3",
                "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")
    assert [s for s, _ in losses(run)] == [1, 2, 3]
    entry = registry(run)
    assert entry["model_name"] == f"sft-{run.path.name}" and run.path.name.startswith("sft-")
    assert entry["model_config"]["peft_model"] == str(run.path / "final")
    assert (run.path / "final" / "adapter_model.safetensors").is_file()
    assert (run.path / "learning_curve.png").stat().st_size > 1000
    assert list(run.logs.glob("events.out.tfevents.*"))
    assert (run.checkpoints / "checkpoint-3" / "playpen_state.json").is_file()


@pytest.mark.slow
def test_shipped_sft_config_trains_from_an_empty_folder(clean_cwd):
    """The first SFT needs nothing prepared: sft/tiny_lora trains on wordle's expert transcripts (data:
    expert:wordle), in a process of its own, from an empty folder."""
    out = playpen_ok(clean_cwd, "train", "sft", "--config", "sft/tiny_lora", "trainer.max_steps=1", "cpu_threads=1")
    (run,) = (clean_cwd / "runs" / "sft-tiny-lora").iterdir()
    assert f"done: {run}" in out and (run / "final" / "adapter_model.safetensors").is_file()


def test_sft_full_weights(storage, data):
    run = train("sft", storage, "experiment=sft-full", f"data={data['sft']}", "lora=null", "trainer.max_steps=2",
                "trainer.per_device_train_batch_size=4")
    entry = registry(run)
    assert entry["huggingface_id"] == str(run.path / "final") and "peft_model" not in entry["model_config"]
    assert (run.path / "final" / "model.safetensors").is_file()


def test_qlora_4bit_sft(storage, data):
    run = train("sft", storage, "experiment=qlora", f"data={data['sft']}", "quantization=4bit",
                "trainer.max_steps=2", "trainer.per_device_train_batch_size=4")
    assert len(losses(run)) == 2
    assert registry(run)["model_config"]["load_in_4bit"] is True


@pytest.mark.parametrize("method, bits", [("sft", "8bit"), ("dpo", "8bit"), ("grpo", "4bit")])
def test_quantized_lora_for_every_method(storage, data, method, bits):
    """QLoRA is a loading option of every recipe: the base model in bitsandbytes 4/8-bit, LoRA on top. GRPO plays
    its rollouts with the quantized model before the first optimizer step."""
    source = {"sft": [f"data={data['sft']}"], "dpo": [f"data={data['prefs']}"],
              "grpo": ["game=arithmetic", *GRPO_SMALL]}[method]
    run = train(method, storage, f"experiment=q-{method}", *source, f"quantization={bits}", "trainer.max_steps=2",
                *(["trainer.per_device_train_batch_size=4"] if method != "grpo" else []))
    assert [step for step, loss in losses(run)] == [1, 2] and all(math.isfinite(loss) for _, loss in losses(run))
    assert registry(run)["model_config"][f"load_in_{bits}"] is True


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(storage, data):
    args = ("experiment=resume", f"data={data['sft']}", "trainer.max_steps=6", "trainer.save_steps=2",
            "trainer.save_total_limit=null", "trainer.per_device_train_batch_size=4", "trainer.learning_rate=1e-3")
    run = train("sft", storage, *args)
    full = losses(run)
    # as if the job was killed after step 5 while writing checkpoint-6: 4 complete, 6 without its marker
    shutil.rmtree(run.path / "final")
    (run.checkpoints / "checkpoint-6" / "playpen_state.json").unlink()
    again = train("sft", storage, *args)
    assert again.path == run.path  # same command, same run dir
    assert losses(again) == full
    assert [r["step"] for r in read_jsonl(run.metrics) if "loss" in r] == [1, 2, 3, 4, 5, 6]


# ---------------------------------------------------------------- DPO

def test_dpo_static(storage, data):
    run = train("dpo", storage, "experiment=dpo", f"data={data['prefs']}", "trainer.max_steps=2",
                "trainer.per_device_train_batch_size=4")
    rows = [r for r in read_jsonl(run.metrics) if "loss" in r]
    assert len(rows) == 2 and "rewards/margins" in rows[0]


@pytest.mark.slow
def test_dpo_iterative_from_branching_rollouts(storage):
    run = train("dpo", storage, "experiment=dpo-play", "game=wordle", "instances=3", "group_size=3",
                "iterations=2", "max_new_tokens=8", "temperature=1.5", "trainer.max_steps=1",
                "trainer.per_device_train_batch_size=2")
    for k in (0, 1):
        assert (run.checkpoints / f"iter_{k:02d}" / "round_done.json").is_file()
        assert (run.path / "pairs" / f"iter_{k:02d}.jsonl").is_file()
        assert list(run.records.glob(f"*/iter_{k:05d}/wordle"))
    assert (run.path / "final" / "adapter_config.json").is_file()


# ---------------------------------------------------------------- GRPO

GRPO_SMALL = ("instances=2", "group_size=2", "max_new_tokens=8", "trainer.per_device_train_batch_size=2")


def record_dirs(run, prefix: str = "step") -> dict[str, int]:
    return {p.name: len(list(p.glob("*/*/instance_*"))) for p in sorted(run.records.glob(f"*/{prefix}_*"))}


@pytest.mark.slow
def test_grpo_self_play_writes_records_metrics_and_curve(storage):
    run = train("grpo", storage, "experiment=grpo", "game=arithmetic", *GRPO_SMALL, "trainer.max_steps=2",
                "validation_instances=2")
    rows = read_jsonl(run.metrics)
    train_rows = [r for r in rows if "reward" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    for key in ("loss", "reward", "reward_std", "kl", "episode_score", "aborted_pct", "tokens_per_second"):
        assert key in train_rows[-1], key
    assert [r["step"] for r in rows if "val/reward" in r] == [0, 2]
    assert record_dirs(run) == {"step_00000": 2, "step_00001": 2}
    assert (run.path / "learning_curve.png").is_file() and (run.path / "validation.json").is_file()
    assert registry(run)["model_config"]["peft_model"].endswith("final")


@pytest.mark.slow
def test_grpo_with_a_local_teacher(storage):
    run = train("grpo", storage, "experiment=grpo-teacher", "game=taboo", "partner=playpen-tiny",
                "self_play=false", *GRPO_SMALL, "trainer.max_steps=1")
    (models,) = [p.name for p in run.records.iterdir()]
    assert models == "playpen-tiny--playpen-tiny"
    assert record_dirs(run) == {"step_00000": 2}


@pytest.mark.slow
def test_grpo_resume_replays_without_duplicate_records(storage):
    args = ("experiment=grpo-resume", "game=arithmetic", *GRPO_SMALL, "trainer.max_steps=4", "trainer.save_steps=2",
            "trainer.save_total_limit=null", "trainer.learning_rate=1e-3")
    run = train("grpo", storage, *args)
    full, records = losses(run), record_dirs(run)
    assert json.loads((run.checkpoints / "checkpoint-4" / "playpen_state.json").read_text())["episodes"] == 8
    # killed during step 4's save (so before the final model): steps 3-4 are replayed
    shutil.rmtree(run.checkpoints / "checkpoint-4")
    shutil.rmtree(run.path / "final")
    again = train("grpo", storage, *args)
    assert losses(again) == full
    assert record_dirs(again) == records == {f"step_{s:05d}": 2 for s in range(4)}
    state = json.loads((run.checkpoints / "checkpoint-4" / "playpen_state.json").read_text())
    assert state["episodes"] == 8 and state["rollouts"] == 4


# ---------------------------------------------------------------- playpen run

def test_playpen_run_loads_the_first_trainer_class(tmp_path, monkeypatch):
    from playpen.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_trainer.py").write_text(
        "from playpen.train.base import BasePlaypenTrainer\n"
        "class Mine(BasePlaypenTrainer):\n"
        "    def learn(self):\n"
        "        reply = self.learner.generate_response([{'role': 'user', 'content': 'GUESS?'}])[2]\n"
        "        open('out.txt', 'w').write(f'{self.learner.name} {self.teacher} {type(reply).__name__} '\n"
        "                                   f'{self.learner.gen_args}')\n"
        "class Second(Mine):\n"
        "    pass\n")
    assert main(["run", "my_trainer.py", "-l", "playpen-tiny", "-L", "8", "-T", "0.5"]) == 0
    out = (tmp_path / "out.txt").read_text()
    assert out.startswith("playpen-tiny None str") and "'max_tokens': 8" in out and "0.5" in out


# ---------------------------------------------------------------- bad input: one line, nothing written

@pytest.mark.parametrize("argv, message", [
    (["train", "ppo"], "unknown method 'ppo'; choose one of: sft, dpo, grpo"),
    (["train", "sft", "experiment=x", "data=missing.jsonl"], "data file missing.jsonl not found"),
    (["train", "sft", "experiment=x", "lora=null"], "data is required: a jsonl file (`playpen data`), or expert:GAME"),
    (["train", "sft", "experiment=x", "data=expert:wordel"], "data: no expert for game 'wordel'; did you mean wordle?"),
    (["train", "sft", "experiment=x", "trainer.max_stepz=3"], "unknown key 'max_stepz'; did you mean max_steps"),
    # the documented form: overrides after --config reach the config
    (["train", "sft", "--config", "sft/tiny_lora", "experiment=x", "trainer.max_stepz=3"],
     "unknown key 'max_stepz'; did you mean max_steps"),
    (["train", "grpo", "experiment=x", "game=taboo", "self_play=false"], "it needs a partner"),
    (["train", "grpo", "experiment=x", "game=nogame"], "unknown game 'nogame'"),
    (["train", "grpo", "experiment=x", "game=taboo", "partner=gpt-4o-mini"],
     "partner 'gpt-4o-mini' uses the remote backend 'openai' but key.json has no 'openai' entry"),
    (["train", "grpo", "experiment=x", "game=wordle", "deepspeed=configs/deepspeed/zero9.json"],
     "deepspeed config configs/deepspeed/zero9.json not found"),
])
def test_bad_input_is_one_line(capsys, storage, monkeypatch, tmp_path, argv, message):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.clemcore/key.json
    err = fails(capsys, [*argv, f"storage_root={storage}"] if len(argv) > 2 else argv, storage)
    assert message in err, err


def test_missing_lora_target_modules(capsys, storage, data):
    err = fails(capsys, ["train", "sft", "experiment=x", f"data={data['sft']}",
                         "lora.target_modules=[q_proj,attn_out]", f"storage_root={storage}"], storage)
    assert "lora.target_modules attn_out not found in the model; its linear layers are:" in err
    assert "q_proj" in err.split("layers are:")[1]


def test_4bit_without_a_working_bitsandbytes(capsys, storage, data, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import fails as on a machine without it
    monkeypatch.setitem(sys.modules, "bitsandbytes.functional", None)
    err = fails(capsys, ["train", "sft", "experiment=x", f"data={data['sft']}", "quantization=4bit",
                         f"storage_root={storage}"], storage)
    assert "quantization: 4bit needs bitsandbytes, which cannot load here" in err


def test_corrupt_checkpoint_names_the_file(capsys, storage, data):
    args = ["experiment=corrupt", f"data={data['sft']}", "trainer.max_steps=2", "trainer.save_steps=1",
            "trainer.per_device_train_batch_size=4"]
    run = train("sft", storage, *args)
    weights = run.checkpoints / "checkpoint-2" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated
    shutil.rmtree(run.path / "final")  # as if stopped before the end: the rerun resumes from checkpoint-2
    from playpen.cli import main

    capsys.readouterr()  # drop the first run's progress output
    assert main(["train", "sft", f"storage_root={storage}", "cpu_threads=1", *args]) == 2  # same run dir as above
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"playpen: error: checkpoint file {weights} is corrupt") and "\n" not in err


# ---------------------------------------------------------------- a partner that fails

@pytest.mark.slow
def test_grpo_stops_when_the_teacher_fails(dead_partner, clean_cwd):
    err = refused_in_subprocess(clean_cwd, "train", "grpo", "storage_root=runs", "experiment=dead", "run_id=r1",
                                "game=taboo", f"partner={dead_partner}", "self_play=false", "instances=2",
                                "group_size=2", "max_new_tokens=8", "trainer.per_device_train_batch_size=2",
                                "trainer.max_steps=2", "cpu_threads=1")
    run = clean_cwd / "runs" / "dead" / "r1"
    assert err == (f"playpen: error: partner {dead_partner} failed in 2 of 2 episodes of step 0 (partner failed: "
                   f"APIConnectionError: Connection error.); stopped before training on them: check that its "
                   f"service is up and its key.json entry is valid (records: {run / 'playpen-records'})")
    assert len(list((run / "playpen-records").rglob("error.json"))) == 2  # what the teacher answered
    assert not (run / "final").exists() and not (run / "model_registry.json").exists()
    assert not list((run / "checkpoints").glob("checkpoint-*"))
