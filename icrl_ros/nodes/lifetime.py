"""A node started by this package's launch files stops when the launch process dies.

SIGKILL of ``ros2 launch`` (or its crash) leaves its children running: an agent would go on driving
with nobody to stop it. The launch files put the launch process's pid in
:data:`STOP_WITH_PARENT_ENV`; a node that finds it there asks Linux to send it SIGTERM when its
parent dies (``prctl(PR_SET_PDEATHSIG)``), which the console scripts handle like Ctrl-C: a zero
velocity, then exit. Without the variable (a node started by hand, ``ros2 run``) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

STOP_WITH_PARENT_ENV = "ICRL_ROS_STOP_WITH_PID"
_PR_SET_PDEATHSIG = 1


def stop_with_parent() -> str:
    """Arm the parent-death signal when :data:`STOP_WITH_PARENT_ENV` names this process's parent.

    Call after the SIGTERM handler is installed. Returns what happened, for the log: ``""`` when the
    variable is unset; a reason when it could not be armed (not Linux, another parent). When the
    parent has already died (it is no longer the pid named) SIGTERM is raised at once.
    """
    value = os.environ.get(STOP_WITH_PARENT_ENV, "")
    if not value:
        return ""
    try:
        parent = int(value)
    except ValueError:
        return f"{STOP_WITH_PARENT_ENV}={value!r} is not a pid: not stopping with the launch process"
    libc_name = ctypes.util.find_library("c")
    if not libc_name or not hasattr(os, "getppid"):
        return "no prctl here: this node does not stop by itself if the launch process is killed"
    libc = ctypes.CDLL(libc_name, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return f"prctl(PR_SET_PDEATHSIG) failed (errno {ctypes.get_errno()}): not stopping with the launch process"
    if os.getppid() != parent:  # died before the request was armed (we were re-parented)
        os.kill(os.getpid(), signal.SIGTERM)
        return f"the launch process (pid {parent}) is gone: stopping"
    return f"stops with the launch process (pid {parent})"
