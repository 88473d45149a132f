"""Layer kinds as types (kvsim/hardware/layer_kinds.py): every registered kind is handled by memory sizing, the
layer-group layouts and allocators, and the latency model; and a new kind is one class plus its registration
(a toy kind registered here, a sliding window over half the model's, behaves exactly as a sliding window of
that size)."""

import pytest

from kvsim.allocators import make_allocator
from kvsim.allocators.hybrid import NULL
from kvsim.allocators.kv_groups import build_layout, max_blocks_per_request
from kvsim.allocators.kv_managers import manager_for
from kvsim.allocators.registry import ModelMemory
from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu
from kvsim.hardware.layer_kinds import KINDS, LayerKind, SlidingWindow
from kvsim.hardware.models import ModelSpec
from kvsim.latency.base import StepShape
from kvsim.latency.calibration import shipped_calibration
from kvsim.latency.cpu import get_cpu_overhead
from kvsim.latency.perop import PerOpModel
from kvsim.memory_budget import layer_mix
from kvsim.trace.request import Request


def _model(kinds: tuple[str, ...], **fields) -> ModelSpec:
    """A small model whose layers are ``kinds``, with every field those kinds require."""
    for k in set(kinds):
        for f in KINDS[k].required_fields:
            fields.setdefault(f, 64)
    return ModelSpec("kinds", len(kinds), 8, 2, 64, 1e8, 4096, "bf16", layer_types=kinds, **fields).validate()


def _latency(model: ModelSpec) -> PerOpModel:
    gpu = get_gpu("h100-80gb")
    return PerOpModel(model, gpu, shipped_calibration(gpu)[0], get_cpu_overhead("none"))


def _run(alloc, prompt: int = 300, decodes: int = 200) -> list[int]:
    """Slots held after the prompt and after each decode step of one request."""
    r = Request("r", 0, prompt, decodes)
    assert alloc.allocate(1, r, prompt, computed=0)
    held = [alloc.held_slots(1)]
    for t in range(prompt, prompt + decodes - 1):
        assert alloc.allocate(1, r, t + 1, computed=t)
        held.append(alloc.held_slots(1))
    alloc.check_invariants()
    alloc.free(1)
    assert alloc.used_slots == 0
    return held


@pytest.mark.parametrize("name", list(KINDS))
def test_every_registered_kind_is_sized_laid_out_allocated_and_priced(name):
    kind = KINDS[name]
    m = _model(("full", name, name))
    per_token, window = m.kv_bytes_per_token_layer(), kind.window(m)
    # memory sizing: a full layer's tokens plus two layers of this kind
    for context in (0, 1, 63, 64, 65, 1000):
        assert m.sequence_bytes(context) == context * per_token + 2 * kind.sequence_bytes(m, context)
        assert m.tokens_held(name, context) == kind.tokens_held(m, context)
    assert (m.attention_layers, m.state_layers) == ((3, 0) if kind.attention else (1, 2))
    assert m.window_of(name) == window
    assert (window > 0) == kind.windowed
    assert (name in layer_mix(m)) or kind.label(m) in layer_mix(m)
    # the layouts have a group of this kind, whose manager follows what the kind keeps
    for mode in ("shared", "split"):
        lay = build_layout(m, 1, 1 << 24, 16, 4096, mode)
        groups = [g for g in lay.groups if g.kind == name]
        assert groups and all(g.spec is kind and g.window == window for g in groups)
        manager = manager_for(kind)
        assert (manager.attention, manager.windowed) == (kind.attention, kind.windowed)
        assert max_blocks_per_request(name, window, 16, 4096, 0) >= 1
    for alloc in ("hybrid:16", "hybrid:16+prefix", "static-split:16", "naive:16"):
        held = _run(make_allocator(alloc, 0, 4096, memory=ModelMemory(m, 1, 1 << 24)))
        assert held[-1] > 0
    # the latency model prices its layers: windowed kinds as windows whose decode reads are counted, recurrent
    # ones as state traffic
    lat = _latency(m)
    assert lat.plain == (name == "full")
    assert (name in [k for k, _ in lat.windows]) == kind.windowed
    assert (lat.mamba_layers == 2) == (not kind.attention)
    shape = StepShape.of([(1, 500), (1, 20), (200, 100)], lat.windows)
    assert lat.step_time(shape) > 0
    assert lat.decode_run_time(4, 2000, 50, contexts=[500] * 4) > 0


class HalfWindow(SlidingWindow):
    """A toy kind: a sliding window over half the model's ``sliding_window``."""

    name = "half"

    def window(self, model) -> int:
        return model.sliding_window // 2


@pytest.fixture
def half(monkeypatch):
    kind = HalfWindow()
    monkeypatch.setitem(KINDS, kind.name, kind)
    return kind


def test_a_new_kind_is_one_class_registered(half):
    """Registered, the toy kind is validated, sized, laid out, allocated (windows freed, prefix hits kept by its
    rule) and priced exactly as sliding layers of its window: nothing else names it."""
    toy = _model(("full", "half", "full", "half"), sliding_window=64)
    ref = _model(("full", "sliding", "full", "sliding"), sliding_window=32)
    assert layer_mix(toy) == "2 full + 2 half (32)"
    for context in (0, 1, 31, 32, 33, 100, 4096):
        assert toy.sequence_bytes(context) == ref.sequence_bytes(context)
    for mode in ("shared", "split"):
        a, b = build_layout(toy, 1, 1 << 22, 16, 4096, mode), build_layout(ref, 1, 1 << 22, 16, 4096, mode)
        assert [g.kind for g in a.groups] == ["full", "half"]
        assert [(g.layers, g.window, g.page_units, g.pool) for g in a.groups] == [
            (g.layers, g.window, g.page_units, g.pool) for g in b.groups
        ]
        assert a.pool_blocks == b.pool_blocks
    for alloc in ("hybrid:16", "static-split:16", "naive:16"):
        held = [_run(make_allocator(alloc, 0, 4096, memory=ModelMemory(m, 1, 1 << 22))) for m in (toy, ref)]
        assert held[0] == held[1]
    # prefix hits: the toy group needs only its window's blocks, as a sliding one
    hits = []
    for m in (toy, ref):
        a = make_allocator("hybrid:16+prefix", 0, 4096, memory=ModelMemory(m, 1, 1 << 22))
        ids = tuple(range(8))
        r1 = Request("a", 0, 128, 4, hash_ids=ids, hash_block_tokens=16)
        assert a.allocate(1, r1, 128, computed=0)
        a.on_computed(1, r1, 128)
        a.free(1)
        r2 = Request("b", 0, 128, 4, hash_ids=ids, hash_block_tokens=16)
        hit = a.lookup_prefix(2, r2, 127)
        assert a.allocate(2, r2, 128, hit, computed=hit.tokens)
        hits.append((hit.tokens, [block == NULL for block in a.group_tables(2)[1]]))
        a.check_invariants()
    assert hits[0] == hits[1] and hits[0][0] == 112 and hits[0][1][:5] == [True] * 5  # 2 blocks before the hit
    # step times: prefill walks its window, decodes read its window
    lt, lr = _latency(toy), _latency(ref)
    assert lt.windows == (("half", 32),) and lr.windows == (("sliding", 32),)
    for chunks in ([(1, 500)] * 8, [(300, 0), (1, 40)], [(100, 4000), (1, 31), (1, 32), (1, 33)]):
        assert lt.breakdown(StepShape.of(chunks, lt.windows)) == lr.breakdown(StepShape.of(chunks, lr.windows))
    assert lt.decode_run_time(4, 8000, 30, contexts=[2000] * 4) == lr.decode_run_time(4, 8000, 30, contexts=[2000] * 4)


def test_an_unregistered_kind_is_refused_naming_the_registry(half):
    with pytest.raises(ConfigError, match="unknown layer type.*known: full, sliding, chunked, mamba, half"):
        ModelSpec("x", 2, 2, 1, 8, 1e6, 4096, layer_types=("full", "quarter")).validate()
    with pytest.raises(ConfigError, match="half layers need a positive integer sliding_window"):
        ModelSpec("x", 2, 2, 1, 8, 1e6, 4096, layer_types=("full", "half")).validate()


def test_the_base_kind_is_full_attention():
    base = LayerKind()
    m = _model(("full",))
    assert base.tokens_held(m, 100) == KINDS["full"].tokens_held(m, 100) == 100
    assert base.needed_hit_blocks(0, 7, 16) == 7 and base.max_blocks(0, 16, 4096, 0) == 256
    assert KINDS["mamba"].needed_hit_blocks(0, 7, 16) == 0 and KINDS["mamba"].max_blocks(0, 16, 4096, 0, 2) == 2
