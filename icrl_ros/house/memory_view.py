"""What the house model's fixed memory heads hold, read back from the runner's KV cache for viewers.

Heads 0 .. n_fixed - 1 of layer 0 of a model with ``model.house.object_memory`` are not learnt
(:mod:`icrl_ros.house.block_heads`): head 0 (the object memory) keys every step by the category the
frozen heads saw and their confidence, its value is the sighting's position; heads 1 .. (the place
memory, with ``model.house.place_memory``) key every step by its view point, the floor ahead of the robot.
Their keys and values sit unrotated in the KV cache, so the cache itself says, per stored step:

* :meth:`HouseMemoryView.sightings`: which category was seen, how sure the heads were, where, and in
  which episode (a viewer's "age in episodes");
* :meth:`HouseMemoryView.view_points` / :meth:`HouseMemoryView.looked_at`: the floor the camera swept, and
  what a place head's probe standing on each cell would read (its attention mass on past views);
* :meth:`HouseMemoryView.attention`: the attention weights of the fixed heads on the last step. Their
  queries are fixed functions of the step's goal and pose (the module's own ``qkv``), so the softmax over
  [sink | the cache's slots] recomputed here is the one the step's graph computed: after the commit the
  cache holds the step's own key too, and the mask is the control step's (all valid slots with
  inter-episode attention, else this episode's and the pinned prefix). The learnt heads' queries come out
  of hidden states the graphs do not return; they are not shown.

Everything is read from the memory (``runner.memory.view()`` and the route state's last step), nothing
from a simulator; all positions are in the policy's odometry frame (metres).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from icrl_ros.models.config import sink_slots
from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.object_memory import SIGHTING_P, STRUCT_DIM
from icrl_ros.models.place_memory import PRIOR_VIEWS, PROBES, SIGMA_M

CROP_SIGMAS = 3.5
"""The looked-at floor is computed within this many kernel widths of a view point (a probe farther away
reads less than exp(-3.5^2) / PRIOR_VIEWS, about 6e-7 per view)."""
HEAD_NAMES = ("object memory",) + tuple(f"place memory {f:g} m ahead" if f else "place memory here"
                                         for f, _ in PROBES)
"""The fixed heads in order (head 0, then one per place probe)."""


class HouseMemoryView:
    """Read-only views of ``runner``'s KV cache through the house's fixed heads (env ``env`` of its batch).

    ``runner``: a :class:`~icrl_ros.runtime.runner.PolicyRunner` whose bundle's model has
    ``object_memory`` (:func:`for_runner` returns None otherwise); its route state (the house extension's,
    ``runner.control.states["route"]``) supplies the last step's goal, pose and episode."""

    def __init__(self, runner: Any) -> None:
        from icrl_ros.house.block_heads import HouseHeads

        args = runner.bundle.args
        self.runner, self.memory = runner, runner.memory
        self.n_cat, self.scale_m = int(args.n_goals), float(OBJECT_SCALE_M)
        self.place = bool(args.house.place_memory)
        self.n_fixed = 1 + (len(PROBES) if self.place else 0)
        self.head_names = HEAD_NAMES[:self.n_fixed]
        self.n_sink = sink_slots(args.sink, int(args.n_sink))
        self.own_mask = bool(getattr(runner.control, "own_mask", False))
        self.route = runner.control.states.get("route")
        with torch.no_grad():
            self._heads = HouseHeads(args)  # the fixed heads' qkv has no learnt weights
        self.head_dim = int(self.memory.head_dim)

    @classmethod
    def for_runner(cls, runner: Any) -> HouseMemoryView | None:
        """A view for a runner whose model keeps the house's object memory heads, else None."""
        bundle, memory = getattr(runner, "bundle", None), getattr(runner, "memory", None)
        args = getattr(bundle, "args", None)
        if args is None or memory is None or not hasattr(memory, "view") or getattr(runner, "control", None) is None:
            return None  # not a runner of the cached control step (RA-DT's arguments have no house section)
        return cls(runner) if args.house.object_memory else None

    # -- the cache -------------------------------------------------------------------------------
    def _layer0(self, env: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Layer 0's keys and values of the fixed heads (n_fixed, P, hd), float32 on the CPU (decoded from an
        8-bit memory's codes and scales), and the slots' valid flags and episode indices (P,)."""
        k, v, valid, episode = self.memory.view()
        n = self.n_fixed
        kk, vv = k[0, env, :n].detach(), v[0, env, :n].detach()
        k_scale, v_scale = getattr(self.memory, "k_scale", None), getattr(self.memory, "v_scale", None)
        if k_scale is not None:  # an 8-bit memory stores codes and per-token scales: read what the core reads
            from icrl_ros.memory.quant import dequantize

            kk, vv = dequantize(kk, k_scale[0, env, :n].detach()), dequantize(vv, v_scale[0, env, :n].detach())
        return (kk.float().cpu(), vv.float().cpu(),
                valid[env].detach().cpu().numpy().astype(bool), episode[env].detach().cpu().numpy().astype(np.int64))

    def current_episode(self, env: int = 0) -> int:
        """The episode of the last step (-1 before any step of the trial)."""
        if self.route is not None:
            return int(self.route.episode[env])
        _, _, valid, episode = self._layer0(env)
        return int(episode[valid].max()) if valid.any() else -1

    def sightings(self, env: int = 0, min_conf: float = SIGHTING_P) -> dict[str, np.ndarray]:
        """Every stored step whose object-memory key says a category was seen with confidence above
        ``min_conf`` (default the heads' remembering threshold: below it a sighting never beats the sink):
        ``cat`` (N,), ``conf`` (N,), ``xy`` (N, 2) the sighted position, ``episode`` (N,) the step's episode."""
        k, v, valid, episode = self._layer0(env)
        seen = k[0, :, :self.n_cat]
        conf, cat = seen.max(-1)
        conf, cat = conf.numpy().astype(np.float64), cat.numpy().astype(np.int64)
        keep = valid & (episode >= 0) & (conf > min_conf)
        xy = v[0, :, 0:2].numpy().astype(np.float64) * self.scale_m
        return {"cat": cat[keep], "conf": conf[keep], "xy": xy[keep], "episode": episode[keep]}

    def view_points(self, env: int = 0) -> np.ndarray:
        """The stored steps' view points (N, 2) (the floor ``VIEW_AHEAD_M`` ahead of where each stood), read
        from the place memory heads' keys; (0, 2) for a model without place memory."""
        if not self.place:
            return np.zeros((0, 2))
        k, _, valid, episode = self._layer0(env)
        keep = valid & (episode >= 0)
        return k[1, keep, 0:2].numpy().astype(np.float64) * self.scale_m

    def looked_at(self, cells: int, cell_m: float, env: int = 0) -> np.ndarray:
        """(cells, cells) float in [0, 1): the attention mass a place head's probe standing on each cell centre
        would put on past views, S / (S + PRIOR_VIEWS) with S the sum of ``exp(-(d / SIGMA_M)^2)`` over the
        stored view points (each taken at its cell's centre): 0 = never looked there, one pass about 0.5.
        Indexed [x cell, y cell] on the grid of ``cells`` cells of ``cell_m`` centred on the frame's origin
        (the route memory's). The kernel is separable, so this is two small matrix products."""
        out = np.zeros((cells, cells))
        pts = self.view_points(env)
        if not len(pts):
            return out
        ij = np.floor(pts / cell_m).astype(np.int64) + cells // 2
        ij = ij[np.all((ij >= 0) & (ij < cells), axis=1)]
        if not len(ij):
            return out
        # only the views' bounding box and CROP_SIGMAS kernel widths round it: beyond, a probe reads below 1e-5
        pad = int(math.ceil(CROP_SIGMAS * SIGMA_M / cell_m))
        (r0, c0), (r1, c1) = np.maximum(ij.min(0) - pad, 0), np.minimum(ij.max(0) + pad + 1, cells)
        hist = np.zeros((r1 - r0, c1 - c0))
        np.add.at(hist, (ij[:, 0] - r0, ij[:, 1] - c0), 1.0)
        gr, gc = (np.exp(-(((np.arange(n)[:, None] - np.arange(n)[None, :]) * cell_m) / SIGMA_M) ** 2)
                  for n in hist.shape)
        s = gr @ hist @ gc.T
        out[r0:r1, c0:c1] = s / (s + PRIOR_VIEWS)
        return out

    def attention(self, env: int = 0) -> dict[str, Any] | None:
        """The fixed heads' attention on the last step: ``slots`` (n_fixed, P) weights over the cache's slots
        (0 where masked), ``sink`` (n_fixed,) the weight on the sink slots (nothing remembered), ``episode``
        (P,) the slots' episode indices (-1: the pinned prefix), ``current`` the step's episode. None before
        a step (or after a reset / load: the route state forgets its last step)."""
        route = self.route
        pose, goal = getattr(route, "last_pose", None), getattr(route, "last_goal", None)
        if pose is None or goal is None:
            return None
        current = int(route.episode[env])
        k, _, valid, episode = self._layer0(env)
        mask = valid & ((episode == current) | (episode < 0)) if self.own_mask else valid
        x, y, yaw = (float(t) for t in pose[env])
        s = torch.tensor([float(goal[env]) / self.n_cat, 0.0, 0.0, 0.0, 0.0, x / self.scale_m, y / self.scale_m,
                          math.cos(yaw), math.sin(yaw)], dtype=torch.float32).view(1, 1, STRUCT_DIM)
        with torch.no_grad():
            fixed = self._heads.fixed(s)
        root = math.sqrt(self.head_dim)
        slots = np.zeros((self.n_fixed, len(valid)))
        sink = np.zeros(self.n_fixed)
        kept = k[:, torch.from_numpy(np.flatnonzero(mask))]  # (n_fixed, attended slots, hd): the rest weigh 0
        for h, (q, _, _, sink_key) in enumerate(fixed):
            q = q.reshape(-1).float()
            parts = [torch.full((self.n_sink,), float(sink_key.float() @ q) / root)] if self.n_sink else []
            parts.append((kept[h] @ q) / root)
            w = torch.softmax(torch.cat(parts).double(), 0).numpy()
            sink[h] = w[:self.n_sink].sum()
            slots[h, mask] = w[self.n_sink:]
        return {"slots": slots, "sink": sink, "episode": episode, "current": current}

    def attention_by_episode(self, env: int = 0) -> tuple[np.ndarray, int] | None:
        """(n_fixed, E + 1): per fixed head, the attention mass of the last step on each episode 0 .. E - 1
        of the trial (E = the step's episode + 1), and in the last column on the sink and the pinned prefix
        (attention that found nothing remembered); rows sum to 1. None before a step."""
        att = self.attention(env)
        if att is None:
            return None
        n_ep = max(att["current"], int(att["episode"].max(initial=-1))) + 1
        out = np.zeros((self.n_fixed, n_ep + 1))
        ep = att["episode"]
        for h in range(self.n_fixed):
            np.add.at(out[h], np.where(ep >= 0, ep, n_ep), att["slots"][h])
            out[h, n_ep] += att["sink"][h]
        return out, n_ep


__all__ = ["HEAD_NAMES", "HouseMemoryView"]
