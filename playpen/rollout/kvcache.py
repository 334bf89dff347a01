"""Keys/values kept between turns: compact per-sequence blocks, the growable cache layer a wave decodes into,
and the two prefill shortcuts (a prompt prefix shared by fresh sequences, long new segments encoded apart).

A `KVBlock` holds several sequences' keys/values, each row right-aligned (row r's tokens fill its last columns).
Blocks are never written after creation, so sequences (and branches of an episode) may share them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

MIN_SHARED_PREFIX = 16  # shorter shared prompt prefixes are not worth a separate forward
LONG_ROW_MARGIN = 32  # a row's new tokens count as "long" above 2 x the wave's median + this


@dataclass
class KVBlock:
    """Keys/values of several sequences, each row right-aligned: row r holds its tokens in the last columns."""
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [rows, kv_heads, length, head_dim]

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[2]


class GrowLayer(DynamicLayer):
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


def full_attention_layers(model) -> int | None:
    """Number of cache layers if all are plain full-attention layers (gapped caches are exact), else None."""
    config = getattr(model, "config", None)
    try:
        probe = DynamicCache(config=config)
    except Exception:  # noqa: BLE001 - unknown config shapes: take the safe path
        return None
    if probe.layers and all(type(layer) is DynamicLayer for layer in probe.layers):
        return len(probe.layers)
    return None


def share_prefix(forward, n_layers, seqs, idx, prefix_cache, device) -> int:
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
    cache.layers = [GrowLayer(len(shared)) for _ in range(n_layers)]
    positions = torch.arange(len(shared), device=device)[None]
    forward(input_ids=torch.tensor([shared], device=device), position_ids=positions, past_key_values=cache,
            use_cache=True)
    block = KVBlock([(layer.keys, layer.values) for layer in cache.layers])
    for i in fresh:
        seqs[i].block, seqs[i].row, seqs[i].cached = block, 0, len(shared)
    if prefix_cache is not None:
        prefix_cache["prefix"] = (list(shared), block)
    return len(shared)


def prefill_long_rows(policy, forward, n_layers, seqs, idx) -> int:
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
    cache.layers = assemble_past(seqs, long_rows, P, P + N, n_layers)
    mask = mask.to(device)
    forward(input_ids=input_ids.to(device), attention_mask=mask, position_ids=positions.to(device),
            past_key_values=cache, use_cache=True)
    rows = torch.arange(B, device=device)
    _, block, counts = extract(cache, mask, rows, torch.arange(B))
    for r, (i, count) in enumerate(zip(long_rows, counts)):
        assert count == len(seqs[i].ids) - typical
        seqs[i].block, seqs[i].row, seqs[i].cached = block, r, count
    return B


def assemble_past(seqs, idx, P, S, n_layers) -> list[GrowLayer]:
    """Copy each row's cached keys/values into the wave's buffers, right-aligned at column P."""
    groups: dict[int, tuple[KVBlock, list[int], list[int]]] = {}
    for r, i in enumerate(idx):
        seq = seqs[i]
        if seq.block is not None and seq.cached > 0:
            groups.setdefault(id(seq.block), (seq.block, [], []))
            groups[id(seq.block)][1].append(r)
            groups[id(seq.block)][2].append(seq.row)
    if not groups:
        return [GrowLayer(S) for _ in range(n_layers)]
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
        layers.append(GrowLayer(S, keys, values, P))
    return layers


def extract(cache, mask: torch.Tensor, batch_rows: torch.Tensor, alive: torch.Tensor):
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
