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

Models whose caches are not plain full-attention layers (sliding windows, linear attention) fall back to
re-encoding each row's whole sequence per wave with Hugging Face's own cache.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

COMPACT_MIN_ROWS = 8  # do not bother dropping finished rows from smaller batches
MIN_SHARED_PREFIX = 16  # shorter shared prompt prefixes are not worth a separate forward
LONG_ROW_MARGIN = 32  # a row's new tokens count as "long" above 2 x the wave's median + this


@dataclass
class KVBlock:
    """Keys/values of several sequences, each row right-aligned: row r holds its tokens in the last columns."""
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [rows, kv_heads, length, head_dim]

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[2]


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


class _GrowLayer(DynamicLayer):
    """A full-attention cache layer with preallocated room, written in place (no per-step concatenation)."""

    def __init__(self, capacity: int, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                 length: int = 0):
        super().__init__()
        self.capacity, self.length = capacity, length
        self.buf_k, self.buf_v = keys, values
        if keys is not None:
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self._views()

    def _views(self):
        self.keys = self.buf_k[:, :, :self.length]
        self.values = self.buf_v[:, :, :self.length]

    def lazy_initialization(self, key_states, value_states):
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, d = key_states.shape
        self.buf_k = key_states.new_zeros(b, h, self.capacity, d)
        self.buf_v = value_states.new_zeros(b, h, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[2]
        if self.length + n > self.buf_k.shape[2]:  # never expected; stay correct anyway
            extra = self.length + n - self.buf_k.shape[2]
            self.buf_k = torch.cat([self.buf_k, self.buf_k.new_zeros(*self.buf_k.shape[:2], extra,
                                                                     self.buf_k.shape[3])], 2)
            self.buf_v = torch.cat([self.buf_v, self.buf_v.new_zeros(*self.buf_v.shape[:2], extra,
                                                                     self.buf_v.shape[3])], 2)
        self.buf_k[:, :, self.length:self.length + n] = key_states
        self.buf_v[:, :, self.length:self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.buf_k, self.buf_v = self.buf_k[indices], self.buf_v[indices]
        self._views()


def _full_attention_layers(model) -> int | None:
    """Number of cache layers if all are plain full-attention layers (gapped caches are exact), else None."""
    config = getattr(model, "config", None)
    try:
        probe = DynamicCache(config=config)
    except Exception:  # noqa: BLE001 - unknown config shapes: take the safe path
        return None
    if probe.layers and all(type(layer) is DynamicLayer for layer in probe.layers):
        return len(probe.layers)
    return None


class _Forward:
    """Calls the model, passing logits_to_keep=1 when its forward accepts it (saves the full-vocab projection)."""

    def __init__(self, model):
        self.model = model
        self.keep_last = True

    def __call__(self, **kwargs) -> torch.Tensor:
        if self.keep_last:
            try:
                return self.model(**kwargs, logits_to_keep=1).logits[:, -1]
            except TypeError:
                self.keep_last = False
        return self.model(**kwargs).logits[:, -1]


_FORWARDS: dict[int, tuple[object, _Forward, int | None]] = {}


def _forward_for(model) -> tuple[_Forward, int | None]:
    entry = _FORWARDS.get(id(model))
    if entry is None or entry[0] is not model:
        entry = (model, _Forward(model), _full_attention_layers(model))
        _FORWARDS[id(model)] = entry
    return entry[1], entry[2]


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
                    _share_prefix(forward, n_layers, seqs, [i for i, _ in rows], prefix_cache, policy.device)
                    _prefill_long_rows(policy, forward, n_layers, seqs, [i for i, _ in rows])
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
    cache.layers = _assemble_past(seqs, idx, P, S, n_layers)
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
                finished_blocks.append(_extract(cache, mask[:, :col], done, alive))
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
        finished_blocks.append(_extract(cache, mask[:, :col], torch.arange(len(alive), device=device), alive))
        for wave_rows, block, counts in finished_blocks:
            for j, (wr, count) in enumerate(zip(wave_rows, counts)):
                seq = seqs[idx[wr]]
                assert count == len(seq.ids) - 1, "KV cache out of step with the token sequence"
                seq.block, seq.row, seq.cached = block, j, count
    else:
        for i in idx:
            seqs[i].drop_cache()


def _share_prefix(forward, n_layers, seqs, idx, prefix_cache, device) -> int:
    """Give fresh sequences (nothing cached) the keys/values of the prompt prefix they share, encoded once.
    Returns the length of the prefix used (0 if none)."""
    fresh = [i for i in idx if seqs[i].cached == 0]
    if not fresh:
        return 0
    known = prefix_cache.get("prefix") if prefix_cache is not None else None
    if known is not None:
        ids, block = known
        for i in fresh:
            if len(seqs[i].ids) > len(ids) and seqs[i].ids[:len(ids)] == ids:
                seqs[i].block, seqs[i].row, seqs[i].cached = block, 0, len(ids)
        fresh = [i for i in fresh if seqs[i].cached == 0]
    if len(fresh) < 2:
        return len(known[0]) if known is not None else 0
    shared = os.path.commonprefix([seqs[i].ids for i in fresh])
    shared = shared[:min(len(seqs[i].ids) for i in fresh) - 1]
    if len(shared) < MIN_SHARED_PREFIX:
        return 0
    cache = DynamicCache()
    cache.layers = [_GrowLayer(len(shared)) for _ in range(n_layers)]
    forward(input_ids=torch.tensor([shared], device=device), position_ids=torch.arange(len(shared), device=device)[None],
            past_key_values=cache, use_cache=True)
    block = KVBlock([(layer.keys, layer.values) for layer in cache.layers])
    for i in fresh:
        seqs[i].block, seqs[i].row, seqs[i].cached = block, 0, len(shared)
    if prefix_cache is not None:
        prefix_cache["prefix"] = (list(shared), block)
    return len(shared)


def _prefill_long_rows(policy, forward, n_layers, seqs, idx) -> int:
    """Rows with far more new tokens than the others (fresh prompts joining a batch of running episodes) are
    encoded first, on their own, up to the typical new length, so the wave does not pad every row to the
    longest prompt."""
    if len(idx) < 2:
        return 0
    pending = {i: len(seqs[i].ids) - seqs[i].cached for i in idx}
    typical = sorted(pending.values())[len(idx) // 2]
    long_rows = [i for i in idx if pending[i] > 2 * typical + LONG_ROW_MARGIN]
    if not long_rows or len(long_rows) == len(idx):
        return 0
    cached = [seqs[i].cached for i in long_rows]
    news = [seqs[i].ids[seqs[i].cached:len(seqs[i].ids) - typical] for i in long_rows]
    B, P, N = len(long_rows), max(cached), max(len(n) for n in news)
    mask = torch.zeros(B, P + N, dtype=torch.long)
    input_ids = torch.full((B, N), policy.pad_id, dtype=torch.long)
    positions = torch.zeros(B, N, dtype=torch.long)
    for r, (c, new) in enumerate(zip(cached, news)):
        mask[r, P - c:P] = 1
        mask[r, P + N - len(new):] = 1
        input_ids[r, N - len(new):] = torch.tensor(new)
        positions[r, N - len(new):] = torch.arange(c, c + len(new))
    device = policy.device
    cache = DynamicCache()
    cache.layers = _assemble_past(seqs, long_rows, P, P + N, n_layers)
    mask = mask.to(device)
    forward(input_ids=input_ids.to(device), attention_mask=mask, position_ids=positions.to(device),
            past_key_values=cache, use_cache=True)
    rows = torch.arange(B, device=device)
    _, block, counts = _extract(cache, mask, rows, torch.arange(B))
    for r, (i, count) in enumerate(zip(long_rows, counts)):
        assert count == len(seqs[i].ids) - typical
        seqs[i].block, seqs[i].row, seqs[i].cached = block, r, count
    return B


def _assemble_past(seqs, idx, P, S, n_layers) -> list[_GrowLayer]:
    """Copy each row's cached keys/values into the wave's buffers, right-aligned at column P."""
    groups: dict[int, tuple[KVBlock, list[int], list[int]]] = {}
    for r, i in enumerate(idx):
        seq = seqs[i]
        if seq.block is not None and seq.cached > 0:
            groups.setdefault(id(seq.block), (seq.block, [], []))
            groups[id(seq.block)][1].append(r)
            groups[id(seq.block)][2].append(seq.row)
    if not groups:
        return [_GrowLayer(S) for _ in range(n_layers)]
    first = next(iter(groups.values()))[0]
    layers = []
    for layer_no, (k0, v0) in enumerate(first.layers):
        keys = k0.new_zeros(len(idx), k0.shape[1], S, k0.shape[3])
        values = v0.new_zeros(len(idx), v0.shape[1], S, v0.shape[3])
        for block, wave_rows, block_rows in groups.values():
            k, v = block.layers[layer_no]
            width = min(block.length, P)
            src_rows = torch.tensor(block_rows, device=k.device)
            dst_rows = torch.tensor(wave_rows, device=k.device)
            keys[dst_rows, :, P - width:P] = k.index_select(0, src_rows)[:, :, block.length - width:]
            values[dst_rows, :, P - width:P] = v.index_select(0, src_rows)[:, :, block.length - width:]
        layers.append(_GrowLayer(S, keys, values, P))
    return layers


def _extract(cache, mask: torch.Tensor, batch_rows: torch.Tensor, alive: torch.Tensor):
    """Gather the valid columns of some batch rows into a new right-aligned block."""
    sub = mask.index_select(0, batch_rows)
    counts = sub.sum(1)
    width = int(counts.max())
    cols = torch.arange(sub.shape[1], device=sub.device).expand_as(sub)
    order = torch.where(sub.bool(), cols, torch.full_like(cols, -1)).sort(dim=1).values[:, sub.shape[1] - width:]
    order = order.clamp(min=0)
    everything = len(batch_rows) == mask.shape[0]
    layers = []
    for layer in cache.layers:
        k = layer.keys if everything else layer.keys.index_select(0, batch_rows)
        v = layer.values if everything else layer.values.index_select(0, batch_rows)
        gk = order[:, None, :, None].expand(k.shape[0], k.shape[1], width, k.shape[3])
        gv = order[:, None, :, None].expand(v.shape[0], v.shape[1], width, v.shape[3])
        layers.append((k.gather(2, gk), v.gather(2, gv)))
    wave_rows = alive[batch_rows.cpu()].tolist()
    return wave_rows, KVBlock(layers), counts.tolist()


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
