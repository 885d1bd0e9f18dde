import pytest
import torch

from icrl_ros.families.memo.model import MemoPolicy, segment_schedule
from icrl_ros.models import ModelArgs, load_checkpoint, make_memory, refresh, save_checkpoint
from icrl_ros.runtime.control import ControlStep
from tests.helpers import cached_rollout, random_trial


def memo_args(**kw) -> ModelArgs:
    base = dict(kind="memo", n_obs=20, n_actions=5, max_episode_steps=9, d_model=32, n_layers=2, n_heads=4,
                d_mlp=64, l_seg=6, l_sum=3, sink="none")
    base.update(kw)
    return ModelArgs.from_dict(base)


@pytest.mark.parametrize("variant", ["memo", "rmt"])
@pytest.mark.parametrize("sink", ["none", "kv0", "kv"])
@pytest.mark.parametrize("jitter", [0.0, 0.5])
def test_cached_memo_matches_full_sequence(variant, sink, jitter):
    torch.manual_seed(0)
    args = memo_args(memo_variant=variant, sink=sink)
    policy = MemoPolicy(args).eval()
    inp = random_trial(args, batch=2, steps=40, episode_len=9)  # crosses segment and episode boundaries
    sched = segment_schedule(40, args.l_seg, jitter, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, values, state = policy.forward_sequence(inp, sched)
    assert state["n_generated"] >= 4
    c_logits, c_values = cached_rollout(policy, inp, schedule=sched)
    assert (logits - c_logits).abs().max() <= 1e-5
    assert (values - c_values).abs().max() <= 1e-5


def test_memo_does_not_see_raw_observations_of_earlier_segments_except_through_summaries():
    torch.manual_seed(0)
    args = memo_args()
    policy = MemoPolicy(args).eval()
    inp = random_trial(args, batch=1, steps=12, episode_len=9)
    other = {k: v.clone() for k, v in inp.items()}
    other["obs"][:, :6] = (other["obs"][:, :6] + 3) % args.n_obs
    with torch.no_grad():
        a = policy.forward_sequence(inp)[0][:, 6:]
        b = policy.forward_sequence(other)[0][:, 6:]
        assert not torch.allclose(a, b)  # information flows through the summaries
        policy.summary_proj.weight.zero_()
        policy.summary_proj.bias.zero_()
        policy.summary_emb.zero_()
        a = policy.forward_sequence(inp)[0][:, 6:]
        b = policy.forward_sequence(other)[0][:, 6:]
    assert torch.allclose(a, b, atol=1e-6)  # ... and only through them


def test_refresh_then_step_matches_full_forward():
    torch.manual_seed(0)
    args = memo_args()
    policy = MemoPolicy(args).eval()
    inp = random_trial(args, batch=2, steps=30, episode_len=9)
    sched = segment_schedule(30, args.l_seg, 0.5, torch.Generator().manual_seed(2))
    for t1 in (13, sum(sched[:2])):  # mid-segment and exactly at a segment end
        mem = make_memory(policy, 2, 30, schedule=sched)
        refresh(policy, mem, {k: v[:, :t1] for k, v in inp.items()}, sched)
        lg, _ = ControlStep.live(policy, mem)({k: v[:, t1] for k, v in inp.items()})
        with torch.no_grad():
            full = policy.forward_sequence({k: v[:, :t1 + 1] for k, v in inp.items()}, sched)[0][:, t1]
        assert (lg - full).abs().max() <= 1e-5


def test_streaming_memo_memory_is_bounded():
    torch.manual_seed(0)
    args = memo_args()
    policy = MemoPolicy(args).eval()
    inp = random_trial(args, batch=1, steps=200, episode_len=9)
    mem = make_memory(policy, 1, 200, max_sets=4)
    step = ControlStep.live(policy, mem)
    sizes = set()
    for t in range(200):
        step({k: v[:, t] for k, v in inp.items()})
        sizes.add(mem.nbytes)
    assert len(sizes) == 1 and mem.n_generated == 200 // args.l_seg
    assert mem.tokens <= 4 * args.l_sum + args.l_seg


def test_memo_checkpoint_round_trip(tmp_path):
    policy = MemoPolicy(memo_args())
    save_checkpoint(tmp_path / "m.pt", policy)
    loaded, _ = load_checkpoint(tmp_path / "m.pt")
    assert isinstance(loaded, MemoPolicy)
    assert torch.equal(loaded.summary_emb, policy.summary_emb)


def test_memo_rejects_no_iea():
    with pytest.raises(ValueError, match="model.iea"):
        memo_args(iea=False)
