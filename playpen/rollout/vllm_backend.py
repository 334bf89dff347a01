"""vLLM as the rollout engine's generator: the same waves as generation.py, answered by a vLLM engine (paged
attention, continuous batching, prefix caching) instead of playpen's own Hugging Face decoding loop.

    policy.vllm = VLLMGenerator(engine.llm)   # an engine of the policy's weights (playpen.models.vllm_engine)
    RolloutEngine(policy, ...).play(...)      # every wave of this policy now goes through vLLM

What it is: `VLLMGenerator.generate(seqs, ...)`, a drop-in for `generation.generate`: one reply per Sequence, the
token ids exactly as vLLM sampled them (appended to `seq.ids`, never re-tokenized from text), and each sampled
token's log-probability after temperature (vLLM's `processed_logprobs`, as generation.py computes them and as
TRL's importance sampling expects). vLLM's prefix cache does what generation.py's shared-prefix encoding and
per-sequence KV blocks do, so nothing is kept per sequence between waves.

`ServedGenerator` is the same over HTTP, for a vLLM server on another node (TRL's `VLLMClient`, the completions
endpoint with token ids in and out).

What it is not: a weight sync. Whoever trains owns that (playpen.models.vllm_engine: TRL's sync, after every
optimizer step or round). Games, records, traces and scores do not know which generator answered.
"""
from __future__ import annotations

import random
from typing import Any

from playpen.rollout.generation import Generated, Sequence


class VLLMGenerator:
    """Generates the engine's waves with a vLLM `LLM` (playpen.models.vllm_engine starts one)."""

    def __init__(self, llm: Any, seed: int | None = None):
        from vllm.platforms import current_platform

        self.llm = llm
        self._seeds = random.Random(seed)
        self.max_model_len = llm.llm_engine.model_config.max_model_len
        # Per-request seeds make a rerun sample the same episodes. vLLM 0.31's CPU backend cannot rewind a seeded
        # request's generator when it discards a sampled token ("CPU Generator does not use offset"), so on CPU
        # requests draw from the engine's own seeded generator instead.
        self.per_request_seeds = seed is not None and not current_platform.is_cpu()

    def generate(self, seqs: list[Sequence], *, max_new_tokens: int, temperature: float,
                 stop_ids: list[int]) -> list[Generated]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        results = [Generated() for _ in seqs]
        prompts, params, rows = [], [], []
        for i, budget in budgets(seqs, results, max_new_tokens, self.max_model_len).items():
            rows.append(i)
            prompts.append(TokensPrompt(prompt_token_ids=list(seqs[i].ids)))
            params.append(SamplingParams(temperature=temperature, max_tokens=budget, logprobs=0,
                                         stop_token_ids=list(stop_ids), skip_special_tokens=False,
                                         seed=self._seeds.getrandbits(31)
                                         if self.per_request_seeds and temperature > 0 else None,
                                         detokenize=False))
        if not rows:
            return results
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        stops = set(stop_ids)
        for i, output in zip(rows, outputs):
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            reply(seqs[i], results[i], ids, [entry[token].logprob for token, entry in zip(ids, completion.logprobs)],
                  stops)
        return results


class ServedGenerator:
    """`VLLMGenerator` for a vLLM server (playpen.models.vllm_engine.ServedVLLM): the same requests and results,
    sent through TRL's `VLLMClient`. The server's engine draws from its own seeded generator."""

    def __init__(self, served: Any):
        self.served = served
        self.max_model_len = served.max_model_len

    def generate(self, seqs: list[Sequence], *, max_new_tokens: int, temperature: float,
                 stop_ids: list[int]) -> list[Generated]:
        from playpen.errors import PlaypenError

        results = [Generated() for _ in seqs]
        by_budget: dict[int, list[int]] = {}
        for i, budget in budgets(seqs, results, max_new_tokens, self.max_model_len).items():
            by_budget.setdefault(budget, []).append(i)  # (one request per budget: max_tokens is per request)
        stops = set(stop_ids)
        for budget, rows in by_budget.items():
            try:
                out = self.served.vllm_client.generate(
                    [list(seqs[i].ids) for i in rows], temperature=temperature, max_tokens=budget, logprobs=0,
                    generation_kwargs={"stop_token_ids": list(stop_ids), "skip_special_tokens": False})
            except Exception as e:  # noqa: BLE001  (requests' errors, and VLLMClient's own for a non-200 answer)
                raise PlaypenError(self.served.gone(e)) from None
            for i, ids, logprobs, logprob_ids in zip(rows, out["completion_ids"], out["logprobs"],
                                                     out["logprob_token_ids"]):
                reply(seqs[i], results[i], list(ids),
                      [values[tokens.index(token)] for token, values, tokens in zip(ids, logprobs, logprob_ids)], stops)
        return results


def budgets(seqs: list[Sequence], results: list[Generated], max_new_tokens: int, max_model_len: int) -> dict:
    """Sequence index → its reply's token budget; a sequence already at the context window gets its error."""
    out = {}
    for i, seq in enumerate(seqs):
        budget = min(max_new_tokens, max_model_len - len(seq.ids))
        if budget <= 0:
            results[i].error = (f"context window of {max_model_len} tokens exceeded ({len(seq.ids)} tokens before "
                                f"the reply)")
        else:
            out[i] = budget
    return out


def reply(seq: Sequence, result: Generated, ids: list[int], logprobs: list[float], stops: set) -> None:
    """The sampled tokens and their logprobs as the result, appended to the sequence as they are."""
    result.ids, result.logprobs = ids, logprobs
    result.stopped = bool(ids) and ids[-1] in stops
    seq.ids.extend(ids)
    seq.drop_cache()


def generator_for(model, tokenizer, seed: int, memory_fraction: float = 0.9) -> VLLMGenerator:
    """A colocated vLLM engine of a frozen `model`'s weights (an adapter merged in), in its dtype, as a generator
    (eval, screen, the benchmarks; training keeps its engine in the session and syncs it: train.game_play)."""
    import torch

    from playpen.models.vllm_engine import start_colocated

    dtype = next(model.parameters()).dtype
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 2048
    engine = start_colocated(model, tokenizer, dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
                             max_model_len=min(positions, 4096), memory_fraction=memory_fraction, seed=seed)
    if hasattr(model, "peft_config"):  # vLLM loaded the base model's files: the adapter is merged in now
        engine.sync_weights()
    return VLLMGenerator(engine.llm, seed)
