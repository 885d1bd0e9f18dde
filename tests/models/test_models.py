import pytest
import torch

from icrl_ros.families.memo.model import MemoPolicy
from icrl_ros.models import SINKS, ICLPolicy, ModelArgs, load_checkpoint, save_checkpoint
from tests.helpers import cached_rollout, random_trial


def small_args(memo: dict | None = None, **kw) -> ModelArgs:
    """``memo``: Memo's own fields, applied when ``kind`` is memo."""
    base = dict(n_obs=20, n_actions=5, max_episode_steps=8, d_model=32, n_layers=2, n_heads=4, d_mlp=64, grid_size=5)
    base.update(kw)
    if kw.get("kind") == "memo":
        base.update(memo or {})
    return ModelArgs.from_dict(base)


@pytest.mark.parametrize("iea", [True, False])
@pytest.mark.parametrize("sink", SINKS)
def test_cached_step_matches_full_sequence(sink, iea):
    torch.manual_seed(0)
    args = small_args(sink=sink, iea=iea)
    policy = ICLPolicy(args).eval()
    if sink in ("kv", "kv0", "token"):  # make the learnt sink parts matter
        for name, p in policy.named_parameters():
            if "sink" in name:
                p.data.normal_(0, 1.0)
    inp = random_trial(args, batch=3, steps=30, episode_len=7)  # crosses 4 episode boundaries
    with torch.no_grad():
        logits, values, _, _ = policy.forward_sequence(inp)
    c_logits, c_values = cached_rollout(policy, inp)
    assert (logits - c_logits).abs().max() <= 1e-5
    assert (values - c_values).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", ["relic", "memo"])
def test_image_policy_cached_step_matches_full_sequence(kind):
    torch.manual_seed(0)
    args = small_args(kind=kind, obs_type="image", image_size=24, n_goals=12, sink="kv0", memo=dict(l_seg=5, l_sum=2))
    from icrl_ros.models import build_policy

    policy = build_policy(args).eval()
    assert set(policy.input_spec()) == {"rgb", "odom", "prev_action", "prev_reward", "episode_step", "goal"}
    inp = random_trial(args, batch=2, steps=14, episode_len=6)
    with torch.no_grad():
        logits, values = policy.forward_sequence(inp)[:2]
    c_logits, c_values = cached_rollout(policy, inp)
    assert (logits - c_logits).abs().max() <= 1e-5 and (values - c_values).abs().max() <= 1e-5


def test_frozen_pretrained_encoder_loads_from_a_local_file(tmp_path):
    from icrl_ros.models.encoders import ImageEncoder

    enc = ImageEncoder(32, 24)
    torch.save(enc.state_dict(), tmp_path / "enc.pt")
    from icrl_ros.models import build_policy

    policy = build_policy(small_args(obs_type="image", image_size=24, pretrained_encoder=str(tmp_path / "enc.pt")),
                          load_pretrained=True)
    assert torch.equal(policy.encoder.image.fc.weight, enc.fc.weight)
    assert not any(p.requires_grad for p in policy.encoder.image.parameters())
    with pytest.raises(FileNotFoundError, match="pretrained_encoder"):
        build_policy(small_args(obs_type="image", image_size=24, pretrained_encoder=str(tmp_path / "nope.pt")),
                     load_pretrained=True)


def test_no_iea_ignores_earlier_episodes():
    torch.manual_seed(0)
    args = small_args(iea=False)
    policy = ICLPolicy(args).eval()
    inp = random_trial(args, batch=1, steps=16, episode_len=8)
    other = {k: v.clone() for k, v in inp.items()}
    other["obs"][:, :8] = (other["obs"][:, :8] + 1) % args.n_obs  # change episode 0 only
    with torch.no_grad():
        a = policy.forward_sequence(inp)[0][:, 8:]
        b = policy.forward_sequence(other)[0][:, 8:]
    assert torch.allclose(a, b, atol=1e-6)
    policy_iea = ICLPolicy(small_args(iea=True)).eval()
    with torch.no_grad():
        a = policy_iea.forward_sequence(inp)[0][:, 8:]
        b = policy_iea.forward_sequence(other)[0][:, 8:]
    assert not torch.allclose(a, b, atol=1e-6)


def test_checkpoint_round_trip(tmp_path):
    policy = ICLPolicy(small_args(sink="kv"))
    save_checkpoint(tmp_path / "c.pt", policy, {"note": "x"}, step=3)
    loaded, blob = load_checkpoint(tmp_path / "c.pt")
    assert blob["step"] == 3 and blob["config"] == {"note": "x"}
    for (n, p), (_, q) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(p, q), n


@pytest.mark.parametrize(
    "field,value,needle",
    [("sink", "kvv", "model.sink"), ("d_model", -4, "model.d_model"), ("n_layers", 0, "model.n_layers"),
     ("kind", "lstm", "model.kind"), ("depth_dropout", 1.5, "model.depth_dropout"),
     ("route_skill", 32, "model.house.route_skill"), ("scan_input", True, "model.house.scan_input")],
)
def test_bad_model_args_name_the_field(field, value, needle):
    with pytest.raises(ValueError, match=needle):
        small_args(**{field: value})


def test_xy_grid_encoding_has_no_per_cell_table_and_steps_exactly():
    torch.manual_seed(0)
    args = small_args(n_obs=25, grid_encoding="xy")
    policy = ICLPolicy(args).eval()
    names = {n for n, _ in policy.named_parameters()}
    assert "encoder.rows.weight" in names and "encoder.cols.weight" in names
    assert not any(n.startswith("encoder.obs.") for n in names)
    # cells (r, c) and (r', c'): the token difference is the rows' plus the columns' difference
    tok = lambda cell: policy.encoder.rows(torch.tensor(cell // 5)) + policy.encoder.cols(torch.tensor(cell % 5))
    assert torch.allclose(tok(7) - tok(2), policy.encoder.rows.weight[1] - policy.encoder.rows.weight[0])
    inp = random_trial(args, batch=2, steps=20, episode_len=6)
    with torch.no_grad():
        logits = policy.forward_sequence(inp)[0]
    assert (logits - cached_rollout(policy, inp)[0]).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="model.grid_encoding"):
        small_args(grid_encoding="onehot")


@pytest.mark.parametrize("kind", ["relic", "memo"])
def test_last_obs_input_is_embedded_and_steps_exactly(kind):
    torch.manual_seed(0)
    args = small_args(n_obs=25, grid_encoding="xy", last_obs=True, kind=kind, memo=dict(l_seg=8, l_sum=2))
    policy = (MemoPolicy if kind == "memo" else ICLPolicy)(args).eval()
    assert "last_obs" in policy.input_spec()
    inp = random_trial(args, batch=2, steps=20, episode_len=6)
    with torch.no_grad():
        logits = policy.forward_sequence(inp)[0]
        other = policy.forward_sequence({**inp, "last_obs": (inp["last_obs"] + 1) % 25})[0]
    assert (logits - other).abs().max() > 1e-4  # the input is used
    assert (logits - cached_rollout(policy, inp)[0]).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="model.last_obs"):
        small_args(last_obs=True, obs_type="image")


@pytest.mark.parametrize("kind", ["relic", "memo"])
def test_cached_features_train_the_same_policy_the_image_graph_runs(kind, tmp_path):
    """visual_encoder: features. Training stores the frozen encoder's features (rgb_feat) instead
    of pixels; the sequence forward on them equals the forward on the images, cached stepping
    on images matches it, and only the projection after the frozen encoder trains."""
    from icrl_ros.models import build_policy
    from icrl_ros.models.encoders import FeatureEncoder

    torch.manual_seed(0)
    enc = FeatureEncoder(16, 24)
    torch.save(enc.state_dict(), tmp_path / "enc.pt")
    args = small_args(kind=kind, obs_type="image", image_size=24, n_goals=12, sink="kv0", memo=dict(l_seg=5, l_sum=2),
                      visual_encoder="features", feature_dim=16, odom_fourier=3,
                      pretrained_encoder=str(tmp_path / "enc.pt"))
    policy = build_policy(args, load_pretrained=True).eval()
    assert not any(p.requires_grad for p in policy.encoder.image.parameters())
    assert policy.encoder.image_proj.weight.requires_grad
    spec = policy.rollout_spec()
    assert "rgb" not in spec and spec["rgb_feat"] == ((16,), torch.float32) and "rgb" in policy.input_spec()
    inp = random_trial(args, batch=2, steps=14, episode_len=6)
    cached = policy.rollout_inputs(inp)
    assert set(cached) == (set(inp) - {"rgb"}) | {"rgb_feat"} and cached["rgb_feat"].shape == (2, 14, 16)
    with torch.no_grad():
        a = policy.forward_sequence(inp)[:2]
        b = policy.forward_sequence(cached)[:2]
    assert (a[0] - b[0]).abs().max() <= 1e-5 and (a[1] - b[1]).abs().max() <= 1e-5
    c_logits, c_values = cached_rollout(policy, inp)
    assert (a[0] - c_logits).abs().max() <= 1e-5
    loss = policy.forward_sequence(cached)[0].sum()
    loss.backward()
    assert policy.encoder.image_proj.weight.grad is not None and policy.encoder.image.out[0].weight.grad is None


def test_odom_fourier_features_are_periodic_in_position():
    from icrl_ros.models.encoders import odom_features

    odom = torch.tensor([[0.3, -1.2, 0.5], [0.3 + 16.0, -1.2 - 16.0, 0.5]])
    f = odom_features(odom, 5)
    assert f.shape == (2, 4 + 4 * 5)
    assert torch.allclose(f[0, 4:], f[1, 4:], atol=1e-4)  # every scale (1..16 m) divides 16 m
    assert not torch.allclose(f[0, :2], f[1, :2])


def test_goal_readout_feeds_the_encoder_heads_for_the_goal(tmp_path):
    """goal_readout: the frozen label heads saved beside the encoder (heads.*) give, for the
    goal category only, P(in view), bearing and distance distributions, free space and
    P(blocked); they stay frozen, cached features give the same forward, and an encoder file
    without heads is refused by name."""
    from icrl_ros.models import build_policy
    from icrl_ros.models.encoders import GOAL_VIEW_DIM, FeatureEncoder, FeatureHeads

    torch.manual_seed(0)
    enc, heads = FeatureEncoder(16, 24), FeatureHeads(16, 12)
    torch.save({**enc.state_dict(), **{f"heads.{k}": v for k, v in heads.state_dict().items()}}, tmp_path / "enc.pt")
    args = small_args(kind="relic", obs_type="image", image_size=24, n_goals=12, sink="kv0", visual_encoder="features",
                      feature_dim=16, goal_readout=True, pretrained_encoder=str(tmp_path / "enc.pt"))
    policy = build_policy(args, load_pretrained=True).eval()
    assert not any(p.requires_grad for p in policy.encoder.heads.parameters())
    assert policy.encoder.goal_view_proj.weight.requires_grad
    f, goal = torch.randn(3, 16), torch.tensor([0, 5, 11])
    view = policy.encoder.heads.goal_view(f, goal)
    assert view.shape == (3, GOAL_VIEW_DIM)
    with torch.no_grad():
        for i, g in enumerate(goal.tolist()):
            assert view[i, 0] == pytest.approx(torch.sigmoid(heads.present(f[i])[g]).item(), abs=1e-6)
            bearing = heads.bearing(f[i]).reshape(12, 5)[g].softmax(-1)
            assert torch.allclose(view[i, 1:6], bearing, atol=1e-6)
            assert torch.allclose(view[i, 11:19], heads.free(f[i]), atol=1e-6)
    inp = random_trial(args, batch=2, steps=9, episode_len=4)
    with torch.no_grad():
        a = policy.forward_sequence(inp)[0]
        b = policy.forward_sequence(policy.rollout_inputs(inp))[0]
    assert (a - b).abs().max() <= 1e-5

    torch.save(enc.state_dict(), tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="heads.present.weight"):
        build_policy(small_args(kind="relic", obs_type="image", image_size=24, n_goals=12, sink="kv0",
                                visual_encoder="features", feature_dim=16, goal_readout=True,
                                pretrained_encoder=str(tmp_path / "bare.pt")), load_pretrained=True)


def sharp_heads(n_feat: int, n_cat: int, category: int, bearing_bin: int, dist_bin: int):
    """Label heads that, whatever the features, see ``category`` in one bearing and distance bin."""
    from icrl_ros.models.encoders import BEARING_BINS, DIST_BINS, FeatureHeads

    heads = FeatureHeads(n_feat, n_cat)
    with torch.no_grad():
        for p in heads.parameters():
            p.zero_()
        heads.present.bias.fill_(-20.0)
        heads.present.bias[category] = 20.0
        heads.bearing.bias.view(n_cat, BEARING_BINS)[category, bearing_bin] = 50.0
        heads.dist.bias.view(n_cat, DIST_BINS)[category, dist_bin] = 50.0
    return heads


def test_object_readout_places_what_the_heads_see_in_the_odometry_frame(tmp_path):
    """object_readout: per category P(in view) and the position it implies (robot pose + the
    expected bearing and distance), in the odometry frame (x forward, y left, yaw CCW). A robot
    at (1, 2) facing +y that sees category 3 straight ahead 1.5 m away places it at (1, 3.5);
    in the leftmost bearing bin, to its left (x < 1). The policy builds with it, the heads stay
    frozen, and cached features give the same forward as images."""
    import math

    from icrl_ros.models import build_policy
    from icrl_ros.models.encoders import BEARING_CENTRES, DIST_CENTRES, OBJECT_SCALE_M, FeatureEncoder

    f, odom = torch.randn(1, 16), torch.tensor([[1.0, 2.0, math.pi / 2]])
    with torch.no_grad():
        p, xy, dist = sharp_heads(16, 12, 3, 2, 1).object_estimates(f, odom)
        assert p[0, 3] > 0.99 and p[0, [0, 1, 2, 4]].max() < 1e-6 and dist[0, 3] == pytest.approx(DIST_CENTRES[1])
        assert xy[0, 3].tolist() == pytest.approx([1.0, 3.5], abs=1e-4)
        _, xy_left, _ = sharp_heads(16, 12, 3, 0, 1).object_estimates(f, odom)
        b = BEARING_CENTRES[0]
        assert b > 0 and xy_left[0, 3].tolist() == pytest.approx([1 - 1.5 * math.sin(b), 2 + 1.5 * math.cos(b)], abs=1e-4)
        view = sharp_heads(16, 12, 3, 2, 1).object_view(f, odom)
        assert view.shape == (1, 36) and view[0, 3] > 0.99
        assert view[0, 12 + 2 * 3: 12 + 2 * 3 + 2].tolist() == pytest.approx([1.0 / OBJECT_SCALE_M, 3.5 / OBJECT_SCALE_M], abs=1e-3)

    enc = FeatureEncoder(16, 24)
    torch.save({**enc.state_dict(), **{f"heads.{k}": v for k, v in sharp_heads(16, 12, 3, 2, 1).state_dict().items()}},
               tmp_path / "enc.pt")
    args = small_args(kind="relic", obs_type="image", image_size=24, n_goals=12, sink="kv0", visual_encoder="features",
                      feature_dim=16, object_readout=True, pretrained_encoder=str(tmp_path / "enc.pt"))
    policy = build_policy(args, load_pretrained=True).eval()
    assert not any(q.requires_grad for q in policy.encoder.heads.parameters())
    assert policy.encoder.object_view_proj.weight.requires_grad and not hasattr(policy.encoder, "goal_view_proj")
    inp = random_trial(args, batch=2, steps=9, episode_len=4)
    with torch.no_grad():
        a = policy.forward_sequence(inp)[0]
        b = policy.forward_sequence(policy.rollout_inputs(inp))[0]
    assert (a - b).abs().max() <= 1e-5


def test_memory_aux_head_is_relic_only_and_returned_on_request():
    from icrl_ros.models import build_policy

    args = small_args(kind="relic", memory_aux=True)
    policy = build_policy(args).eval()
    inp = random_trial(args, batch=2, steps=9, episode_len=4)
    out = policy.forward_sequence(inp, aux=True)
    assert len(out) == 5 and out[4].shape == (2, 9, 3)
    assert torch.equal(policy.forward_sequence(inp)[0], out[0])  # the head does not change the policy
    with pytest.raises(ValueError, match="memory_aux head"):
        build_policy(small_args(kind="relic")).forward_sequence(inp, aux=True)
    with pytest.raises(ValueError, match="model.house.memory_aux: only for kind relic"):
        small_args(kind="memo", memory_aux=True).validate()


def object_memory_policy(tmp_path, kind: str, heads, **extra):
    """A small image policy with the object memory over frozen ``heads`` (16 features, 12
    categories; Memo: segments of 3 steps, 2 summary slots), seeded, in eval mode; ``extra``
    overrides model fields (place_memory, n_heads)."""
    from icrl_ros.models import build_policy
    from icrl_ros.models.encoders import FeatureEncoder

    torch.save({**FeatureEncoder(16, 24).state_dict(), **{f"heads.{k}": v for k, v in heads.state_dict().items()}},
               tmp_path / "enc.pt")
    args = small_args(kind=kind, obs_type="image", image_size=24, n_goals=12, sink="kv0", visual_encoder="features",
                      feature_dim=16, object_memory=True, d_model=64, memo=dict(l_seg=3, l_sum=2),
                      pretrained_encoder=str(tmp_path / "enc.pt"), **{"n_heads": 2, **extra})
    torch.manual_seed(0)
    return build_policy(args, load_pretrained=True).eval()


def readout_inputs(policy, layer, inp: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The full-sequence logits and what ``layer`` (a fixed head's readout projection) received at
    each step of one trial (T, features); Memo's summary tokens' own reads are not steps: skipped."""
    calls, summarizing = [], []
    if policy.args.kind == "memo":
        inner = policy.summarize

        def summarize(*a):
            summarizing.append(1)
            try:
                return inner(*a)
            finally:
                summarizing.pop()
        policy.summarize = summarize
    hook = layer.register_forward_hook(lambda m, i, o: None if summarizing else calls.append(i[0]))
    try:
        with torch.no_grad():
            logits = policy.forward_sequence(inp)[0]
    finally:
        hook.remove()
        policy.__dict__.pop("summarize", None)
    return logits, torch.cat(calls, 1)[0]


@pytest.mark.parametrize("kind", ["relic", "memo"])
def test_object_memory_head_recalls_where_the_goal_was_seen_and_steps_exactly(tmp_path, kind):
    """object_memory: head 0 of layer 0 is a fixed lookup. A robot at (1, 2) facing +y that sees
    category 3 straight ahead 1.5 m away in episode 0 remembers it at (1, 3.5): in episode 1,
    from (0, 0) facing +x, with goal 3 the block reads an offset of 1 m forward and 3.5 m left
    (attention mass 1); before the sighting, and for a goal never seen, mass 0 and no offset.
    Memo (segments of 3 steps, 2 summary slots for 12 categories) keeps the sighting through the
    summary of the segment that held it, which the later steps read instead of the raw step.
    Cached stepping (the runtime's path) equals the full-sequence pass."""
    import math

    from icrl_ros.models import build_policy
    from icrl_ros.models.object_memory import STRUCT_DIM

    heads = sharp_heads(16, 12, 3, 2, 1)
    with torch.no_grad():  # category 3 in view only when feature 0 is 1
        heads.present.bias[3] = -20.0
        heads.present.weight[3, 0] = 40.0
    policy = object_memory_policy(tmp_path, kind, heads)
    T = 8
    feat = torch.zeros(1, T, 16)
    feat[0, 1, 0] = 1.0  # the sighting
    odom = torch.tensor([[1.0, 2.0, math.pi / 2]] * 4 + [[0.0, 0.0, 0.0]] * 4).unsqueeze(0)
    goal = torch.tensor([[3, 3, 3, 3, 3, 3, 5, 3]])
    t = torch.arange(T)[None]
    inp = {"rgb_feat": feat, "odom": odom, "goal": goal, "prev_action": torch.zeros(1, T, dtype=torch.long),
           "prev_reward": torch.zeros(1, T), "episode_step": t % 4, "episode_index": t // 4}
    logits, f = readout_inputs(policy, policy.core.blocks[0].object_memory.out, inp)  # (T, 6): forward, left, unit bearing (2), length, mass (units of 5 m)
    assert f[0].abs().max() < 1e-4  # nothing seen yet
    assert f[1, 5] > 0.99 and f[1, :2].tolist() == pytest.approx([1.5 / 5, 0.0], abs=1e-3)
    for step in (4, 5, 7):
        assert f[step, 5] > 0.99 and f[step, :2].tolist() == pytest.approx([1.0 / 5, 3.5 / 5], abs=1e-3)
        assert f[step, 2:4].tolist() == pytest.approx([1 / math.hypot(1, 3.5), 3.5 / math.hypot(1, 3.5)], abs=1e-3)
    assert f[6].abs().max() < 1e-4  # goal 5 was never seen
    x = policy.encode(inp)
    assert x.shape[-1] == 64 and x[0, 1, -STRUCT_DIM:][2] > 0.99  # the token carries the sighting
    steps = [{k: v[:, i] for k, v in inp.items()} for i in range(T)]
    from icrl_ros.models.stepping import make_memory
    from icrl_ros.runtime.control import ControlStep

    step = ControlStep.live(policy, make_memory(policy, 1, T))
    cached = torch.stack([step(s)[0] for s in steps], 1)
    assert (cached - logits).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="model.house.object_memory"):
        small_args(kind="memo", object_memory=True, sink="none").validate()
    with pytest.raises(ValueError, match="model.house.object_memory"):
        small_args(kind="hcam", object_memory=True, sink="kv0").validate()
    with pytest.raises(ValueError, match="head size"):
        build_policy(small_args(kind="relic", obs_type="image", image_size=24, n_goals=12, sink="kv0",
                                visual_encoder="features", feature_dim=16, object_memory=True, d_model=32, n_heads=4))


def place_memory_trial(T: int = 9):
    """A robot that drives 4 steps along +x, turns left, drives 3 steps along +y, then stops
    facing back (-x): random image features, goal 3, two episodes (house-frame pose)."""
    import math

    poses = [[0.25 * i, 0.0, 0.0] for i in range(4)] + [[0.75, 0.0, math.pi / 2]]
    poses += [[0.75, 0.25 * i, math.pi / 2] for i in range(1, 4)] + [[0.75, 0.75, math.pi]]
    t = torch.arange(T)[None]
    torch.manual_seed(1)
    return {"rgb_feat": torch.randn(1, T, 16), "odom": torch.tensor(poses[:T]).unsqueeze(0),
            "goal": torch.full((1, T), 3), "prev_action": torch.zeros(1, T, dtype=torch.long),
            "prev_reward": torch.zeros(1, T), "episode_step": t % 5, "episode_index": t // 5}


def expected_place_features(odom: torch.Tensor) -> torch.Tensor:
    """What the place memory heads should read at every step of one trajectory (T, 3) in metres:
    per probe (mass, forward, left), written out from the module's constants."""
    import math

    from icrl_ros.models.place_memory import PRIOR_VIEWS, PROBES, SIGMA_M, VIEW_AHEAD_M

    out = []
    views = odom[:, :2] + VIEW_AHEAD_M * torch.stack([odom[:, 2].cos(), odom[:, 2].sin()], -1)
    for t in range(odom.shape[0]):
        x, y, yaw = odom[t].tolist()
        c, s = math.cos(yaw), math.sin(yaw)
        row = []
        for f, left in PROBES:
            p = torch.tensor([x + c * f - s * left, y + s * f + c * left])
            w = torch.exp(-((views[: t + 1] - p) ** 2).sum(-1) / SIGMA_M ** 2)
            mass = float(w.sum() / (w.sum() + PRIOR_VIEWS))
            d = ((w[:, None] * views[: t + 1]).sum(0) / w.sum() - p) / SIGMA_M
            row += [mass, float(c * d[0] + s * d[1]), float(-s * d[0] + c * d[1])]
        out.append(torch.tensor(row).clamp(-3.0, 3.0))
    return torch.stack(out)


@pytest.mark.parametrize("kind", ["relic", "memo"])
def test_place_memory_heads_read_the_floor_already_looked_at_and_step_exactly(tmp_path, kind):
    """place_memory: heads 1 and 2 of layer 0 are fixed kernel lookups of past view points. On a
    robot that drives along +x, turns and drives along +y, ReLIC's heads read, at every step,
    the attention mass and the mean view point's robot-frame offset written out by hand from the
    module's constants (probe here and 2 m ahead, 1 m kernel, a sink worth 8 views). Memo keeps
    them through summaries (lossy within a run of steps); for both, cached stepping (the
    runtime's path) equals the full-sequence pass."""
    from icrl_ros.models.stepping import make_memory
    from icrl_ros.runtime.control import ControlStep

    policy = object_memory_policy(tmp_path, kind, sharp_heads(16, 12, 3, 2, 1), place_memory=True, n_heads=4)
    inp = place_memory_trial()
    T = inp["goal"].shape[1]
    logits, got = readout_inputs(policy, policy.core.blocks[0].place_memory.out, inp)  # (T, 6)
    want = expected_place_features(inp["odom"][0])
    if kind == "relic":
        assert (got - want).abs().max() < 1e-3, (got, want)
    else:  # the first segment (3 steps) is read raw; later ones through summaries of runs
        assert (got[:3] - want[:3]).abs().max() < 1e-3
        assert (got[:, 0::3] - want[:, 0::3]).abs().max() < 0.15  # mass, from 2-slot summaries of 3 steps
    import math

    # step 0: one view, 1 m ahead of the "here" probe (weight e^-1 against the sink's 8), 1 m
    # behind the "2 m ahead" probe
    assert got[0].tolist() == pytest.approx([math.exp(-1) / (math.exp(-1) + 8), 1.0, 0.0,
                                             math.exp(-1) / (math.exp(-1) + 8), -1.0, 0.0], abs=1e-3)
    steps = [{k: v[:, i] for k, v in inp.items()} for i in range(T)]
    step = ControlStep.live(policy, make_memory(policy, 1, T))
    cached = torch.stack([step(s)[0] for s in steps], 1)
    assert (cached - logits).abs().max() <= 1e-4
    with pytest.raises(ValueError, match="model.house.place_memory: needs model.house.object_memory"):
        small_args(kind="relic", place_memory=True).validate()
    with pytest.raises(ValueError, match="n_heads must be at least 4"):
        small_args(kind="relic", obs_type="image", n_goals=4, sink="kv0", visual_encoder="features",
                   object_memory=True, place_memory=True, n_heads=2).validate()


def test_place_summary_of_runs_at_one_point_equals_the_raw_steps():
    """summarize_views: when each run of a segment's steps sits at one view point, the summary
    slots (mean point, log step count on the key) give every probe the same output as the raw
    steps; an empty slot weighs nothing."""
    from icrl_ros.models.place_memory import PlaceMemoryHeads, summarize_views

    pm = PlaceMemoryHeads(16, 32, 5.0)
    pts = torch.tensor([[0.1, 0.2]] * 2 + [[0.3, -0.1]] * 2 + [[-0.2, 0.05]] * 2)[None]  # 3 runs of 2
    k, v = pm.key_value(pts)
    seg = torch.ones(1, 6, dtype=torch.bool)
    ks, vs = summarize_views(k, v, seg, 3, pm.sigma)
    struct = torch.zeros(1, 1, 9)
    struct[..., 5:9] = torch.tensor([0.05, 0.1, 0.6, 0.8])
    for q, _, _, sink in pm.qkv(struct, torch.float32):
        def read(keys, vals):
            logits = torch.cat([(q[0] @ sink)[..., None], q[0] @ keys[0].T], -1) / 4.0  # 1 / sqrt(16)
            w = torch.softmax(logits, -1)
            return w[..., 1:] @ vals[0]
        assert (read(ks, vs) - read(k, v)).abs().max() < 1e-4
    empty = seg.clone()
    empty[:, 2:] = False  # two steps, three slots: one slot is empty
    ks, vs = summarize_views(k, v, empty, 3, pm.sigma)
    assert vs[0, :, 2].tolist() == [1.0, 1.0, 0.0]  # runs of one step each, then nothing
    for q, _, _, sink in pm.qkv(struct, torch.float32):
        assert ((q[0] @ ks[0].T)[..., 2] / 4.0 - (q[0] @ sink) / 4.0).max() < -1000.0


@pytest.mark.parametrize("kind,place", [pytest.param("memo", False, marks=pytest.mark.slow), ("memo", True),
                                        ("relic", True)],
                         ids=["memo-objects", "memo-objects+places", "relic-objects+places"])  # the second covers the first
def test_object_and_place_memory_export_and_replay_on_onnx_runtime(tmp_path, kind, place):
    """The fixed heads are part of the exported graphs, and so are Memo's per-category aggregation
    and the place memory's runs of view points in the summarize graph: a policy with the object
    memory (Memo: segments of 3 steps, 2 summary slots; 12 categories, random image features)
    replayed through ONNX Runtime matches the full-sequence pass within 1e-4 (2.4 s alone)."""
    from icrl_ros.training.export import export_bundle, verify_bundle

    extra = {"place_memory": True, "n_heads": 4} if place else {}
    policy = object_memory_policy(tmp_path, kind, sharp_heads(16, 12, 3, 2, 1), **extra)
    out = export_bundle(policy, tmp_path / "bundle", env={"goal_names": [f"g{i}" for i in range(12)]})
    r = verify_bundle(out, steps=120, backends=("onnxruntime",))["onnxruntime"]
    assert r["max_logit_diff"] <= 1e-4, r
