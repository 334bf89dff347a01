"""The vLLM server placement (playpen.models.vllm_server, ServedVLLM, ServedGenerator, the job script's two steps):

- refusals, one line each and before anything runs: a port already taken, a server that never answers, one that
  failed to start or exited (its log's last lines quoted), no server to use, --nodes 1;
- the dry-run job script: the server as a background step on the first node, training on the others;
- with vLLM, one server for the module (playpen-tiny, float32): the logprobs it reports for the tokens it sampled are
  the model's; after full fine-tuning changes every weight (tied embeddings too), the server scores as the old
  weights until `sync_weights`, and as the new ones after; a server that dies mid-run is one line;
- on the 2-node dev cluster, GRPO through `python -m playpen.submit --nodes 2` with the server on one node and the
  trainer on the other.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from playpen.errors import PlaypenError
from playpen.models import vllm_server
from tests.devcluster import wait_until
from tests.helpers import needs_vllm, printed, submit_cli

LOGPROB_BOUND = 1e-3  # max |server's sampled-token logprob - the model's| (float32; measured ~1e-6)


# ---------------------------------------------------------------- refusals

def test_a_taken_port_is_one_line_and_a_failed_state(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = vllm_server.serve("playpen-tiny", tmp_path / "state.json", port, "float32", 2048, 0.9)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"port {port}" in err and "already taken" in err and "vllm_server_port" in err
    state = vllm_server.read_state(tmp_path / "state.json")
    assert state["state"] == "failed"
    with pytest.raises(PlaypenError, match=f"did not start: port {port} on .* is already taken"):
        vllm_server.wait_for_server(None, str(tmp_path / "state.json"), timeout_s=5)


def test_a_server_that_never_answers_is_one_line_naming_its_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed again: nothing listens there)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(PlaypenError, match=f"the vLLM server at {url} did not answer within "
                                           f"vllm_server_timeout=1.5 s") as e:
        vllm_server.wait_for_server(url, None, timeout_s=1.5, poll_s=0.2)
    assert time.monotonic() - started < 10 and "\n" not in str(e.value)


def test_a_server_that_exited_is_named_with_its_code_and_log(tmp_path):
    state, log = tmp_path / "state.json", tmp_path / "state.log"
    log.write_text("INFO loading\nValueError: bad model\n")
    vllm_server.write_state(state, state="exited", url="http://node0:8000", code=1, log=str(log),
                            tail=vllm_server.log_tail(log))
    with pytest.raises(PlaypenError, match=r"at http://node0:8000 exited with code 1 .*its log ends: INFO "
                                           r"loading \| ValueError: bad model"):
        vllm_server.wait_for_server(None, str(state), timeout_s=5)


def test_no_server_to_use_is_one_line():
    with pytest.raises(PlaypenError, match="submit with --nodes 2 or more .* or set vllm_server_base_url"):
        vllm_server.wait_for_server(None, None, timeout_s=1)


def test_server_placement_on_one_node_is_refused_before_submitting(tmp_path):
    out = submit_cli("grpo", "--config", "grpo/tiny_selfplay", "use_vllm=true", "vllm_mode=server",
                     "--executor", "local", "--dry-run", f"storage_root={tmp_path}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "vllm_mode: server puts a vLLM server on the job's first node" in out.stderr
    assert "--nodes 2 or more (got --nodes 1)" in out.stderr


def test_the_job_script_runs_the_server_on_the_first_node_and_trains_on_the_others(tmp_path):
    out = submit_cli("grpo", "--config", "grpo/tiny_selfplay", "use_vllm=true", "vllm_mode=server",
                     "vllm_server_port=8123", "--nodes", "3", "--gpus-per-node", "2", "--dry-run",
                     f"storage_root={tmp_path}")
    assert out.returncode == 0, out.stderr
    script = out.stdout
    setup = script[script.index("# setup"):script.index("# command")]
    server = next(line for line in setup.splitlines() if "playpen.models.vllm_server" in line)
    assert server.startswith("srun --nodes=1 --ntasks=1 --relative=0 ") and server.endswith(" &")
    assert ("-u -m playpen.models.vllm_server --model playpen-tiny --state \"$PLAYPEN_VLLM_STATE\" --port 8123 "
            "--dtype bfloat16") in server
    assert setup.index('export PLAYPEN_VLLM_STATE="') < setup.index('rm -f "$PLAYPEN_VLLM_STATE"') \
        < setup.index(server)
    training = next(line for line in script.splitlines() if line.startswith("srun --unbuffered"))
    assert "--relative=1 --nodes=2 --ntasks=4 " in training  # 2 nodes × 2 GPUs, one task each
    assert "#SBATCH --nodes=3" in script


def test_the_training_step_rendezvous_uses_the_steps_nodes(monkeypatch):
    from playpen.submit import jobs

    env = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[0-2]",
           "SLURM_JOB_NUM_NODES": "3", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_NODES": "2",
           "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
           vllm_server.STATE_ENV: "/x/vllm-server-7.json"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in jobs.DIST_VARS:  # (set first, so that the rendezvous it exports is undone after the test)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    task = jobs.setup_distributed(use_gpus=False)
    assert (task.rank, task.world_size) == (1, 2)
    assert task.master.startswith("n1:") and os.environ["MASTER_ADDR"] == "n1"  # not the server's node
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"


# ---------------------------------------------------------------- one real server

@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    """The wrapper as a job starts it, on a free port; ends with the module."""
    folder = tmp_path_factory.mktemp("vllm-server")
    state = folder / "vllm-server-1.json"
    proc = subprocess.Popen([sys.executable, "-u", "-m", "playpen.models.vllm_server", "--model", str(tiny),
                             "--state", str(state)], stdout=(folder / "wrapper.out").open("w"),
                            stderr=subprocess.STDOUT)
    try:
        yield {"state": str(state), "proc": proc, "folder": folder}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def served(server, tiny):
    """A full (no adapter) playpen-tiny and the ServedVLLM of its weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from playpen.models.vllm_engine import connect_server

    model = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    engine = connect_server(model, tokenizer, base_url=None, state_file=server["state"], timeout_s=600,
                            weights_dir=str(server["folder"] / "weights"), root=str(server["folder"]))
    return model, tokenizer, engine


def sampled(served_engine, tokenizer, temperature: float, seed_text: str = "Guess a five-letter word."):
    from playpen.rollout.generation import Sequence
    from playpen.rollout.vllm_backend import ServedGenerator

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": seed_text}], add_generation_prompt=True,
                                           tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    seqs = [Sequence(list(ids)) for _ in range(4)]
    out = ServedGenerator(served_engine).generate(seqs, max_new_tokens=12, temperature=temperature,
                                                  stop_ids=[tokenizer.eos_token_id])
    return ids, out


def model_logprobs(model, prompt: list[int], reply: list[int], temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + reply])).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None])[:, 0]


def worst_gap(model, prompt, out, temperature) -> float:
    return max((model_logprobs(model, prompt, g.ids, temperature) - torch.tensor(g.logprobs)).abs().max().item()
               for g in out if g.ids)


@needs_vllm
@pytest.mark.slow
def test_served_logprobs_follow_full_weights_only_after_sync(served, capsys):
    model, tokenizer, engine = served
    engine.sync_weights()
    prompt, out = sampled(engine, tokenizer, 1.3)
    before = worst_gap(model, prompt, out, 1.3)
    assert all(g.ids for g in out) and before <= LOGPROB_BOUND
    # full fine-tuning moves every weight, the tied embeddings (and so the output head) too
    old = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    _, out = sampled(engine, tokenizer, 0.0)  # greedy: the server still plays the old weights
    with torch.no_grad():
        changed, kept = model_logprobs(model, prompt, out[0].ids, 1.0), torch.tensor(out[0].logprobs)
    assert (changed - kept).abs().max().item() > 1e-2  # stale, as expected before a sync
    engine.sync_weights()
    _, out = sampled(engine, tokenizer, 1.3)
    after = worst_gap(model, prompt, out, 1.3)
    with capsys.disabled():
        print(f"\n[vllm server] sampled-token logprobs vs the model: max |d| {before:.1e} before training, "
              f"{after:.1e} after full fine-tuning and sync")
    assert after <= LOGPROB_BOUND
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(old[name])


@needs_vllm
@pytest.mark.slow
def test_a_server_that_dies_mid_run_is_one_line(served, server):
    from requests.adapters import HTTPAdapter

    _, tokenizer, engine = served
    engine.vllm_client.session.mount("http://", HTTPAdapter(max_retries=0))  # (TRL retries for a minute)
    os.kill(json.loads(Path(server["state"]).read_text())["pid"], signal.SIGKILL)
    wait_until(lambda: vllm_server.read_state(server["state"]).get("state") == "exited", 60, "the wrapper")
    with pytest.raises(PlaypenError, match=r"the vLLM server at http://\S+ exited with code -9 \(log: ") as e:
        sampled(engine, tokenizer, 1.0)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- two nodes

@needs_vllm
@pytest.mark.slurm
@pytest.mark.slow
def test_grpo_trains_on_one_node_against_a_server_on_the_other(devcluster, tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text(f"experiment: served\nmodel: playpen-tiny\ngame: arithmetic\ninstances: 4\ngroup_size: 2\n"
                      f"max_new_tokens: 12\nuse_vllm: true\nvllm_mode: server\nvllm_server_timeout: 600\n"
                      f"storage_root: {tmp_path / 'runs'}\n"
                      f"trainer:\n  max_steps: 2\n  save_steps: 2\n  per_device_train_batch_size: 4\n")
    out = submit_cli("grpo", "--config", str(config), "--cluster", "devcluster", "--nodes", "2", "--wait",
                     timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = Path(printed(out.stdout, "run dir"))
    folder = Path(printed(out.stdout, "logs")).parent
    job_id = printed(out.stdout, "cancel").split()[1]
    state = json.loads((folder / f"vllm-server-{job_id}.json").read_text())
    server_log = Path(state["log"]).read_text()
    assert server_log.count("Reloading weights inplace") >= 1 and "Reloading and processing weights" in server_log
    train_log = next(folder.glob(f"{job_id}_0_log.out")).read_text() + \
        next(folder.glob(f"{job_id}_0_log.err")).read_text()
    result = eval(out.stdout.split("finished: ", 1)[1].splitlines()[0])  # noqa: S307  (the CLI's repr)
    result = result[0] if isinstance(result, list) else result
    assert (state["host"], result["host"], result["world_size"]) == ("node1", "node2", 1)
    steps = [m["step"] for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in m]
    assert steps == [1, 2], train_log[-2000:]
    assert sorted(p.name for p in (run_dir / "playpen-records").glob("*/step_*")) == ["step_00000", "step_00001"]
