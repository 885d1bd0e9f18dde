"""Memo: summary-token memory on the shared transformer core.

A trial is cut into segments. A token attends to the kept summary tokens and to the
earlier tokens of its own segment, never to older raw observations. At a segment end,
``l_sum`` learnable summary embeddings are run through the core over (summaries +
segment) [pass 1]; their outputs are re-encoded and run through the core again at fresh
positions over the earlier summaries only [pass 2]; pass 2's keys/values are the new
summary tokens in the cache. ``rmt`` keeps only the newest summary set.

Positions (RoPE; Memo's scheme): with ``n`` summary sets in the position space, the
summaries sit at 0 .. n*l_sum-1, the segment's tokens at n*l_sum + j, the summary
embeddings after the segment's last token, and the new summaries at n*l_sum + i.

With ``model.house.object_memory`` (head 0 of layer 0 is the fixed "where did I see my goal?" lookup,
:mod:`icrl_ros.models.object_memory`) a summary set also carries the segment's sightings: head
0's keys / values of the new summaries in layer 0 are not learnt but aggregated from the
segment's, one slot per sighted category. For a category c the segment's raw tokens contribute
``sum_j exp(l_jc) v_j`` to the lookup (l_jc its logit); one slot with logit ``logsumexp_j l_jc``
and value ``softmax_j(l_jc) . v_j`` contributes exactly the same, so the lookup over the kept
summaries equals the lookup over the raw steps they replaced for the ``l_sum`` categories with
the most evidence in the segment (more distinct categories than ``l_sum`` in one segment lose
the weakest). With ``model.house.place_memory`` heads 1.. of layer 0 carry the segment's view points
in ``l_sum`` slots, each the mean of a run of consecutive steps weighted by its step count
(:func:`icrl_ros.models.place_memory.summarize_views`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.models.config import ModelArgs
from icrl_ros.models.object_memory import BETA
from icrl_ros.models.place_memory import summarize_views
from icrl_ros.models.policy import ICLPolicy

OBJECT_MASKED = -1.0e4
"""Logit of a slot outside the segment in the object summary (exp() of it is 0 in float32)."""


def causal_block(n: int, batch: int, device) -> Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril().expand(batch, n, n)


def segment_schedule(total: int, l_seg: int, jitter: float, generator: torch.Generator | None = None) -> list[int]:
    """Segment lengths covering ``total`` steps; randomised in [1-j, 1+j] x l_seg when j > 0."""
    lo, hi = max(1, round((1 - jitter) * l_seg)), max(1, round((1 + jitter) * l_seg))
    out, n = [], 0
    while n < total:
        s = int(torch.randint(lo, hi + 1, (1,), generator=generator)) if jitter > 0 else l_seg
        out.append(s)
        n += s
    return out


class MemoPolicy(ICLPolicy):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__(args)
        self.summary_emb = nn.Parameter(torch.randn(args.l_sum, args.d_model) * 0.02)
        self.summary_proj = nn.Linear(args.d_model, args.d_model)
        nn.init.normal_(self.summary_proj.weight, std=0.02)
        nn.init.zeros_(self.summary_proj.bias)

    @property
    def max_segment(self) -> int:
        """Largest segment a training schedule can draw (cache capacity for a segment)."""
        return max(1, round((1 + self.args.seg_jitter) * self.args.l_seg))

    def kept_sets(self, n_generated: int) -> int:
        """Summary sets in the position space after ``n_generated`` segment ends."""
        return min(n_generated, 1) if self.args.memo_variant == "rmt" else n_generated

    def summarize(self, mem_k: Tensor, mem_v: Tensor, mem_valid: Tensor, sum_valid: Tensor,
                  pos_base: Tensor, seg_len: Tensor, new_base: Tensor) -> tuple[Tensor, Tensor]:
        """Pure function run at a segment end.

        mem_k / mem_v (L, B, H, P, hd): the memory (summaries + segment); mem_valid (B, P)
        the slots pass 1 sees; sum_valid (B, P) the summary slots pass 2 sees (all False
        for rmt); pos_base (B,) the segment's first position; seg_len (B,) its length;
        new_base (B,) the first position of the new summaries.
        Returns the new summary keys/values (L, B, H, l_sum, hd).
        """
        a = self.args
        B, S, dev = mem_valid.shape[0], a.l_sum, mem_valid.device  # mem_k may be a per-layer list
        i = torch.arange(S, device=dev)
        q = self.summary_emb.unsqueeze(0).expand(B, S, -1)
        pos1 = (pos_base + seg_len)[:, None] + i
        mask1 = torch.cat([mem_valid[:, None, :].expand(B, S, -1), causal_block(S, B, dev)], dim=2)
        h, _, _ = self.core(q, pos1, mask1, mem_k, mem_v)
        tokens = self.summary_proj(self.norm(h))  # re-encoded as fresh input tokens
        mask2 = torch.cat([sum_valid[:, None, :].expand(B, S, -1), causal_block(S, B, dev)], dim=2)
        _, k, v = self.core(tokens, new_base[:, None] + i, mask2, mem_k, mem_v)
        if getattr(self.core.blocks[0], "object_memory", None) is not None:  # the house's fixed heads
            k, v = self.object_summary(k, v, mem_k[0][:, 0], mem_v[0][:, 0], mem_valid & ~sum_valid)
        pm = getattr(self.core.blocks[0], "place_memory", None)
        if pm is not None:  # heads 1.. of layer 0: the segment's view points, in l_sum runs
            key, val = summarize_views(mem_k[0][:, 1], mem_v[0][:, 1], mem_valid & ~sum_valid, S, pm.sigma)
            n = pm.n_heads
            rep = (lambda t: t[:, None].expand(-1, n, -1, -1))
            k = torch.cat([torch.cat([k[0][:, :1], rep(key), k[0][:, 1 + n:]], dim=1)[None], k[1:]], dim=0)
            v = torch.cat([torch.cat([v[0][:, :1], rep(val), v[0][:, 1 + n:]], dim=1)[None], v[1:]], dim=0)
        return k, v

    def object_summary(self, k: Tensor, v: Tensor, k0: Tensor, v0: Tensor, seg: Tensor) -> tuple[Tensor, Tensor]:
        """Replace layer 0 head 0 of the new summaries (k / v (L, B, H, l_sum, hd)) by the
        segment's sightings aggregated per category: k0 / v0 (B, P, hd) head 0's keys / values
        of the memory in layer 0, ``seg`` (B, P) the slots to aggregate (the segment; for
        ``rmt``, whose old set is dropped, every valid slot)."""
        n_cat, S = self.core.blocks[0].object_memory.n_cat, self.args.l_sum
        hd = k0.shape[-1]
        logit = (BETA * k0[..., :n_cat].float()).masked_fill(~seg[..., None], OBJECT_MASKED)  # (B, P, C)
        z = torch.logsumexp(logit, dim=1)  # (B, C)
        mean = torch.einsum("bpc,bph->bch", torch.softmax(logit, dim=1), v0.float())  # (B, C, hd)
        top, cat = z.topk(min(S, n_cat), dim=1)  # (B, S') the categories with the most evidence
        key = (cat[..., None] == torch.arange(hd, device=k0.device)).float() * (top[..., None] / BETA)
        val = mean.gather(1, cat[..., None].expand(-1, -1, hd))
        if S > n_cat:  # spare slots: key and value 0 (a logit of 0, as any non-matching step's)
            key, val = (torch.cat([t, t.new_zeros(t.shape[0], S - n_cat, hd)], dim=1) for t in (key, val))
        k = torch.cat([torch.cat([key.to(k.dtype)[:, None], k[0][:, 1:]], dim=1)[None], k[1:]], dim=0)
        v = torch.cat([torch.cat([val.to(v.dtype)[:, None], v[0][:, 1:]], dim=1)[None], v[1:]], dim=0)
        return k, v

    def forward_sequence(self, inp: dict[str, Tensor], segments: list[int] | None = None):
        """Whole trials, segment by segment, gradients through every summary.

        Returns logits (B, T, A), values (B, T) and the memory state at the end:
        ``{"summaries": [(k, v), ...] kept sets, "n_generated": int, "segment": (k, v),
        "seg_count": int}``.
        """
        a = self.args
        x_all = self.encode(inp)
        B, T, _ = x_all.shape
        dev = x_all.device
        segments = segments or segment_schedule(T, a.l_seg, 0.0)
        sums: list[tuple[Tensor, Tensor]] = []
        n_gen, t0 = 0, 0
        logits, values = [], []
        seg_k = seg_v = None
        seg_count = 0
        empty_k, empty_v = self.core.empty_cache(B, dev, x_all.dtype)
        for length in segments:
            if t0 >= T:
                break
            t1 = min(T, t0 + length)
            n = t1 - t0
            past_k = torch.cat([empty_k] + [k for k, _ in sums], dim=3)
            past_v = torch.cat([empty_v] + [v for _, v in sums], dim=3)
            P = past_k.shape[3]
            base = self.kept_sets(n_gen) * a.l_sum
            pos = torch.full((B, n), base, device=dev) + torch.arange(n, device=dev)
            mask = torch.cat([torch.ones(B, n, P, dtype=torch.bool, device=dev), causal_block(n, B, dev)], dim=2)
            h, seg_k, seg_v = self.core(x_all[:, t0:t1], pos, mask, past_k, past_v)
            lg, val = self.heads(h)
            logits.append(lg)
            values.append(val)
            seg_count = n
            if n == length:  # segment complete: write its summaries
                mem_k, mem_v = torch.cat([past_k, seg_k], dim=3), torch.cat([past_v, seg_v], dim=3)
                ones = torch.ones(B, P + n, dtype=torch.bool, device=dev)
                sum_valid = ones.clone()
                sum_valid[:, P:] = False
                if a.memo_variant == "rmt":
                    sum_valid[:] = False
                full = torch.full((B,), base, device=dev)
                new_base = full if a.memo_variant == "memo" else torch.zeros_like(full)
                k, v = self.summarize(mem_k, mem_v, ones, sum_valid, full, torch.full((B,), n, device=dev), new_base)
                sums = [(k, v)] if a.memo_variant == "rmt" else sums + [(k, v)]
                n_gen += 1
                seg_k = seg_v = None
                seg_count = 0
            t0 = t1
        state = {"summaries": sums, "n_generated": n_gen, "segment": (seg_k, seg_v), "seg_count": seg_count}
        return self.with_skill(torch.cat(logits, 1), inp), torch.cat(values, 1), state
