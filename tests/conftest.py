"""The fixtures the test files share; each name means one thing everywhere. Plain helpers are in helpers.py.

Models: `tiny` (playpen-tiny's folder), `tiny_model`, `policy`, `numberguess_player`. Working folders, each made
the current directory: `clean_cwd` (empty), `stocked_cwd` (one input file of each kind, for refused inputs),
`storage` (the storage root of training runs under an empty one). Inputs: `run_inputs` (the data files of
helpers.RUNS), `dead_partner` (a registered model whose service is down). `fresh_notes`: deprecation notes print
again, as in a new process. `devcluster`: the local SLURM dev cluster (tests/devcluster.py)."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.devcluster import devcluster  # noqa: F401  (session fixture: the local SLURM dev cluster)
from tests.helpers import train


@pytest.fixture(scope="session")
def tiny() -> Path:
    """The bundled playpen-tiny model's folder (built on first use)."""
    from playpen.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="module")
def tiny_model(tiny):
    """(model, tokenizer) of playpen-tiny, on one thread, as clemcore's huggingface backend runs: on a shared
    2-core machine the tiny model's many small ops are many times slower with two threads competing for cores."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield AutoModelForCausalLM.from_pretrained(tiny).eval(), AutoTokenizer.from_pretrained(tiny)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def policy(tiny_model):
    from playpen.rollout import LocalPolicy

    return LocalPolicy(*tiny_model, name="playpen-tiny")


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Path:
    """A scratch working folder; the storage root of training runs under it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


@pytest.fixture
def clean_cwd(tmp_path, monkeypatch) -> Path:
    """A clean working folder, made the current directory (no key.json, model_registry.json or runs of other
    tests; $PLAYPEN_STORAGE unset)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLAYPEN_STORAGE", raising=False)
    return tmp_path


@pytest.fixture
def stocked_cwd(tmp_path, monkeypatch) -> Path:
    """A working folder with one file of each kind a user may name (data, configs, a binary, a folder, broken
    JSON and YAML, a trainer file, a project folder with a model registry), made the current directory, and a
    home without key.json (models and caches stay where they are, so nothing is rebuilt)."""
    import clemcore  # noqa: F401  (importing it opens ./clembench.log: done before the folder compared is entered)

    from playpen.model_registry import playpen_home

    monkeypatch.setenv("PLAYPEN_HOME", str(playpen_home()))
    monkeypatch.setenv("HF_HOME", os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("PLAYPEN_STORAGE", raising=False)
    monkeypatch.delenv("PLAYPEN_CLUSTER", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    row = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]}
    (work / "sft.jsonl").write_text(json.dumps(row) + "\n")
    (work / "sft.yaml").write_text("experiment: x\ndata: sft.jsonl\ntrainer:\n  max_steps: 2\n")
    (work / "grpo.yaml").write_text("experiment: x\ngame: taboo\ntrainer:\n  max_steps: 2\n")
    (work / "binary.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00" * 8)
    (work / "folder").mkdir()
    (work / "folder" / "notes.txt").write_text("not a model, not a config")
    (work / "broken.json").write_text('{"experiments": [{"name": "a", "game_instances": [}')
    (work / "broken.yaml").write_text("experiment: x\ntrainer: [unclosed\n")
    (work / "list.yaml").write_text("- experiment\n- x\n")
    (work / "t.py").write_text("from playpen.train.base import BasePlaypenTrainer\n"
                               "class T(BasePlaypenTrainer):\n    def learn(self):\n        open('ran', 'w')\n")
    (work / "project").mkdir()  # a folder with a model registry that is not a training run
    (work / "project" / "model_registry.json").write_text(json.dumps([
        {"model_name": "mine", "backend": "huggingface_local", "huggingface_id": "x/y"}]))
    return work


@pytest.fixture(scope="session")
def run_inputs(tmp_path_factory) -> dict[str, str]:
    """The data files helpers.RUNS train on: sft (16 rows), prefs (8 preference pairs), other (sft's rows in
    another file); name -> path."""
    folder = tmp_path_factory.mktemp("inputs")
    turn = [{"role": "user", "content": "Guess a five-letter word. Reply only with: GUESS: <word>"}]
    with (folder / "sft.jsonl").open("w") as f:
        for word in ["apple", "crane", "slate", "house"] * 4:
            f.write(json.dumps({"messages": turn + [{"role": "assistant", "content": f"GUESS: {word}"}]}) + "\n")
    with (folder / "prefs.jsonl").open("w") as f:
        for word in ["apple", "crane", "slate", "house"] * 2:
            f.write(json.dumps({"prompt": turn, "chosen": [{"role": "assistant", "content": f"GUESS: {word}"}],
                                "rejected": [{"role": "assistant", "content": "maybe"}]}) + "\n")
    (folder / "other.jsonl").write_text((folder / "sft.jsonl").read_text())
    return {"sft": str(folder / "sft.jsonl"), "prefs": str(folder / "prefs.jsonl"),
            "other": str(folder / "other.jsonl")}


DEAD_BACKEND = '''"""An OpenAI-compatible service that is down: every request fails at once (no retries; clemcore's
openai_compatible backend retries for ~25 s per reply before it gives up the same way)."""
import openai

import clemcore.backends as backends


class DeadPartner(backends.RemoteBackend):
    def __init__(self):
        super().__init__(key_name="dead_partner")

    def _make_api_client(self):
        return openai.OpenAI(base_url=self.key["base_url"], api_key=self.key["api_key"], max_retries=0, timeout=5)

    def get_model_for(self, model_spec):
        return DeadModel(self.client, model_spec)


class DeadModel(backends.Model):
    def __init__(self, client, model_spec):
        super().__init__(model_spec)
        self.client = client

    def generate_response(self, messages):
        reply = self.client.chat.completions.create(model="dead", messages=messages, max_tokens=8)
        return messages, reply.model_dump(), reply.choices[0].message.content
'''


@pytest.fixture
def dead_partner(clean_cwd) -> str:
    """A registered model behind a closed localhost port, in `clean_cwd`; its key is in key.json (present,
    service unreachable). Its name."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (clean_cwd / "dead_partner_api.py").write_text(DEAD_BACKEND)
    (clean_cwd / "key.json").write_text(json.dumps({"dead_partner": {"api_key": "dummy-not-a-secret",
                                                                     "base_url": f"http://127.0.0.1:{port}/v1"}}))
    (clean_cwd / "model_registry.json").write_text(json.dumps([
        {"model_name": "dead-partner", "backend": "dead_partner", "model_id": "dead", "model_config": {}}]))
    return "dead-partner"


@pytest.fixture
def fresh_notes(monkeypatch):
    """Deprecation notes come once per process: with this fixture a test is a process of its own."""
    from playpen import config

    monkeypatch.setattr(config, "_NOTED", set())


@pytest.fixture(scope="session")
def numberguess_player(tmp_path_factory) -> Path:
    """playpen-tiny taught numberguess's format by 60 full-weight SFT steps on the expert's transcripts: it plays
    (100 % well-formed) and sometimes wins when sampled, which expert iteration and distillation tests need. The
    model folder (with its tokenizer)."""
    import json

    from playpen.games import demonstrations

    folder = tmp_path_factory.mktemp("numberguess-player")
    data = folder / "expert.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n"
                            for m in demonstrations(300, 0, games=("numberguess",))))
    run = train("sft", folder / "runs", "experiment=numberguess", f"data={data}", "lora=null",
                "trainer.max_steps=60", "trainer.learning_rate=2e-3", "trainer.per_device_train_batch_size=8",
                "trainer.save_steps=60")
    return run.path / "final"
