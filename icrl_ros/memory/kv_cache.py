"""Preallocated key/value cache with a validity mask: full context or sink + sliding window.

Static shapes: attention always runs over the whole buffer and the mask says which slots
hold data. Keys are stored after RoPE, so attention does not depend on slot order and a
ring buffer overwrites its oldest slot without shifting or re-rotating anything.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Cache of ``capacity`` slots per env, the first ``n_prefix`` pinned (sink token).

    ``window=None``: full context, refuses to write past ``capacity``.
    ``window=W``: the newest ``W`` steps are kept in a ring (StreamingLLM-style), so
    memory is constant forever; pinned prefix slots are never overwritten.
    """

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
                 window: int | None = None, n_prefix: int = 0, dtype=torch.float32, device=None) -> None:
        if window is not None and window <= 0:
            raise ValueError(f"window: must be > 0, got {window}")
        self.capacity = n_prefix + (window if window is not None else capacity)
        self.window, self.n_prefix = window, n_prefix
        shape = (n_layers, batch, n_heads, self.capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.episode = torch.full((batch, self.capacity), -1, dtype=torch.long, device=device)
        self.valid = torch.zeros(batch, self.capacity, dtype=torch.bool, device=device)
        self.count = 0  # steps committed since the trial start

    def set_prefix(self, k: Tensor, v: Tensor) -> None:
        """Pin the sink-token keys/values (L, B, H, n_prefix, hd)."""
        n = self.n_prefix
        self.k[:, :, :, :n], self.v[:, :, :, :n] = k, v
        self.valid[:, :n] = True
        self.episode[:, :n] = -1

    def reset(self) -> None:
        """New trial: forget every step (the pinned prefix stays)."""
        self.valid[:, self.n_prefix:] = False
        self.episode[:, self.n_prefix:] = -1
        self.count = 0

    def next_slot(self) -> int:
        if self.window is None:
            if self.count >= self.capacity - self.n_prefix:
                raise RuntimeError(f"KVCache full: capacity {self.capacity - self.n_prefix} steps reached")
            return self.n_prefix + self.count
        return self.n_prefix + self.count % self.window

    def commit(self, k: Tensor, v: Tensor, episode: Tensor) -> None:
        """Store one step's keys/values (L, B, H, 1, hd) and episode indices (B,)."""
        s = self.next_slot()
        self.k[:, :, :, s] = k[:, :, :, 0]
        self.v[:, :, :, s] = v[:, :, :, 0]
        self.episode[:, s] = episode
        self.valid[:, s] = True
        self.count += 1

    def load_sequence(self, k: Tensor, v: Tensor, episode: Tensor) -> None:
        """Replace the steps with a whole recomputed prefix (L, B, H, T, hd), full context only."""
        T = k.shape[3]
        if self.window is not None and T > self.window:
            k, v, episode = k[:, :, :, -self.window:], v[:, :, :, -self.window:], episode[:, -self.window:]
            T = self.window
        self.reset()
        n = self.n_prefix
        self.k[:, :, :, n:n + T], self.v[:, :, :, n:n + T] = k, v
        self.episode[:, n:n + T] = episode
        self.valid[:, n:n + T] = True
        self.count = T

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes + self.episode.nbytes + self.valid.nbytes
