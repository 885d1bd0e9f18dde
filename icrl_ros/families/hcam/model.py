"""HCAM: Hierarchical Chunk Attention Memory (Lampinen et al., 2021) on the ReLIC policy.

Each layer keeps its normal causal attention, restricted to a *local window* of the
``C = hcam_chunk`` previous steps. Chosen layers (``hcam_layers``) add a memory block
between the local attention and the MLP:

* the *layer inputs* of past steps (the residual stream entering the layer) are stored,
  gradient-stopped, in fixed chunks of C steps counted from the trial start; each
  completed chunk gets a mean-pooled summary key S_j;
* relevance ``R = Q(norm(u)) . S / sqrt(D)`` over the visible chunks, top-k of R,
  weights = softmax over the k selected relevances (invalid chunks get weight 0);
* multi-head attention of ``norm(u)`` inside each selected chunk (keys/values projected
  from the normed stored inputs plus a learnt within-chunk slot embedding);
* the relevance-weighted sum is added to the residual (``u`` = layer input + local attention).

With ``hcam_episode_rope`` the read also knows each stored step's episode: the relevance query and
the read's queries are rotated (RoPE) by the current episode index, each chunk's summary key by its
last step's and each stored step's key by its own, so scores depend on how many episodes back a
chunk lies (the local attention's positions are the same episode indices).

A chunk becomes visible once complete: step t sees chunk j iff (j + 1) C <= t, and with
``max_chunks`` only the newest ``max_chunks`` complete chunks (the memory's ring).

Two entry points share every weight: :meth:`HCAMPolicy.forward_sequence` (whole trials;
chunks built from the same pass's detached layer inputs) and :meth:`HCAMPolicy.step`
(one token against the chunk store of :class:`~icrl_ros.families.hcam.memory.HCAMMemory`), a pure
function of tensors with top-k and gather in the graph (no data-dependent Python).

The reconstruction auxiliary loss (the paper's self-supervised loss, needed because no
gradient reaches the encoder through memory) decodes each step's own inputs from the
final hidden state: :meth:`HCAMPolicy.recon_loss` / :meth:`HCAMPolicy.aux_loss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_ros.memory.quant import dequantize
from icrl_ros.models.attention import MASK_NEG, QuantizedKV, RMSNorm, apply_rope, rope_angles
from icrl_ros.models.config import ModelArgs
from icrl_ros.models.core import Block, TransformerCore
from icrl_ros.models.policy import ICLPolicy

RECON_IMAGE = 16  # side of the downsampled image the decoder reconstructs


def window_mask(episode_index: Tensor, window: int) -> Tensor:
    """Local causal mask (B, T, T): query t may attend key s iff t - window <= s <= t."""
    B, T = episode_index.shape
    t = torch.arange(T, device=episode_index.device)
    d = t[:, None] - t[None, :]
    return ((d >= 0) & (d <= window)).expand(B, T, T)


def gather_chunks(store: Tensor, idx: Tensor) -> Tensor:
    """store (B, N, *rest), idx (B, T, k) long -> (B, T, k, *rest). One GatherElements op."""
    B, N = store.shape[:2]
    rest = store.shape[2:]
    flat = store.reshape(B, N, -1)
    T, k = idx.shape[1], idx.shape[2]
    g = torch.gather(flat, 1, idx.reshape(B, T * k, 1).expand(B, T * k, flat.shape[2]))
    return g.reshape(B, T, k, *rest)


def sequence_chunks(x: Tensor, chunk: int, top_k: int, max_chunks: int | None = None,
                    episode: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Chunk store of a whole trial from its layer inputs x (B, T, D), gradient-stopped.

    Returns contents (B, N, C, D), summary keys (B, N, D), the visibility mask (B, T, N) and,
    given the steps' ``episode`` indices (B, T), the stored steps' (B, N, C) (else None);
    N = max(T // C, top_k) (zero chunks pad to k, never visible).
    """
    B, T, D = x.shape
    n = T // chunk
    xs = x.detach()[:, : n * chunk].reshape(B, n, chunk, D)  # stop-gradient into memory
    key = xs.mean(2)
    ep = None if episode is None else episode[:, : n * chunk].reshape(B, n, chunk)
    N = max(n, top_k)
    if N > n:
        xs = torch.cat([xs, xs.new_zeros(B, N - n, chunk, D)], 1)
        key = torch.cat([key, key.new_zeros(B, N - n, D)], 1)
        if ep is not None:
            ep = torch.cat([ep, ep.new_zeros(B, N - n, chunk)], 1)
    t = torch.arange(T, device=x.device)[:, None]
    j = torch.arange(N, device=x.device)[None, :]
    vis = (j + 1) * chunk <= t  # complete before t (implies j < n)
    if max_chunks is not None:
        vis = vis & (j >= t // chunk - max_chunks)  # only the newest max_chunks complete chunks
    return xs, key, vis.expand(B, T, N), ep


class ChunkMemoryAttention(nn.Module):
    """The HCAM block: summary relevance -> top-k chunks -> attention inside -> weighted sum."""

    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        d = a.d_model
        self.n_heads, self.head_dim, self.chunk, self.top_k = a.n_heads, a.head_dim, a.hcam_chunk, a.hcam_top_k
        self.continuous = a.hcam_weights == "continuous"
        self.episode_rope, self.rope_base = a.hcam_episode_rope, a.rope_base
        self.norm_q = RMSNorm(d)  # "the input is normalized"
        self.norm_m = RMSNorm(d)  # stored layer inputs are raw residual-stream values
        self.relevance = nn.Linear(d, d, bias=False)  # Q in R = softmax(Q(normed input) . S)
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.slot = nn.Parameter(torch.zeros(a.hcam_chunk, d))  # within-chunk position

    def project(self, chunk_x: Tensor) -> tuple[Tensor, Tensor]:
        """Stored inputs (..., C, D) -> keys, values (..., C, H, hd)."""
        m = self.norm_m(chunk_x) + self.slot
        kv = self.kv(m).unflatten(-1, (2, self.n_heads, self.head_dim))
        return kv[..., 0, :, :], kv[..., 1, :, :]

    def rotate(self, x: Tensor, episode: Tensor | None) -> Tensor:
        """x (B, S, [H,] E) rotated by the episode indices (B, S) (RoPE over E); as is without them."""
        if episode is None:
            return x
        cos, sin = rope_angles(episode, x.shape[-1], self.rope_base)  # (B, 1, S, E/2)
        if x.dim() == 3:
            return apply_rope(x[:, None], cos, sin)[:, 0]
        return apply_rope(x.transpose(1, 2), cos, sin).transpose(1, 2)

    def episodes(self, q_ep: Tensor | None, chunk_ep: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """The queries' and the stored steps' episode indices where this read rotates by them, else None."""
        return (q_ep, chunk_ep) if self.episode_rope else (None, None)

    def select(self, h: Tensor, chunk_key: Tensor, chunk_mask: Tensor, q_ep: Tensor | None = None,
               chunk_ep: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """h (B, T, D) normed queries; chunk_key (B, N, D); chunk_mask (B, T, N) bool; with episode RoPE
        the queries' episodes q_ep (B, T) and the stored steps' chunk_ep (B, N, C) (a chunk's summary
        rotates by its last step's).
        Returns the chosen chunk indices (B, T, k) and their weights (B, T, k)."""
        key_ep = None if chunk_ep is None else chunk_ep[:, :, -1]
        rel, chunk_key = self.rotate(self.relevance(h), q_ep), self.rotate(chunk_key, key_ep)
        logits = torch.matmul(rel, chunk_key.transpose(1, 2)) * h.shape[-1] ** -0.5  # (B, T, N)
        logits = logits + torch.where(chunk_mask, 0.0, MASK_NEG).to(logits.dtype)
        if self.continuous:
            # the (k+1)-th relevance is the threshold; a padded column below every chunk (even an
            # invalid one) stands in for it when the store holds only k, and is never selected
            pad = torch.full_like(logits[..., :1], 2 * MASK_NEG)
            top, idx = torch.topk(torch.cat([logits, pad], -1), self.top_k + 1, dim=-1)
            e = torch.exp(top - top[..., :1])
            w = e[..., :-1] - e[..., -1:]
            w, idx = w / w.sum(-1, keepdim=True).clamp(min=1e-12), idx[..., :-1]
        else:
            top, idx = torch.topk(logits, self.top_k, dim=-1)
            w = torch.softmax(top, dim=-1)  # softmax over the selected k
        # a selected invalid chunk (fewer valid than k) gets 0
        return idx, w * torch.gather(chunk_mask, 2, idx).to(h.dtype)

    def read(self, h: Tensor, w: Tensor, keys: Tensor, vals: Tensor, q_ep: Tensor | None = None) -> Tensor:
        """h (B, T, D); w (B, T, k); keys/vals of the selected chunks (B, T, k, C, H, hd) (keys rotated
        by their steps' episodes with episode RoPE, the queries then by q_ep (B, T)) -> (B, T, D)."""
        B, T, D = h.shape
        q = self.rotate(self.q(h).view(B, T, self.n_heads, self.head_dim), q_ep) * self.head_dim ** -0.5
        s = torch.einsum("bthe,btkche->btkhc", q, keys)  # (B, T, k, H, C)
        y = torch.einsum("btkhc,btkche->btkhe", torch.softmax(s, dim=-1), vals)  # per-chunk results
        y = (w[..., None, None] * y).sum(2)  # relevance-weighted sum (B, T, H, hd)
        return self.proj(y.reshape(B, T, D))

    def forward_sequence(self, u: Tensor, chunk_x: Tensor, chunk_key: Tensor, chunk_mask: Tensor,
                         q_ep: Tensor | None = None, chunk_ep: Tensor | None = None) -> Tensor:
        """Whole trial, the same sum as :meth:`read` written densely: every query scores every chunk's
        steps (two batched matmuls over all N C stored steps, about what full attention costs), each
        chunk's softmax is scaled by its relevance weight, which is 0 for chunks not in the top k.
        Gathering the k selected chunks per query instead copied (B, T, k, C, D) keys and values
        forward and scatter-added them backward: 7x ReLIC's training step on Darkroom."""
        h = self.norm_q(u)
        q_ep, chunk_ep = self.episodes(q_ep, chunk_ep)
        idx, w = self.select(h, chunk_key, chunk_mask, q_ep, chunk_ep)
        k, v = self.project(chunk_x)  # (B, N, C, H, hd)
        B, T, D = h.shape
        N, C, H, hd = k.shape[1:]
        weight = h.new_zeros(B, T, N).scatter(2, idx, w)  # top-k indices are distinct
        q = self.rotate(self.q(h).view(B, T, H, hd), q_ep).transpose(1, 2) * hd ** -0.5  # (B, H, T, hd)
        k = self.rotate(k.reshape(B, N * C, H, hd), None if chunk_ep is None else chunk_ep.reshape(B, N * C))
        keys = k.view(B, N, C, H, hd).permute(0, 3, 1, 2, 4).reshape(B, H, N * C, hd)
        vals = v.permute(0, 3, 1, 2, 4).reshape(B, H, N * C, hd)
        p = torch.softmax((q @ keys.transpose(-1, -2)).view(B, H, T, N, C), dim=-1) * weight[:, None, :, :, None]
        y = p.view(B, H, T, N * C) @ vals  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))

    def forward_step(self, u: Tensor, chunk_x: Tensor | QuantizedKV, chunk_key: Tensor, chunk_mask: Tensor,
                     q_ep: Tensor | None = None, chunk_ep: Tensor | None = None) -> Tensor:
        """Cached step: gather the k selected raw chunks, project only those (O(N + kC)). ``chunk_x``: the
        store's contents (B, N, C, D) in any float dtype, or 8-bit codes with per-step scales (B, N, C)."""
        h = self.norm_q(u)
        q_ep, chunk_ep = self.episodes(q_ep, chunk_ep)
        idx, w = self.select(h, chunk_key, chunk_mask, q_ep, chunk_ep)
        if isinstance(chunk_x, QuantizedKV):  # an 8-bit store: decode only the k chunks read
            x = dequantize(gather_chunks(chunk_x.codes, idx), gather_chunks(chunk_x.scale, idx))
        else:
            x = gather_chunks(chunk_x, idx)
        k, v = self.project(x.to(u.dtype))  # (B, T, k, C, H, hd)
        if chunk_ep is not None:
            B, T, kk, C, H, hd = k.shape
            ep = gather_chunks(chunk_ep, idx).reshape(B, T * kk * C)  # (B, T, k, C) -> the keys' episodes
            k = self.rotate(k.reshape(B, T * kk * C, H, hd), ep).view(B, T, kk, C, H, hd)
        return self.read(h, w, k, v, q_ep)


class HCAMBlock(Block):
    """Pre-norm block: local attention -> (HCAM memory read) -> MLP, all added to the residual."""

    def __init__(self, a: ModelArgs, memory: bool) -> None:
        super().__init__(a)
        self.memory = ChunkMemoryAttention(a) if memory else None

    def forward(self, x, cos, sin, mask_add, past_k, past_v, keep: Tensor | None, mem_read=None):
        a, k, v = self.attn(self.norm1(x), cos, sin, mask_add, past_k, past_v)
        delta = a
        if self.memory is not None:
            delta = delta + mem_read(self.memory, x + a)
        delta = delta + self.mlp(self.norm2(x + delta))
        if keep is not None:
            delta = delta * keep
        return x + delta, k, v


class HCAMCore(TransformerCore):
    """Transformer core with chunk memory in ``args.memory_layers``; a pure function."""

    def __init__(self, a: ModelArgs) -> None:
        super().__init__(a)
        layers = set(a.memory_layers)
        self.blocks = nn.ModuleList(HCAMBlock(a, i in layers) for i in range(a.n_layers))

    def forward(self, x: Tensor, rope_pos: Tensor, mask: Tensor, past_k: Tensor | None = None,
                past_v: Tensor | None = None, chunk_x: Tensor | None = None, chunk_key: Tensor | None = None,
                chunk_mask: Tensor | None = None, max_chunks: int | None = None, chunk_episode: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x (B, T, D); rope_pos (B, T); mask (B, T, P + T) bool (local window); past_k/v (L, B, H, P, hd).

        Full trial (``chunk_x`` None): each memory layer's chunks come from its own inputs
        in this pass (detached), visible per :func:`sequence_chunks`.
        Cached (``chunk_x`` given): chunk_x (Lm, B, N, C, D), chunk_key (Lm, B, N, D),
        chunk_mask (B, T, N) from the memory, and with ``hcam_episode_rope`` chunk_episode (B, N, C), the
        stored steps' episode indices (``rope_pos`` holds the queries').
        Returns hidden (B, T, D), new_k / new_v (L, B, H, T, hd) and the memory layers'
        inputs (Lm, B, T, D) (what the memory stores).
        """
        a = self.args
        B = x.shape[0]
        if past_k is None or past_v is None:
            past_k, past_v = self.empty_cache(B, x.device, x.dtype)
        cos, sin = rope_angles(rope_pos, a.head_dim, a.rope_base)
        mask_add = torch.where(mask, 0.0, MASK_NEG).to(x.dtype)[:, None]
        p = self.args.depth_dropout
        ks, vs, xin = [], [], []
        m = 0
        for i, blk in enumerate(self.blocks):
            keep = None
            if self.training and p > 0:
                keep = (torch.rand(B, 1, 1, device=x.device) >= p).to(x.dtype) / (1 - p)
            read = None
            if blk.memory is not None:
                xin.append(x)
                if chunk_x is None:
                    cx, ck, cm, ce = sequence_chunks(x, a.hcam_chunk, a.hcam_top_k, max_chunks,
                                                     rope_pos if a.hcam_episode_rope else None)
                    read = lambda mod, u, cx=cx, ck=ck, cm=cm, ce=ce: mod.forward_sequence(  # noqa: E731
                        u, cx, ck, cm, rope_pos, ce)
                else:
                    read = lambda mod, u, j=m: mod.forward_step(  # noqa: E731
                        u, chunk_x[j], chunk_key[j], chunk_mask, rope_pos, chunk_episode)
                m += 1
            x, k, v = blk(x, cos, sin, mask_add, past_k[i], past_v[i], keep, read)
            ks.append(k)
            vs.append(v)
        return x, torch.stack(ks), torch.stack(vs), torch.stack(xin)


class InputDecoder(nn.Module):
    """Reconstruction heads (HCAM's self-supervised loss): decode the step's own inputs.

    Grid worlds: the observed cell (cross-entropy). Images: the RGB frame downsampled to
    16x16 (sigmoid cross-entropy per pixel, as in the paper) and odometry (MSE). Always:
    the previous action (cross-entropy); the previous reward (MSE) and goal (CE) when used.
    """

    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        d = a.d_model
        self.args = a
        self.body = nn.Sequential(nn.Linear(d, d), nn.GELU())
        if a.obs_type == "image":
            self.image = nn.Linear(d, 3 * RECON_IMAGE * RECON_IMAGE)
            self.odom = nn.Linear(d, 4)
        else:
            self.obs = nn.Linear(d, a.n_obs)
        self.prev_action = nn.Linear(d, a.n_actions + 1)
        self.prev_reward = nn.Linear(d, 1) if a.use_reward else None
        self.goal = nn.Linear(d, a.n_goals) if a.n_goals else None

    def forward(self, inp: dict[str, Tensor], h: Tensor) -> Tensor:
        """Per-step loss (B, T) from features h (B, T, D)."""
        a = self.args
        z = self.body(h)
        ce = lambda logits, target: F.cross_entropy(logits.flatten(0, -2), target.reshape(-1).long(),  # noqa: E731
                                                    reduction="none").view(target.shape)
        if a.obs_type == "image":
            rgb = inp["rgb"]
            B, T = rgb.shape[:2]
            img = rgb.reshape(B * T, *rgb.shape[2:]).permute(0, 3, 1, 2).float() / 255.0
            target = F.adaptive_avg_pool2d(img, RECON_IMAGE).reshape(B, T, -1)
            loss = F.binary_cross_entropy_with_logits(self.image(z), target, reduction="none").mean(-1)
            odom = inp["odom"].float()
            o = torch.cat([odom[..., :2], odom[..., 2:3].cos(), odom[..., 2:3].sin()], -1)
            loss = loss + (self.odom(z) - o).pow(2).mean(-1)
        else:
            loss = ce(self.obs(z), inp["obs"])
        loss = loss + ce(self.prev_action(z), inp["prev_action"])
        if self.prev_reward is not None:
            loss = loss + (self.prev_reward(z).squeeze(-1) - inp["prev_reward"].float()).pow(2)
        if self.goal is not None:
            loss = loss + ce(self.goal(z), inp["goal"])
        return loss


class HCAMPolicy(ICLPolicy):
    """ReLIC policy with a local-window core plus HCAM chunk memory (``kind: hcam``)."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__(args)
        self.core = HCAMCore(args)
        self.core.apply(self._init)
        self.decoder = InputDecoder(args)
        self.decoder.apply(self._init)

    def forward_sequence(self, inp: dict[str, Tensor], segments: list[int] | None = None,
                         max_chunks: int | None = None):
        """Whole trials from their start (``segments`` ignored, interface parity with Memo).

        ``max_chunks``: see only the newest complete chunks, as a bounded memory would.
        Returns logits (B, T, A), values (B, T), keys/values (L, B, H, T, hd) and
        ``{"layer_inputs": (Lm, B, T, D), "hidden": (B, T, D)}`` (memory refresh, aux loss).
        """
        x = self.encode(inp)
        ep = inp["episode_index"]
        h, k, v, xin = self.core(x, ep, window_mask(ep, self.args.hcam_chunk), max_chunks=max_chunks)
        logits, value = self.heads(h)
        return logits, value, k, v, {"layer_inputs": xin, "hidden": h}

    def recon_loss(self, inp: dict[str, Tensor], hidden: Tensor, mask: Tensor | None = None) -> Tensor:
        """Unweighted reconstruction loss (scalar) of the steps' inputs from ``hidden``
        (B, T, D, from :meth:`forward_sequence`); ``mask`` (B, T) selects steps."""
        per_step = self.decoder(inp, self.norm(hidden))
        if mask is None:
            return per_step.mean()
        mask = mask.to(per_step.dtype)
        return (per_step * mask).sum() / mask.sum().clamp(min=1.0)

    def aux_loss(self, inp: dict[str, Tensor], extras: dict[str, Tensor], mask: Tensor | None = None) -> Tensor:
        """What the trainer adds to its loss: ``hcam_recon_weight`` x :meth:`recon_loss`."""
        return self.args.hcam_recon_weight * self.recon_loss(inp, extras["hidden"], mask)
