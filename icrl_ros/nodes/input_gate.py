"""Which camera frames the agent acts on, by their stamps. Pure Python (no ROS).

A lockstep bridge republishes the observation it is waiting on with its old stamp: a frame
stamped like the last one acted on is a repeat and is skipped silently. A frame stamped *before*
it is one of two things:

* a back-dated frame (a late or stray message while newer ones keep coming): dropped, counted;
* time jumping back (the bridge restarted and its stamps begin again at 1 s, a bag loops, sim
  time was reset): every later frame is "older" too, so dropping them would stall the agent for
  good. A step back of ``jump_s`` or more, or ``JUMP_AFTER`` back-dated frames in a row with no
  newer one between them, is taken as a jump: the gate forgets the old timeline and the frame is
  acted on like a new one.
"""

from __future__ import annotations

import math

NEW, REPEAT, BACK_DATED, JUMP = "new", "repeat", "back_dated", "jump"


class StampGate:
    JUMP_AFTER = 3
    """Back-dated frames in a row (no newer frame between) that count as a jump back."""

    def __init__(self, jump_s: float = 1.0) -> None:
        self.jump_s = float(jump_s)
        self.last_acted = -math.inf
        self._behind = 0

    def check(self, stamp: float) -> str:
        """Classify a frame's stamp: :data:`NEW`, :data:`REPEAT`, :data:`BACK_DATED` or :data:`JUMP`
        (after a jump the gate has forgotten the old timeline: act on the frame)."""
        if stamp > self.last_acted:
            self._behind = 0
            return NEW
        if stamp == self.last_acted:
            return REPEAT
        self._behind += 1
        if self.last_acted - stamp >= self.jump_s or self._behind >= self.JUMP_AFTER:
            self.reset()
            return JUMP
        return BACK_DATED

    def acted(self, stamp: float) -> None:
        """The agent acted on a frame with this stamp."""
        self.last_acted = float(stamp)
        self._behind = 0

    def reset(self) -> None:
        """Forget the timeline (a jump, a memory reset): the next frame is new whatever its stamp."""
        self.last_acted = -math.inf
        self._behind = 0


__all__ = ["StampGate", "NEW", "REPEAT", "BACK_DATED", "JUMP"]
