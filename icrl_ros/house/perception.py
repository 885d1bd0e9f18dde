"""A frozen house encoder's label heads as a detector for scripted searchers.

:func:`encoder_perceiver` loads an encoder file written by ``training/house_encoder.py`` (trunk and ``heads.*``)
and returns ``perceive(rgb, pose)`` -> (P(in view) per category (C,), the planar position each category's
sighting implies (C, 2), the expected distance (C,), the floor distance per column band (FREE_BANDS,)), with
``pose`` (x, y, yaw) in the frame the positions come back in. The searchers that act on it
(:class:`~icrl_ros.sim.house_teacher.PerceivingTeacher`, the input searcher) see what a student on that encoder
sees, so their actions are labels a student can follow.
"""

from __future__ import annotations

import numpy as np

_LOADED: dict = {}  # one loaded encoder per process, file and camera size


def encoder_perceiver(path: str, image_size: int):
    """``perceive(rgb, pose)`` from the encoder file ``path`` for ``image_size`` px images (loaded once per
    process; one torch thread: the callers are env workers and evaluation workers beside others)."""
    key = (str(path), int(image_size))
    if key not in _LOADED:
        import torch

        from icrl_ros.training.encoder_recall import load_encoder

        torch.set_num_threads(1)
        enc, heads = load_encoder(str(path), int(image_size))

        @torch.no_grad()
        def perceive(rgb, pose):
            f = enc(torch.as_tensor(np.ascontiguousarray(rgb))[None])
            p, xy, dist = heads.object_estimates(f, torch.tensor([pose], dtype=torch.float32))
            return p[0].numpy(), xy[0].numpy(), dist[0].numpy(), heads.free_metres(f)[0].numpy()

        _LOADED[key] = perceive
    return _LOADED[key]


def with_laser_bands(env, perceive):
    """``perceive`` with the floor distance per band taken from ``env``'s planar laser (its
    :meth:`~icrl_ros.sim.house.HouseEnv.laser_bands`, what a robot's laser scan gives) instead of the heads'
    estimate from the image."""

    def seen(rgb, pose):
        p, xy, dist, _ = perceive(rgb, pose)
        return p, xy, dist, env.laser_bands().astype(np.float64)

    return seen


__all__ = ["encoder_perceiver", "with_laser_bands"]
