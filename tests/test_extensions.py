"""The extension seam: an extension registered from this file reaches the control step, the runner's
snapshots and the logits acted on, with no change anywhere else; the registry is loud."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icrl_ros.extensions import Extension, extensions_for, register_extension, registered, unregister_extension
from icrl_ros.models.config import ModelArgs

TOY_OBS = 29  # models with this many grid cells use the toy extension (no other model does)
MASKED_ACTION = 2


class Visits:
    """Counts each env's committed steps and remembers the last episode it saw."""

    def __init__(self, batch: int) -> None:
        self.count = np.zeros(batch, np.int64)
        self.episode = np.full(batch, -1, np.int64)
        self.restores = 0

    @property
    def nbytes(self) -> int:
        return self.count.nbytes + self.episode.nbytes

    def before_encode(self, inputs, episode) -> None:
        self.episode[:] = episode.numpy()

    def after_encode(self, token) -> None:
        self.count += 1

    def reset(self) -> None:
        self.count[:] = 0
        self.episode[:] = -1

    def tensors(self) -> dict:
        return {"toy_visits": torch.from_numpy(self.count)}

    def restored(self) -> None:
        self.restores += 1


def mask_action(logits, tokens):
    out = logits.float().clone()
    out[..., MASKED_ACTION] = -1e4
    return out


@pytest.fixture
def toy():
    ext = register_extension(Extension("toy_visits", applies=lambda a: getattr(a, "n_obs", 0) == TOY_OBS,
                                       state=lambda a, batch: Visits(batch), logit_rule=lambda a: mask_action))
    try:
        yield ext
    finally:
        unregister_extension("toy_visits")


def small(**kw) -> ModelArgs:
    return ModelArgs.from_dict({**dict(n_obs=TOY_OBS, n_actions=4, max_episode_steps=10, d_model=16, n_layers=1,
                                       n_heads=2, d_mlp=32, depth_dropout=0.0, sink="kv0"), **kw})


def test_registry_is_loud_and_the_house_extensions_are_built_in(toy):
    assert {"route", "stop_rule", "toy_visits"} <= set(registered())
    with pytest.raises(ValueError, match="already registered"):
        register_extension(Extension("toy_visits", applies=lambda a: False))
    with pytest.raises(ValueError, match="owns inputs"):
        register_extension(Extension("no_state", applies=lambda a: False, owns=("x",)))
    assert [e.name for e in extensions_for(small())] == ["toy_visits"]
    assert extensions_for(small(n_obs=30)) == []


def test_a_toy_extension_reaches_the_step_the_runner_and_its_snapshots(toy, tmp_path):
    from icrl_ros.models import build_policy
    from icrl_ros.models.stepping import make_memory
    from icrl_ros.runtime import PolicyRunner
    from icrl_ros.runtime.control import ControlStep
    from icrl_ros.training.export import export_bundle

    torch.manual_seed(0)
    policy = build_policy(small()).eval()
    with torch.no_grad():
        policy.actor.weight.normal_(0, 1.0)
    step = ControlStep.live(policy, make_memory(policy, 2, 8))
    visits = step.states["toy_visits"]
    inp = {"obs": torch.tensor([3, 4]), "prev_action": torch.tensor([4, 4]), "prev_reward": torch.zeros(2),
           "episode_step": torch.zeros(2, dtype=torch.long), "episode_index": torch.tensor([0, 1])}
    logits, _ = step(inp)
    assert (logits[:, MASKED_ACTION] == -1e4).all() and (logits[:, :MASKED_ACTION].abs() < 100).all()
    step(inp, commit=False)  # a bootstrap value: the state takes in committed steps only
    assert visits.count.tolist() == [1, 1] and visits.episode.tolist() == [0, 1]
    before = step.memory_bytes
    assert before == int(step.memory.nbytes) + visits.nbytes
    step.forget()
    assert visits.count.tolist() == [0, 0]

    bundle = export_bundle(policy, tmp_path / "toy", env={"action_names": ["a", "b", "c", "d"]})
    runner = PolicyRunner.from_bundle(bundle, selection="sample", temperature=1.0)
    state = runner.control.states["toy_visits"]
    runner.begin_episode()
    acts = [runner.act({"obs": np.int64(k % TOY_OBS)})[0] for k in range(12)]
    assert MASKED_ACTION not in acts and state.count[0] == 12
    runner.snapshot(tmp_path / "s.npz")
    runner.reset_trial()
    assert state.count[0] == 0
    runner.restore(tmp_path / "s.npz")
    assert state.count[0] == 12 and state.restores == 1
    with np.load(tmp_path / "s.npz") as z:
        assert any("toy_visits" in k for k in z.files)
    runner.close()


def test_the_inputs_a_step_leaves_to_its_states_come_from_their_extensions(toy):
    """What a state writes is declared once, on its :class:`Extension` (``owns``); a state that belongs to no
    registered extension is refused."""
    from icrl_ros.extensions import owned_by

    assert owned_by({"toy_visits": Visits(1)}) == ()
    assert owned_by({"route": object(), "toy_visits": Visits(1)}) == ("route",)
    with pytest.raises(ValueError, match="no registered extension"):
        owned_by({"nowhere": Visits(1)})


def test_a_config_section_registered_from_a_test_file_nests_validates_and_round_trips():
    """An extension's options are a nested section of every model's arguments: given nested or (older
    checkpoints) flat, at its defaults when absent, validated against the model, refused by name."""
    from dataclasses import dataclass

    from icrl_ros.models.config import register_section, unregister_section

    @dataclass(frozen=True)
    class ToyOptions:
        visits_cap: int = 0

        def validate(self, m) -> None:
            if self.visits_cap < 0 or self.visits_cap > m.max_episode_steps:
                raise ValueError(f"model.toy.visits_cap: in [0, max_episode_steps], got {self.visits_cap}")

    register_section("toy", ToyOptions)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_section("toy", type("Other", (), {}))
        with pytest.raises(ValueError, match="a field of ModelArgs"):
            register_section("d_model", ToyOptions)
        plain = small()
        assert plain.toy == ToyOptions() and "toy" not in plain.to_dict()
        args = small(toy={"visits_cap": 5})
        assert args.toy.visits_cap == 5 and args.to_dict()["toy"] == {"visits_cap": 5}
        assert ModelArgs.from_dict(args.to_dict()) == args == small(visits_cap=5)  # flat moves into the section
        assert small(toy={"visits_cap": 0}) == plain  # a section at its defaults reads and saves as absent
        assert args.replace_section("toy", visits_cap=7).toy.visits_cap == 7 and args.toy.visits_cap == 5
        for bad, words in (({"toy": {"visits_cap": 99}}, "model.toy.visits_cap"),
                           ({"toy": {"cap": 1}}, "model.toy: unknown fields"),
                           ({"toy": {"visits_cap": 1}, "visits_cap": 2}, "given both flat and in model.toy")):
            with pytest.raises(ValueError, match=words):
                small(**bad)
    finally:
        unregister_section("toy")
    with pytest.raises(AttributeError):
        small().toy
