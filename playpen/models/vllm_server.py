"""A vLLM server for training on other nodes (TRL's server placement), and the trainer's side of it.

    python -m playpen.models.vllm_server --model smol-135m --state FILE [--port 8000] [--dtype float32]

The job script of a `--nodes N` submission with `vllm_mode: server` starts this on its first node (a background
job step) and trains on the others (playpen.submit.render). It resolves the model as training does (a registry
name, a folder; packaged weights made here), serves it with vLLM's own OpenAI server in development mode, and
keeps a small state file beside the job's logs: `starting` with the URL, then `exited` with the code and the last
lines of its log, or `failed` with the reason (a port taken). The trainer reads that file to find the server and to
say in one line why it went away (`wait_for_server`).

Weights travel through the run folder on shared storage: the trainer writes the current weights (an adapter
merged) as one safetensors file and asks the server to reload them in place (vLLM's `reload_weights`, over its
`/collective_rpc` endpoint), then resets the prefix cache. That works on CPU and GPU, for LoRA and full fine-tuning;
TRL's NCCL weight transfer (GPU only) would be faster for large models and is not used.

What it is not: a scheduler. It serves one model for one job and ends with it.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage import open_append

STATE_ENV = "PLAYPEN_VLLM_STATE"  # the state file a job's server writes and its trainer reads
SERVER_LOG_TAIL = 5  # lines of the server's log quoted when it ended


def port_free(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def serve_command(path: str, port: int, dtype: str, max_model_len: int, memory_fraction: float) -> list[str]:
    """vLLM's OpenAI server with what TRL's `vllm-serve` imposes for trainers (logprobs after temperature, no cap on
    their number), prefix caching on. (`vllm serve` itself looks up the distribution `vllm`, which the CPU build
    is not, so the server module is started directly.)"""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--host", "0.0.0.0",
            "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--gpu-memory-utilization", str(memory_fraction), "--enable-prefix-caching", "--enforce-eager",
            "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1", "--uvicorn-log-level", "warning"]


def write_state(path: Path, **state) -> None:
    """Whole or not at all, never through a link planted at its name (the job folder is the root)."""
    from playpen.storage import atomic_write_json

    atomic_write_json(path, {"time": time.time(), **state}, root=path.parent)


def read_state(path: str | Path | None) -> dict:
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def log_tail(path: Path, n: int = SERVER_LOG_TAIL) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-600:]


def serve(model: str, state: Path, port: int, dtype: str, max_model_len: int, memory_fraction: float) -> int:
    from playpen.models import service

    host = socket.gethostname()  # (as SLURM names the node: the other nodes resolve it)
    if port and not port_free(port):
        reason = (f"port {port} on {socket.gethostname()} is already taken (another server on this shared node?); "
                  f"set vllm_server_port to a free port, or 0 to pick one")
        write_state(state, state="failed", error=reason)
        print(f"playpen: error: {reason}", file=sys.stderr)
        return 2
    port = port or free_port()
    try:
        path = service.resolve_local(model)["huggingface_id"]
    except PlaypenError as e:
        write_state(state, state="failed", error=str(e))
        print(f"playpen: error: {e}", file=sys.stderr)
        return 2
    log = state.with_suffix(".log")
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")  # /collective_rpc and /reset_prefix_cache live there
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    out = open_append(log, "vLLM server log")  # (a link planted at its name is refused, not written through)
    try:
        child = subprocess.Popen(serve_command(path, port, dtype, max_model_len, memory_fraction), env=env,
                                 stdout=out, stderr=subprocess.STDOUT)
    finally:
        os.close(out)
    write_state(state, state="starting", url=f"http://{host}:{port}", host=host, pid=child.pid, log=str(log))
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    code = child.wait()
    write_state(state, state="exited", url=f"http://{host}:{port}", host=host, code=code, log=str(log),
                tail=log_tail(log))
    return 0 if code in (0, -signal.SIGTERM) else 1


# ---------------------------------------------------------------- the trainer's side

def wait_for_server(base_url: str | None, state_file: str | None, timeout_s: float, poll_s: float = 1.0) -> str:
    """The server's URL once its /health answers, within `timeout_s`; otherwise one line naming the URL and why
    (the state file says whether the server failed to start or exited, with its log's last lines)."""
    import requests

    if not base_url and not state_file:
        raise PlaypenError("vllm_mode: server needs a server: submit with --nodes 2 or more (the job starts one on "
                           "its first node), or set vllm_server_base_url to one you started")
    url = base_url.rstrip("/") if base_url else ""  # (else the one the job's server writes in its state file)
    deadline = time.monotonic() + timeout_s
    while True:
        state = read_state(state_file) if not base_url else {}
        url = url or state.get("url", "")
        if state.get("state") in ("failed", "exited"):
            raise PlaypenError(server_gone(state, url))
        if url:
            try:
                if requests.get(f"{url}/health", timeout=5).status_code == 200:
                    return url
            except requests.RequestException:
                pass
        if time.monotonic() > deadline:
            where = url or f"(no URL yet: the server's state file {state_file} was not written)"
            raise PlaypenError(f"the vLLM server at {where} did not answer within vllm_server_timeout={timeout_s:g} s; "
                               f"check that it runs (its log: {state.get('log') or 'the job folder'}), or raise "
                               f"vllm_server_timeout")
        time.sleep(poll_s)


def server_gone(state: dict, url: str) -> str:
    if state.get("state") == "failed":
        return f"the vLLM server did not start: {state.get('error')}"
    tail = f"; its log ends: {state['tail']}" if state.get("tail") else ""
    return f"the vLLM server at {url} exited with code {state.get('code')} (log: {state.get('log')}){tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playpen.models.vllm_server", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="registry name or folder, as the trainer's model:")
    parser.add_argument("--state", required=True, type=Path, help="the state file the trainer reads")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--memory-fraction", type=float, default=0.9, help="on a GPU: the share vLLM takes")
    args = parser.parse_args(argv)
    return serve(args.model, args.state, args.port, args.dtype, args.max_model_len, args.memory_fraction)


if __name__ == "__main__":
    sys.exit(main())
