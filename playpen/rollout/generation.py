"""Batched sampling with per-sequence KV caches that survive across turns.

One call to `generate` is one *wave*: every sequence in it gets one reply, all rows forward together.
Each `Sequence` holds every token the model has seen so far and, with the cache kept, the keys/values of all
but its last token. A wave therefore only encodes what is new for each row (the environment's message after
the previous reply, or the whole prompt for a fresh sequence) instead of re-encoding whole histories.

Layout of a wave (one row per sequence, columns are cache slots, `.` = masked):

    [ . . past_i (cached) | . . new_i (prefill) | decode tokens ... ]
      P columns             N columns             <= T - 1 columns

Gaps are masked in the 2D attention mask and positions are passed explicitly, so every row sees exactly its own
tokens at their own positions. Rows that finish early are masked from then on, and when at least half of the
batch has finished the finished rows are dropped from the batch (continuous batching inside a wave). At the end
the valid columns of each row are gathered, right-aligned, into a compact block that the next wave copies from.
Before a wave, fresh sequences get the prompt prefix they share encoded once, and rows with far more new tokens
than the rest (prompts of episodes joining running ones) are encoded apart (kvcache.py).

Models whose caches are not plain full-attention layers (sliding windows, linear attention) fall back to
re-encoding each row's whole sequence per wave with Hugging Face's own cache.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import DynamicCache

from playpen.rollout import kvcache
from playpen.rollout.kvcache import KVBlock

COMPACT_MIN_ROWS = 8  # do not bother dropping finished rows from smaller batches


@dataclass
class Sequence:
    """Everything one player's model has seen in one episode; `cached` leading tokens have keys/values in `block`."""
    ids: list[int]
    block: KVBlock | None = None
    row: int = 0
    cached: int = 0

    def copy(self) -> "Sequence":  # blocks are never written after creation, so branches may share them
        return Sequence(list(self.ids), self.block, self.row, self.cached)

    def drop_cache(self) -> None:
        self.block, self.row, self.cached = None, 0, 0


@dataclass
class Generated:
    ids: list[int] = field(default_factory=list)  # sampled tokens, including a final stop token if one came
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False  # ended with a stop token (not cut by the token limit)
    error: str | None = None  # e.g. the prompt no longer fits the context window

    @property
    def reply_ids(self) -> list[int]:
        return self.ids[:-1] if self.stopped else self.ids


class _Forward:
    """Calls the model, passing logits_to_keep=1 when its forward accepts it (saves the full-vocab projection)."""

    def __init__(self, model, known: dict):
        self.model = model
        self.known = known  # what was learned about this model: whether its forward takes logits_to_keep

    def __call__(self, **kwargs) -> torch.Tensor:
        if self.known["keep_last"]:
            try:
                return self.model(**kwargs, logits_to_keep=1).logits[:, -1]
            except TypeError:
                self.known["keep_last"] = False
        return self.model(**kwargs).logits[:, -1]


# per model, what its first waves learned about it; weakly keyed, so that a model played once (eval, a tournament,
# a study's checkpoints) is freed with its last reference, and nothing in a value refers to it
_KNOWN: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _forward_for(model) -> tuple[_Forward, int | None]:
    known = _KNOWN.get(model)
    if known is None:
        known = _KNOWN[model] = {"keep_last": True, "layers": kvcache.full_attention_layers(model)}
    return _Forward(model, known), known["layers"]


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    logits = logits.float()
    if temperature > 0:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        tokens = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
    else:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logp.argmax(dim=-1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def generate(policy, seqs: list[Sequence], *, max_new_tokens: int, temperature: float,
             generator: torch.Generator | None = None, keep_cache: bool = True,
             prefix_cache: dict | None = None) -> list[Generated]:
    """One reply per sequence. Appends the sampled tokens to each `seq.ids` and (keep_cache) leaves the keys and
    values of all but the last token in `seq.block`.

    prefix_cache: a dict kept by the caller for as long as the weights do not change (one `play`): the prompt
    prefix that fresh sequences share (a game's instructions, a GRPO group's prompt) is encoded once and reused
    by every later fresh sequence that starts with it."""
    results = [Generated() for _ in seqs]
    limit = policy.max_positions
    rows = []
    for i, seq in enumerate(seqs):
        budget = max_new_tokens if limit is None else min(max_new_tokens, limit - len(seq.ids))
        if budget <= 0:
            results[i].error = f"context window of {limit} tokens exceeded ({len(seq.ids)} tokens before the reply)"
            continue
        rows.append((i, budget))
    if not rows:
        return results
    model = policy.model
    forward, n_layers = _forward_for(model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if n_layers:
                if keep_cache:
                    kvcache.share_prefix(forward, n_layers, seqs, [i for i, _ in rows], prefix_cache, policy.device)
                    kvcache.prefill_long_rows(policy, forward, n_layers, seqs, [i for i, _ in rows])
                _wave(policy, forward, n_layers, seqs, rows, results, temperature, generator, keep_cache)
            else:
                _wave_reencode(policy, forward, seqs, rows, results, temperature, generator)
    finally:
        if was_training:
            model.train()
    return results


def _wave(policy, forward, n_layers, seqs, rows, results, temperature, generator, keep_cache):
    device = policy.device
    idx = [i for i, _ in rows]
    budgets = torch.tensor([b for _, b in rows])
    for i in idx:  # a sequence whose every token is cached (cannot happen in the engine): re-encode it
        if seqs[i].cached >= len(seqs[i].ids):
            seqs[i].drop_cache()
    cached = [seqs[i].cached for i in idx]
    news = [seqs[i].ids[seqs[i].cached:] for i in idx]
    B, P, N, T = len(idx), max(cached), max(len(n) for n in news), int(budgets.max())
    S = P + N + T - 1

    mask = torch.zeros(B, S, dtype=torch.long)
    input_ids = torch.full((B, N), policy.pad_id, dtype=torch.long)
    positions = torch.zeros(B, N, dtype=torch.long)
    for r, (c, new) in enumerate(zip(cached, news)):
        n = len(new)
        mask[r, P - c:P] = 1
        mask[r, P + N - n:P + N] = 1
        input_ids[r, N - n:] = torch.tensor(new)
        positions[r, N - n:] = torch.arange(c, c + n)
    cache = DynamicCache()
    cache.layers = kvcache.assemble_past(seqs, idx, P, S, n_layers)
    mask, input_ids, positions = mask.to(device), input_ids.to(device), positions.to(device)
    next_pos = positions[:, -1] + 1
    logits = forward(input_ids=input_ids, attention_mask=mask[:, :P + N], position_ids=positions,
                     past_key_values=cache, use_cache=True)

    alive = torch.arange(B)  # wave row of each current batch row
    stop_ids = torch.tensor(policy.stop_ids, device=device)
    budgets_dev = budgets.to(device)
    steps_tok, steps_lp, steps_rows = [], [], []
    active = torch.ones(B, dtype=torch.bool, device=device)
    finished_blocks: list[tuple[list[int], KVBlock, list[int]]] = []
    col = P + N
    for step in range(T):
        tokens, lps = _sample(logits, temperature, generator)
        steps_tok.append(tokens)
        steps_lp.append(lps)
        steps_rows.append((alive, active))
        active = active & ~torch.isin(tokens, stop_ids) & (step + 1 < budgets_dev[alive.to(device)])
        n_active = int(active.sum())
        if n_active == 0 or step == T - 1:
            break
        if len(alive) >= COMPACT_MIN_ROWS and n_active * 2 <= len(alive):
            keep = active.nonzero().squeeze(1)
            done = (~active).nonzero().squeeze(1)
            if keep_cache:
                finished_blocks.append(kvcache.extract(cache, mask[:, :col], done, alive))
            for layer in cache.layers:
                layer.batch_select_indices(keep)
            alive, mask, next_pos = alive[keep.cpu()], mask[keep], next_pos[keep]
            tokens, active = tokens[keep], active[keep]
        mask[:, col] = active.long()
        feed = torch.where(active, tokens, torch.full_like(tokens, policy.pad_id))
        logits = forward(input_ids=feed[:, None], attention_mask=mask[:, :col + 1], position_ids=next_pos[:, None],
                         past_key_values=cache, use_cache=True)
        next_pos = next_pos + 1
        col += 1

    _collect(steps_tok, steps_lp, steps_rows, idx, results, policy.stop_ids)
    for r, i in enumerate(idx):
        seqs[i].ids.extend(results[i].ids)
    if keep_cache:
        finished_blocks.append(kvcache.extract(cache, mask[:, :col], torch.arange(len(alive), device=device), alive))
        for wave_rows, block, counts in finished_blocks:
            for j, (wr, count) in enumerate(zip(wave_rows, counts)):
                seq = seqs[idx[wr]]
                assert count == len(seq.ids) - 1, "KV cache out of step with the token sequence"
                seq.block, seq.row, seq.cached = block, j, count
    else:
        for i in idx:
            seqs[i].drop_cache()


def _collect(steps_tok, steps_lp, steps_rows, idx, results, stop_ids):
    stop = set(stop_ids)
    tokens = [t.tolist() for t in steps_tok]
    lps = [lp.tolist() for lp in steps_lp]
    for step, (alive, active) in enumerate(steps_rows):
        act = active.tolist()
        for b, wr in enumerate(alive.tolist()):
            if not act[b]:
                continue
            out = results[idx[wr]]
            out.ids.append(tokens[step][b])
            out.logprobs.append(lps[step][b])
            if tokens[step][b] in stop:
                out.stopped = True


def _wave_reencode(policy, forward, seqs, rows, results, temperature, generator):
    """Fallback for caches with sliding-window or linear-attention layers: left-padded full re-encode per wave."""
    device = policy.device
    idx = [i for i, _ in rows]
    budgets = [b for _, b in rows]
    lengths = [len(seqs[i].ids) for i in idx]
    B, L, T = len(idx), max(lengths), max(budgets)
    input_ids = torch.full((B, L), policy.pad_id, dtype=torch.long)
    mask = torch.zeros(B, L + T, dtype=torch.long)
    for r, i in enumerate(idx):
        input_ids[r, L - lengths[r]:] = torch.tensor(seqs[i].ids)
        mask[r, L - lengths[r]:L] = 1
    positions = (mask[:, :L].cumsum(1) - 1).clamp(min=0)
    input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
    cache = DynamicCache(config=policy.model.config)
    logits = forward(input_ids=input_ids, attention_mask=mask[:, :L], position_ids=positions,
                     past_key_values=cache, use_cache=True)
    next_pos = positions[:, -1] + 1
    stop_ids = torch.tensor(policy.stop_ids, device=device)
    budgets_dev = torch.tensor(budgets, device=device)
    active = torch.ones(B, dtype=torch.bool, device=device)
    steps = []
    alive = torch.arange(B)
    for step in range(T):
        tokens, lps = _sample(logits, temperature, generator)
        steps.append((tokens, lps, active))
        active = active & ~torch.isin(tokens, stop_ids) & (step + 1 < budgets_dev)
        if not bool(active.any()) or step == T - 1:
            break
        mask[:, L + step] = 1
        feed = torch.where(active, tokens, torch.full_like(tokens, policy.pad_id))
        logits = forward(input_ids=feed[:, None], attention_mask=mask[:, :L + step + 1],
                         position_ids=next_pos[:, None], past_key_values=cache, use_cache=True)
        next_pos = next_pos + 1
    _collect([s[0] for s in steps], [s[1] for s in steps], [(alive, s[2]) for s in steps], idx, results,
             policy.stop_ids)
    for i in idx:
        seqs[i].ids.extend(results[i].ids)
        seqs[i].drop_cache()


def generate_groups(policy, groups: list[list[Sequence]], temperatures: list[float],
                    **options) -> list[list[Generated]]:
    """One reply per sequence of each group (a player's candidates share a group), each group at its temperature:
    groups of the same temperature generate together, in one `generate` call per temperature."""
    outs: list[list[Generated]] = [[] for _ in groups]
    vllm = getattr(policy, "vllm", None)  # a VLLMGenerator (vllm_backend.py) answers in place of this module
    for temperature in dict.fromkeys(temperatures):
        rows = [(i, seq) for i, (group, t) in enumerate(zip(groups, temperatures)) if t == temperature
                for seq in group]
        seqs = [seq for _, seq in rows]
        if vllm is not None:
            replies = vllm.generate(seqs, max_new_tokens=options["max_new_tokens"], temperature=temperature,
                                    stop_ids=policy.stop_ids)
        else:
            replies = generate(policy, seqs, temperature=temperature, **options)
        for (i, _), out in zip(rows, replies):
            outs[i].append(out)
    return outs
