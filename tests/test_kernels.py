"""Every kernel against its torch reference: natively on a GPU, in Triton's interpreter on CPU."""

import os

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kvsim_kernels import load  # noqa: E402

K = load()
DEV = K.device
TOL = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def test_mode_is_reported_and_consistent():
    print(f"\nkernel mode: {K.mode}")
    assert (K.mode == "triton-native-cuda") == (DEV == "cuda")
    assert (os.environ.get("TRITON_INTERPRET") == "1") == (DEV == "cpu")


def make_case(draw, max_seqs=3, max_ctx=200):
    block = draw(st.sampled_from([8, 16, 32, 64, 128]))
    hkv = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2, 4]))
    dim = draw(st.sampled_from([16, 32, 64]))
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, max_seqs))
    ctx = draw(st.lists(st.integers(1, max_ctx), min_size=n, max_size=n))
    pages = max(-(-c // block) for c in ctx)
    num_blocks = draw(st.integers(pages, pages + 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    tables = []
    for c in ctx:
        perm = torch.randperm(num_blocks, generator=g)[:pages]
        used = -(-c // block)
        perm[used:] = num_blocks + 1000  # padding past the context: out of range, must never be read
        tables.append(perm)
    if n > 1 and draw(st.booleans()):  # two sequences share their first block (prefix sharing)
        tables[1][0] = tables[0][0]
    kc = torch.randn(num_blocks, block, hkv, dim, generator=g).to(dtype).to(DEV)
    vc = torch.randn(num_blocks, block, hkv, dim, generator=g).to(dtype).to(DEV)
    bt = torch.stack(tables).to(torch.int32).to(DEV)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    return dict(block=block, hkv=hkv, hq=hkv * group, dim=dim, dtype=dtype, kc=kc, vc=vc, bt=bt, lens=lens, gen=g)


@settings(deadline=None)
@given(st.data(), st.one_of(st.none(), st.integers(1, 6)))
def test_decode_matches_reference(data, splits):
    c = make_case(data.draw)
    q = torch.randn(len(c["lens"]), c["hq"], c["dim"], generator=c["gen"]).to(c["dtype"]).to(DEV)
    scale = c["dim"] ** -0.5
    out = K.paged_decode_attention(q, c["kc"], c["vc"], c["bt"], c["lens"], scale, num_splits=splits)
    ref = K.paged_decode_attention_ref(q, c["kc"], c["vc"], c["bt"], c["lens"], scale)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), ref.float(), atol=TOL[c["dtype"]], rtol=TOL[c["dtype"]])


def test_decode_edge_cases():
    """Context length 1, more splits than tokens (empty splits), lengths off block boundaries."""
    g = torch.Generator().manual_seed(1)
    kc = torch.randn(8, 16, 2, 32, generator=g).to(DEV)
    vc = torch.randn(8, 16, 2, 32, generator=g).to(DEV)
    bt = torch.tensor([[3, 99, 99], [5, 1, 7]], dtype=torch.int32, device=DEV)
    lens = torch.tensor([1, 33], dtype=torch.int32, device=DEV)
    q = torch.randn(2, 4, 32, generator=g).to(DEV)
    for splits in (1, 2, 8):
        out = K.paged_decode_attention(q, kc, vc, bt, lens, 0.17, num_splits=splits)
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out, K.paged_decode_attention_ref(q, kc, vc, bt, lens, 0.17), atol=2e-4, rtol=2e-4)
    # with one token, attention returns exactly that token's V for every query head of the group
    torch.testing.assert_close(out[0], vc[3, 0].repeat_interleave(2, dim=0), atol=1e-5, rtol=1e-5)


@settings(deadline=None)
@given(st.data())
def test_prefill_matches_reference(data):
    c = make_case(data.draw, max_seqs=2, max_ctx=120)
    lens = c["lens"].tolist()
    qlens = [data.draw(st.integers(0, n)) for n in lens]  # 0 = a sequence with nothing to prefill
    starts = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0).tolist()), dtype=torch.int32, device=DEV)
    q = torch.randn(int(starts[-1]), c["hq"], c["dim"], generator=c["gen"]).to(c["dtype"]).to(DEV)
    scale = c["dim"] ** -0.5
    out = K.paged_prefill_attention(q, c["kc"], c["vc"], c["bt"], c["lens"], starts, scale)
    ref = K.paged_prefill_attention_ref(q, c["kc"], c["vc"], c["bt"], c["lens"], starts, scale)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), ref.float(), atol=TOL[c["dtype"]], rtol=TOL[c["dtype"]])


@settings(deadline=None)
@given(st.integers(1, 40), st.sampled_from([8, 16, 32]), st.sampled_from(DTYPES), st.integers(0, 2**31 - 1))
def test_write_kv_matches_reference(n, block, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    nb, hkv, dim = 6, 2, 16
    slots = torch.randperm(nb * block, generator=g)[:n]
    slots[torch.rand(n, generator=g) < 0.2] = -1  # padding tokens
    k = torch.randn(n, hkv, dim, generator=g).to(dtype).to(DEV)
    v = torch.randn(n, hkv, dim, generator=g).to(dtype).to(DEV)
    caches = [torch.zeros(nb, block, hkv, dim, dtype=dtype, device=DEV) for _ in range(4)]
    K.write_kv(k, v, caches[0], caches[1], slots.to(DEV))
    K.write_kv_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


@settings(deadline=None)
@given(st.integers(1, 8), st.sampled_from(DTYPES), st.integers(0, 2**31 - 1))
def test_copy_blocks_matches_reference(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    nb = 12
    src = torch.randn(nb, 16, 2, 16, generator=g).to(dtype).to(DEV)
    mapping = torch.stack([torch.randint(0, nb, (n,), generator=g), torch.randperm(nb, generator=g)[:n]], dim=1)
    a = torch.zeros_like(src)
    b = torch.zeros_like(src)
    K.copy_blocks(src, a, mapping.to(DEV))
    K.copy_blocks_ref(src, b, mapping)
    assert torch.equal(a, b)
    # copy-on-write inside one pool: src and dst blocks in the same tensor
    pool = src.clone()
    K.copy_blocks(pool, pool, torch.tensor([[0, 5]], device=DEV))
    assert torch.equal(pool[5], src[0]) and torch.equal(pool[0], src[0])
