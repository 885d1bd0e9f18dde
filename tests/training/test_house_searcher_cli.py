"""The scripted searcher's and the long-life run's command lines refuse a user's mistake in one line."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv,words", [
    (["--agents", "seeing"], "need --encoder"),
    (["--agents", "seeing", "--encoder", "nowhere.pt"], "does not exist"),
    (["--agents", "seeing", "--encoder", "checkpoints/house_encoder.pt", "--searcher", "speed=2"], "--searcher"),
    (["--agents", "inputs", "--encoder", "checkpoints/house_encoder.pt", "--searcher", "slip=2"], "probability"),
    (["--agents", "teacher,psychic"], "is not one of"),
    (["--agents", "inputs", "--encoder", "checkpoints/house_encoder.pt", "--searcher", "approach=sideways"],
     "route or looked"),
])
def test_teacher_curves_refuses_bad_searcher_settings(argv, words, capsys, tmp_path):
    from icrl_ros.experiments.house_teacher_curves import main

    with pytest.raises(SystemExit) as e:
        main([*argv, "--trials", "1", "--episodes", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and words in err and "Traceback" not in err


@pytest.mark.parametrize("argv,words", [
    (["nowhere"], "not a bundle directory"),
    (["bundles/house_relic_scan", "--episodes", "15"], "multiple of --block"),
    (["bundles/house_relic_scan", "--episodes", "10", "--block", "5"], "at least 20"),
])
def test_long_life_refuses_what_it_cannot_run(argv, words, capsys, tmp_path):
    from icrl_ros.experiments.house_long_life import main

    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and words in err and "Traceback" not in err


def test_the_census_gives_every_episode_one_class_and_success_only_to_the_found(tmp_path):
    """--census: one CENSUS class per (trial, episode) of a perceiving agent, in curves.json beside its outcomes."""
    import json

    import numpy as np

    from icrl_ros.experiments.house_teacher_curves import CENSUS, main

    main(["--agents", "inputs", "--encoder", "checkpoints/house_encoder.pt", "--searcher", "approach=looked",
          "--census", "--trials", "2", "--episodes", "2", "--max-steps", "40", "--seed", "5", "--workers", "1",
          "--out", str(tmp_path)])
    raw = json.loads((tmp_path / "curves.json").read_text())["raw"]["inputs"]
    census, success = np.array(raw["census"]), np.array(raw["success"])
    assert census.shape == success.shape == (2, 2)
    assert ((census >= 0) & (census < len(CENSUS))).all()
    assert np.array_equal(census == 0, success == 1.0)
