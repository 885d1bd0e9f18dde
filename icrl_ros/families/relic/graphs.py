"""ReLIC's deploy graphs: the shared encoder / core / heads (:mod:`icrl_ros.runtime.graphs`)."""

from icrl_ros.runtime.graphs import shared_graph_modules as graph_modules
from icrl_ros.runtime.graphs import shared_graph_specs as graph_specs

__all__ = ["graph_specs", "graph_modules"]
