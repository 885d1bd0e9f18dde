"""K/V storage dtypes of the raw-step memories (full, window): the int8 quantiser's error bound,
budgets that count the stored bytes, snapshots of the quantised form, refusals elsewhere."""

import pytest
import torch

from icrl_ros.memory import SnapshotError, create_memory, slot_bytes
from icrl_ros.memory.quant import dequantize, kv_bytes, quantize

DIMS = dict(n_layers=2, n_heads=4, head_dim=16)
L, H, HD = 2, 4, 16


def make(name="full", kv_dtype="fp32", **cfg):
    cfg.setdefault("capacity" if name == "full" else "window", 8)
    return create_memory(name, kind="relic", kv_dtype=kv_dtype, **DIMS, **cfg)


def test_quantize_error_is_at_most_half_a_step_per_row():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 7, 64, generator=g) * torch.rand(3, 5, 7, 1, generator=g) * 10  # rows of many scales
    x[0, 0, 0] = 0.0  # an all-zero row
    q, s = quantize(x)
    assert q.dtype == torch.uint8 and s.shape == x.shape[:-1]
    assert int(q.min()) >= 1 and int(q.max()) <= 255  # symmetric: code 0 never used
    err = (dequantize(q, s) - x).abs()
    bound = s[..., None] / 2 + 1e-6 * x.abs()  # round to nearest: half a step (+ float rounding)
    assert bool((err <= bound).all()), float((err - bound).max())
    assert torch.equal(dequantize(q, s)[0, 0, 0], torch.zeros(64))
    assert float((s - x.abs().amax(-1) / 127).abs().max()) == 0.0
    # the row's maximum is exact in magnitude: the scale is chosen for it
    i = x.abs().argmax(-1, keepdim=True)
    assert torch.allclose(dequantize(q, s).gather(-1, i).abs(), x.gather(-1, i).abs(), rtol=1e-6)


@pytest.mark.parametrize("kv_dtype,per_head", [("fp32", 64), ("fp16", 32), ("int8", 20)])
def test_slot_bytes_count_the_stored_bytes(kv_dtype, per_head):
    assert kv_bytes(kv_dtype, HD) == per_head
    assert slot_bytes(L, H, HD, torch.float32, kv_dtype) == 2 * L * H * per_head + 9


@pytest.mark.parametrize("name", ["full", "window"])
def test_the_same_budget_holds_more_steps_and_nbytes_is_real(name):
    budget = 200_000
    sizes = {}
    for kv in ("fp32", "fp16", "int8"):
        m = create_memory(name, kind="relic", budget_bytes=budget, kv_dtype=kv, **DIMS)
        tensors = m.tensors()
        assert m.nbytes == sum(t.nbytes for t in tensors.values()) <= budget
        assert m.nbytes == m.slots * slot_bytes(L, H, HD, torch.float32, kv)
        sizes[kv] = m.slots
        if kv == "int8":
            assert m.k.dtype == torch.uint8 and m.k_scale.shape == m.k.shape[:-1]
            assert set(tensors) == {"k", "v", "k_scale", "v_scale", "valid", "episode"}
    assert sizes["fp16"] == budget // (2 * L * H * 32 + 9)
    assert sizes["int8"] == budget // (2 * L * H * 20 + 9)
    assert sizes["int8"] / sizes["fp32"] > 3.0 and sizes["fp16"] / sizes["fp32"] > 1.9


def test_fp32_memory_is_unchanged_by_the_option():
    a, b = make(kv_dtype="fp32"), make()
    g = torch.Generator().manual_seed(1)
    for t in range(5):
        k, v = torch.randn(L, 1, H, 1, HD, generator=g), torch.randn(L, 1, H, 1, HD, generator=g)
        a.commit(k, v, torch.zeros(1, dtype=torch.long))
        assert torch.equal(a.k[:, :, :, t], k[:, :, :, 0]) and torch.equal(a.v[:, :, :, t], v[:, :, :, 0])
    assert a.k.dtype == torch.float32 and a.k_scale is None and a.core_inputs() == ()
    assert "kv_dtype" not in a.config() and a.config() == b.config()  # old snapshots still restore


@pytest.mark.parametrize("name", ["full", "window"])
def test_int8_commit_stores_codes_and_scales_that_decode_within_bound(name):
    m = make(name, "int8", **({"on_full": "evict_oldest"} if name == "full" else {}))
    g = torch.Generator().manual_seed(2)
    ks, vs = [], []
    for t in range(12):  # past the bound: the window / evict ring overwrites the oldest
        k, v = torch.randn(L, 1, H, 1, HD, generator=g) * (t + 1), torch.randn(L, 1, H, 1, HD, generator=g)
        ks.append(k)
        vs.append(v)
        m.commit(k, v, torch.zeros(1, dtype=torch.long))
    steps_cap = m.steps_cap
    for t in range(12 - steps_cap, 12):
        s = t % steps_cap
        for buf, scale, x in ((m.k, m.k_scale, ks[t]), (m.v, m.v_scale, vs[t])):
            dec = dequantize(buf[:, :, :, s], scale[:, :, :, s])
            assert float((dec - x[:, :, :, 0]).abs().max()) <= float(scale[:, :, :, s].max()) / 2 + 1e-5
    scales = m.core_inputs()
    assert len(scales) == 2 * L and all(t.shape == (1, H, m.slots) for t in scales)
    assert scales[0].data_ptr() == m.k_scale.data_ptr() and scales[L].data_ptr() == m.v_scale.data_ptr()


def test_int8_snapshot_round_trip_keeps_the_quantised_form(tmp_path):
    m = make("full", "int8", on_full="evict_oldest")
    m.fill_synthetic(11, torch.Generator().manual_seed(3))
    before = {k: t.clone() for k, t in m.tensors().items()}
    m.snapshot(tmp_path / "m.npz", model_hash="x")
    other = make("full", "int8", on_full="evict_oldest")
    other.restore(tmp_path / "m.npz", expect={"model_hash": "x"})
    for k, t in other.tensors().items():
        assert t.dtype == before[k].dtype and torch.equal(t, before[k]), k
    assert other.count == m.count
    assert other.k.dtype == torch.uint8  # stored as codes: no float copy in the file or the memory
    import numpy as np

    with np.load(tmp_path / "m.npz") as z:
        assert z["k"].dtype == np.uint8 and z["k_scale"].dtype == np.float32


@pytest.mark.parametrize("saved,into", [("int8", "fp32"), ("fp32", "int8"), ("int8", "fp16")])
def test_restore_refuses_another_kv_dtype_and_keeps_memory(tmp_path, saved, into):
    a = make("full", saved)
    a.fill_synthetic(4)
    a.snapshot(tmp_path / "a.npz")
    b = make("full", into)
    b.fill_synthetic(6)
    keep = {k: t.clone() for k, t in b.tensors().items()}
    with pytest.raises(SnapshotError, match="memory.(dtype|kv_dtype)"):
        b.restore(tmp_path / "a.npz")
    assert all(torch.equal(t, keep[k]) for k, t in b.tensors().items())


def test_kv_dtype_is_refused_for_the_retrieval_index_and_unknown_names():
    with pytest.raises(ValueError, match="kv_dtype: 'int4' is not one of"):
        make("full", "int4")
    memo = create_memory("memo", kind="memo", kv_dtype="int8", l_seg=4, l_sum=2, max_sets=3, **DIMS)
    assert memo.k.dtype == torch.uint8 and memo.k_scale is not None  # Memo stores summaries and segment in 8 bits
    hcam = create_memory("hcam", kind="hcam", kv_dtype="int8", n_mem_layers=L, chunk=3, top_k=2, max_chunks=4, **DIMS)
    assert hcam.chunk_x.dtype == torch.uint8 and hcam.k.dtype == torch.float32  # the chunk store; the window float
    with pytest.raises(ValueError, match="memory 'retrieval' stores fp32 only"):
        create_memory("retrieval", kind="radt", kv_dtype="fp16", **DIMS)
