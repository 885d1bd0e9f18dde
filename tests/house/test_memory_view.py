"""HouseMemoryView.for_runner: a view only for a runner whose model keeps the house's fixed memory heads; the
runners of every other family, RA-DT's (arguments without a house section) included, get None."""

from __future__ import annotations

import pytest

from icrl_ros.house.memory_view import HouseMemoryView
from icrl_ros.runtime import PolicyRunner
from tests.image_bundles import export_image_bundle


@pytest.mark.parametrize("kind", ["radt", "hcam"])
def test_runners_without_the_house_heads_get_no_view(tmp_path, kind):
    runner = PolicyRunner.from_bundle(export_image_bundle(kind, tmp_path / kind))
    try:
        assert HouseMemoryView.for_runner(runner) is None
    finally:
        runner.close()
