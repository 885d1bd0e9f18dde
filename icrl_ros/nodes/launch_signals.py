"""SIGTERM to ``ros2 launch`` stops this package's nodes as Ctrl-C does (used by ``launch/*.launch.py``).

``kill <pid>`` and ``docker stop`` send SIGTERM to the ``ros2 launch`` process only. The launch
package does not shut its processes down on SIGTERM: with rclpy's handler in that process the
default action ends it at once, and the launch service's own SIGTERM handler (reached only when a
Python handler exists) cancels the run without stopping anything. Either way the nodes it started
kept running, and the agent kept driving.

:func:`shutdown_on_sigterm` is an action to put first in a launch description. At launch time it
makes SIGTERM emit the same ``Shutdown`` event a launch file's own shutdown emits: every process
gets SIGINT at once (the nodes publish a zero velocity and exit), SIGTERM after
``sigterm_timeout`` and SIGKILL after ``sigkill_timeout`` if one hangs; then ``ros2 launch``
exits. It installs once per process (launch files that include each other may all carry it).
:data:`STOP_WITH_PARENT_ENV` is what the launch files set in their nodes' environment so a node
also stops when the launch process dies without a word (SIGKILL): see
:func:`icrl_ros.nodes.lifetime.stop_with_parent`.
"""

from __future__ import annotations

import os
import signal

import launch.logging
from launch.actions import OpaqueFunction
from launch.events import Shutdown
from launch.utilities.signal_management import AsyncSafeSignalManager

from icrl_ros.nodes.lifetime import STOP_WITH_PARENT_ENV

_MARK = "_icrl_ros_sigterm_installed"


def shutdown_on_sigterm() -> OpaqueFunction:
    """An action that routes SIGTERM of the launch process to an orderly shutdown of its nodes."""
    return OpaqueFunction(function=_install)


def node_env() -> dict[str, str]:
    """Environment for a node started by this launch process: stop when this process dies."""
    return {STOP_WITH_PARENT_ENV: str(os.getpid())}


def _install(context, *args, **kwargs):
    logger = launch.logging.get_logger("icrl_ros.launch")
    # the launch service dispatches signals through the manager of its running loop; its SIGTERM
    # entry is replaced (the class keeps the active manager; launch has no public accessor for it)
    manager = getattr(AsyncSafeSignalManager, "_AsyncSafeSignalManager__current", None)
    if manager is None or not callable(getattr(manager, "handle", None)):
        logger.warning("cannot take over SIGTERM in this launch version: on SIGTERM the nodes stop only "
                       "because their parent died (use Ctrl-C / SIGINT to stop this launch)")
        return None
    if getattr(manager, _MARK, False):
        return None

    def on_sigterm(signum: int) -> None:
        if context.is_shutdown:
            logger.warning("SIGTERM again while shutting down, ignoring")
            return
        logger.warning("SIGTERM: shutting the nodes down as on Ctrl-C (SIGINT to each; they stop the base)")
        context.emit_event_sync(Shutdown(reason="SIGTERM", due_to_sigint=False))

    manager.handle(signal.SIGTERM, on_sigterm)
    # a Python-level handler makes the interpreter write SIGTERM to the manager's wakeup fd (and keeps
    # the default action, process death, from running); the work happens in on_sigterm on the loop
    signal.signal(signal.SIGTERM, _noop)
    setattr(manager, _MARK, True)
    return None


def _noop(signum, frame) -> None:
    return None
