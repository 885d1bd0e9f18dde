"""HCAM memory: a local key/value window plus a bounded store of chunks, static buffers.

What :class:`~icrl_ros.families.hcam.model.HCAMPolicy` attends to between steps:

* ``k``, ``v`` (L, B, H, W, hd) ring, ``valid`` / ``episode`` (B, W): the local window
  of the last ``W = chunk`` steps (keys after RoPE, as in :class:`KVCache`);
* ``cur_x`` (Lm, B, C, D): the current, incomplete chunk of memory-layer inputs;
* ``chunk_x`` (Lm, B, N, C, D), ``chunk_key`` (Lm, B, N, D) mean-pooled summaries,
  ``chunk_valid`` (B, N): the completed chunks, a ring over ``N = max_chunks`` slots
  (the oldest chunk is evicted when full; chunk j lives in slot j % N);
* with ``episode_rope`` (``model.hcam_episode_rope``) also ``chunk_episode`` (B, N, C) and
  ``cur_episode`` (B, C): each stored step's episode index, which the chunk read rotates by.

``kv_dtype`` (:mod:`icrl_ros.memory.quant`) is how the store keeps its chunks' contents, the bulk of
the bytes: ``fp16`` halves them, ``int8`` stores uint8 codes with one float32 scale per step and memory
layer (``chunk_x_scale`` (Lm, B, N, C)), quantised as a chunk enters the store. The core graph gathers
the top-k chunks' codes and decodes only those. The summary keys, the current chunk and the local
window stay in the float dtype (they are a small part, and every step reads all of them).

Chunks are counted from the trial start: step t fills slot t % C of the current chunk,
and after step (j + 1) C - 1 the chunk j is stored with its summary. The one counter is
``count`` (steps since the trial start). Bytes are fixed at construction and never
exceed ``budget_bytes``; ``max_chunks=None`` takes the most chunks the budget holds.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.memory.base import DEFAULT_STEPS, MemoryBudgetError, slot_bytes
from icrl_ros.memory.kv_cache import KVCache
from icrl_ros.memory.quant import check_kv_dtype, kv_bytes, quantize, storage_dtype, zero_code


EPISODE_ITEM = torch.empty((), dtype=torch.long).element_size()  # one stored step's episode index (int64)


def chunk_bytes(n_mem_layers: int, chunk: int, d_model: int, dtype, episode_rope: bool = False,
                kv_dtype: str = "fp32") -> int:
    """Bytes one stored chunk costs per env: contents (in ``kv_dtype``, int8 with its per-step scales)
    + summary key + validity flag (+ its steps' episode indices, int64, with ``episode_rope``)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    contents = n_mem_layers * chunk * kv_bytes(kv_dtype, d_model, dtype)
    return contents + n_mem_layers * d_model * itemsize + 1 + (chunk * EPISODE_ITEM if episode_rope else 0)


class HCAMMemory(KVCache):
    policy = "hcam"  # type: ignore[assignment]
    quantizable = True
    """Takes a ``kv_dtype`` other than fp32: the chunk store's contents are kept in it."""

    def load_trial(self, policy, seq: dict[str, Tensor], schedule: list[int] | None = None) -> tuple[Tensor, Tensor]:
        logits, values, k, v, extras = policy.forward_sequence(seq, max_chunks=self.max_chunks)
        self.load_sequence(k, v, extras["layer_inputs"], seq["episode_index"])
        return logits, values

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> HCAMMemory:
        return cls(**dims, n_mem_layers=model["n_mem_layers"], chunk=model["chunk"], top_k=model["top_k"],
                   max_chunks=cfg.get("max_chunks"), episode_rope=model.get("episode_rope", False),
                   kv_dtype=cfg.get("kv_dtype", "fp32"), **common)

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        """A ring of chunks spanning DEFAULT_STEPS steps (the oldest chunk evicted)."""
        return {"max_chunks": max(args.hcam_top_k, DEFAULT_STEPS // args.hcam_chunk)}

    @classmethod
    def trial_sizes(cls, args, steps: int, schedule: list[int] | None = None) -> dict:
        """Every complete chunk (and at least top_k slots)."""
        return {"max_chunks": max(args.hcam_top_k, steps // args.hcam_chunk)}

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, n_mem_layers: int, chunk: int,
                 top_k: int, max_chunks: int | None = None, dtype=torch.float32, device=None,
                 budget_bytes: int | None = None, episode_rope: bool = False, kv_dtype: str = "fp32") -> None:
        if chunk <= 0 or top_k <= 0 or n_mem_layers <= 0:
            raise ValueError(f"HCAMMemory: chunk, top_k and n_mem_layers must be > 0, got {chunk}, {top_k}, "
                             f"{n_mem_layers}")
        d_model = n_heads * head_dim
        itemsize = torch.empty((), dtype=dtype).element_size()
        fixed = batch * (chunk * slot_bytes(n_layers, n_heads, head_dim, dtype)  # local window
                         + n_mem_layers * chunk * d_model * itemsize  # current chunk
                         + (chunk * EPISODE_ITEM if episode_rope else 0))  # its episode indices
        per_chunk = batch * chunk_bytes(n_mem_layers, chunk, d_model, dtype, episode_rope, check_kv_dtype(kv_dtype))
        if max_chunks is None:
            if budget_bytes is None:
                raise ValueError("max_chunks: give max_chunks or memory_budget_bytes")
            max_chunks = max(0, budget_bytes - fixed) // per_chunk
            if max_chunks < top_k:
                raise MemoryBudgetError(
                    f"memory_budget_bytes: {budget_bytes:,} bytes do not hold the local window, the current chunk "
                    f"and top_k={top_k} chunks of HCAMMemory (batch {batch}); need "
                    f"{fixed + top_k * per_chunk:,}")
        if max_chunks < top_k:
            raise ValueError(f"max_chunks: must be >= top_k={top_k} (static top-k over the store), got {max_chunks}")
        need = fixed + max_chunks * per_chunk
        if budget_bytes is not None and need > budget_bytes:
            raise MemoryBudgetError(f"memory_budget_bytes: HCAMMemory with {max_chunks} chunks x batch {batch} "
                                    f"needs {need:,} bytes, budget is {budget_bytes:,}; raise the budget or lower "
                                    "max_chunks")
        super().__init__(n_layers, batch, n_heads, head_dim, chunk, window=chunk, n_prefix=0, dtype=dtype,
                         device=device)
        self.budget_bytes = budget_bytes
        self.chunk, self.top_k, self.max_chunks, self.n_mem_layers, self.d_model = (
            chunk, top_k, max_chunks, n_mem_layers, d_model)
        self.kv_dtype = kv_dtype  # the store's; the window above stays in the float dtype
        self.chunk_x = torch.full((n_mem_layers, batch, max_chunks, chunk, d_model), zero_code(kv_dtype),
                                  dtype=storage_dtype(kv_dtype, dtype), device=device)
        self.chunk_x_scale = torch.zeros(n_mem_layers, batch, max_chunks, chunk, dtype=torch.float32, device=device) \
            if kv_dtype == "int8" else None
        self.chunk_key = torch.zeros(n_mem_layers, batch, max_chunks, d_model, dtype=dtype, device=device)
        self.chunk_valid = torch.zeros(batch, max_chunks, dtype=torch.bool, device=device)
        self.cur_x = torch.zeros(n_mem_layers, batch, chunk, d_model, dtype=dtype, device=device)
        self.episode_rope = episode_rope
        if episode_rope:
            self.chunk_episode = torch.zeros(batch, max_chunks, chunk, dtype=torch.long, device=device)
            self.cur_episode = torch.zeros(batch, chunk, dtype=torch.long, device=device)

    # -- sizes --------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Chunk slots per env (N = max_chunks): the store's length, the ``cache`` axis of the
        deploy core graph (the local window is fixed at C by the model)."""
        return self.max_chunks

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors().values())

    @property
    def chunks(self) -> int:
        """Stored (complete) chunks of env 0."""
        return int(self.chunk_valid[0].sum())

    @property
    def live_bytes(self) -> int:
        per_chunk = self.batch * chunk_bytes(self.n_mem_layers, self.chunk, self.d_model, self.k.dtype,
                                             self.episode_rope, self.kv_dtype)
        window = self.tokens * self.batch * slot_bytes(self.n_layers, self.n_heads, self.head_dim, self.float_dtype)
        return window + self.chunks * per_chunk

    # -- reads / writes -----------------------------------------------------------
    def core_inputs(self) -> tuple[Tensor, ...]:
        """The chunk store as the deploy core graph reads it, after the window: ``chunk_x`` one view per
        memory layer (bound by address), with int8 then ``chunk_x_scale`` per layer, ``chunk_key`` per layer,
        then ``chunk_valid``, then with ``episode_rope`` ``chunk_episode``."""
        ep = (self.chunk_episode,) if self.episode_rope else ()
        scales = self.chunk_x_scale.unbind(0) if self.chunk_x_scale is not None else ()
        return (*self.chunk_x.unbind(0), *scales, *self.chunk_key.unbind(0), self.chunk_valid, *ep)

    def reset(self) -> None:
        super().reset()
        self.chunk_valid[:] = False

    def commit(self, k: Tensor, v: Tensor, episode: Tensor, x_mem: Tensor | None = None) -> None:
        """Store one step: keys/values (L, B, H, 1, hd) into the window and its memory-layer
        inputs (Lm, B, 1, D) into the current chunk; a completed chunk enters the store."""
        if x_mem is None:
            raise ValueError("HCAMMemory.commit: x_mem (the step's memory-layer inputs) is required")
        t = self.count
        self.cur_x[:, :, t % self.chunk] = x_mem[:, :, 0].to(self.cur_x.dtype)
        if self.episode_rope:
            self.cur_episode[:, t % self.chunk] = episode
        super().commit(k, v, episode)
        if (t + 1) % self.chunk == 0:
            self._write_chunk(t // self.chunk, self.cur_x, self.cur_episode if self.episode_rope else None)

    def _write_chunk(self, j: int, x: Tensor, episode: Tensor | None = None) -> None:
        """Chunk number j (from the trial start) with contents x (Lm, B, C, D) and, with
        ``episode_rope``, its steps' episode indices (B, C) -> slot j % N."""
        s = j % self.max_chunks
        if self.episode_rope:
            self.chunk_episode[:, s] = episode
        if self.chunk_x_scale is not None:
            self.chunk_x[:, :, s], self.chunk_x_scale[:, :, s] = quantize(x)
        else:
            self.chunk_x[:, :, s] = x
        self.chunk_key[:, :, s] = x.mean(2)
        self.chunk_valid[:, s] = True

    def load_sequence(self, k: Tensor, v: Tensor, x_mem: Tensor, episode: Tensor) -> None:  # type: ignore[override]
        """Adopt a recomputed trial prefix: k/v (L, B, H, T, hd), x_mem (Lm, B, T, D)
        (``HCAMPolicy.forward_sequence``'s ``layer_inputs``), episode (B, T)."""
        super().load_sequence(k, v, episode)  # resets, places the window, count = T
        self._load_chunks(x_mem.to(self.chunk_key.dtype), k.shape[3], episode=episode)

    def _load_chunks(self, x_mem: Tensor, T: int, t0: int = 0, episode: Tensor | None = None) -> None:
        """Store the chunks of steps 0 .. T-1 that a bounded store keeps; x_mem (and ``episode``
        (B, T - t0), the steps' episode indices) cover t0 .. T-1."""
        C = self.chunk
        n = T // C
        ep = lambda a, b: episode[:, a - t0:b - t0] if self.episode_rope else None  # noqa: E731
        for j in range(max(0, n - self.max_chunks), n):
            self._write_chunk(j, x_mem[:, :, j * C - t0:(j + 1) * C - t0], ep(j * C, (j + 1) * C))
        r = T - n * C
        if r:
            self.cur_x[:, :, :r] = x_mem[:, :, n * C - t0:T - t0]
            if self.episode_rope:
                self.cur_episode[:, :r] = ep(n * C, T)

    def fill_synthetic(self, steps: int, generator: torch.Generator | None = None, episode_len: int = 500) -> None:
        super().fill_synthetic(steps, generator, episode_len)
        n, C = steps // self.chunk, self.chunk
        first = max(0, n - self.max_chunks)
        x = torch.randn(self.n_mem_layers, self.batch, steps - first * C, self.d_model, generator=generator)
        ep = (torch.arange(first * C, steps) // episode_len).expand(self.batch, -1).to(self.chunk_x.device)
        self._load_chunks(x.to(self.chunk_key), steps, first * C, episode=ep)

    # -- snapshot contract ------------------------------------------------------------
    def tensors(self) -> dict[str, Tensor]:
        ep = {"chunk_episode": self.chunk_episode, "cur_episode": self.cur_episode} if self.episode_rope else {}
        scale = {"chunk_x_scale": self.chunk_x_scale} if self.chunk_x_scale is not None else {}
        return {**super().tensors(), "chunk_x": self.chunk_x, **scale, "chunk_key": self.chunk_key,
                "chunk_valid": self.chunk_valid, "cur_x": self.cur_x, **ep}

    def config(self) -> dict:
        return {**super().config(), "chunk": self.chunk, "top_k": self.top_k, "max_chunks": self.max_chunks,
                "n_mem_layers": self.n_mem_layers, "d_model": self.d_model, "episode_rope": self.episode_rope}
