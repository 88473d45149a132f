"""Models whose layers keep different caches: hand-computed bytes per preset, the layer-group layouts, and
the hybrid allocator's bookkeeping under random operations (a hypothesis state machine)."""

import pytest
from dataclasses import replace
from hypothesis import assume, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvsim.allocators import make_allocator
from kvsim.allocators.hybrid import NULL
from kvsim.allocators.kv_groups import build_layout
from kvsim.allocators.registry import ModelMemory
from kvsim.errors import ConfigError
from kvsim.hardware.models import MODEL_PRESETS, ModelSpec, get_model
from kvsim.trace.request import Request

KiB = 1024

# (preset, KV bytes per token if every attention layer kept every token, per-layer bytes, hand computation of
# one sequence's bytes at 32,768 tokens). Per-layer: 2 (K, V) x kv_heads x head_dim x 2 B (BF16), or MLA's
# (kv_lora_rank + qk_rope_head_dim) x 2 B.
GOLDEN = [
    # 42 layers, 8 KV heads x 256: 8 KiB/layer; 21 full + 21 sliding (4096)
    ("gemma-2-9b", 42 * 8 * KiB, 8 * KiB, 21 * 32768 * 8 * KiB + 21 * 4096 * 8 * KiB),
    # 48 layers, 8 full + 40 sliding (1024)
    ("gemma-3-12b", 48 * 8 * KiB, 8 * KiB, 8 * 32768 * 8 * KiB + 40 * 1024 * 8 * KiB),
    # 24 layers, 8 KV heads x 64: 2 KiB/layer; 12 full + 12 sliding (128)
    ("gpt-oss-20b", 24 * 2 * KiB, 2 * KiB, 12 * 32768 * 2 * KiB + 12 * 128 * 2 * KiB),
    # 32 sliding (4096) layers, 8 KV heads x 128: 4 KiB/layer
    ("mistral-7b-v0.1", 32 * 4 * KiB, 4 * KiB, 32 * 4096 * 4 * KiB),
    # 48 layers: 12 full (NoPE) + 36 chunked (8192); at 32,768 tokens the last token's chunk is full (8192)
    ("llama-4-scout", 48 * 4 * KiB, 4 * KiB, 12 * 32768 * 4 * KiB + 36 * 8192 * 4 * KiB),
    # 61 MLA layers: (512 + 64) x 2 B = 1152 B/layer, every rank holds it whole
    ("deepseek-v3", 61 * 1152, 1152, 61 * 32768 * 1152),
    # 4 attention layers (4 KiB) + 28 Mamba-1 layers: (8192 x 3 conv + 8192 x 16 SSM) x 2 B = 311,296 B/seq each
    ("jamba-1.5-mini", 4 * 4 * KiB, 4 * KiB, 4 * 32768 * 4 * KiB + 28 * 311_296),
]


@pytest.mark.parametrize("name,per_token,per_layer,seq_32k", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_preset_bytes_equal_the_hand_computation(name, per_token, per_layer, seq_32k):
    m = MODEL_PRESETS[name].validate()
    assert m.kv_bytes_per_token == per_token
    assert m.kv_bytes_per_token_layer() == per_layer
    assert m.sequence_bytes(32768) == seq_32k


def test_kv_cache_dtype_halves_attention_bytes_but_not_recurrent_state():
    j = MODEL_PRESETS["jamba-1.5-mini"]
    f = j.with_kv_cache_dtype("fp8")
    assert f.kv_bytes_per_token == j.kv_bytes_per_token // 2
    assert f.state_bytes_per_layer() == j.state_bytes_per_layer() == 311_296
    d = MODEL_PRESETS["deepseek-v3"].with_kv_cache_dtype("fp8")
    assert d.kv_bytes_per_token == 61 * 576


def test_chunked_and_short_contexts_hold_what_the_rules_say():
    s = MODEL_PRESETS["llama-4-scout"]
    # 10,000 tokens: the last token's chunk starts at 8192, so chunked layers hold 1,808 tokens
    assert s.sequence_bytes(10_000) == 12 * 10_000 * 4 * KiB + 36 * 1808 * 4 * KiB
    g = MODEL_PRESETS["gemma-2-9b"]
    assert g.sequence_bytes(1000) == 42 * 1000 * 8 * KiB  # inside the window every layer holds everything


def test_tensor_parallel_splits_kv_heads_and_states_but_not_the_mla_latent():
    assert MODEL_PRESETS["deepseek-v3"].kv_bytes_per_token_gpu(8) == 61 * 1152
    assert MODEL_PRESETS["gpt-oss-20b"].kv_bytes_per_token_gpu(2) == 24 * KiB
    assert MODEL_PRESETS["jamba-1.5-mini"].state_bytes_per_layer(2) == 311_296 // 2
    with pytest.raises(ConfigError, match="kv_heads"):
        MODEL_PRESETS["gpt-oss-20b"].check_tp(3)


def test_moe_weights_hold_every_expert_in_its_dtype():
    g = MODEL_PRESETS["gpt-oss-20b"]
    experts = 24 * 32 * 3 * 2880 * 2880
    assert g.expert_params() == experts
    assert g.weight_bytes == pytest.approx((20.9e9 - experts) * 2 + experts * 4.25 / 8)
    # an FP8 checkpoint: 1 byte per weight, but the embedding and the (untied) LM head stay in bf16
    assert MODEL_PRESETS["deepseek-v3"].weight_bytes == pytest.approx(671e9 + 2 * 129280 * 7168 * (2 - 1))


# --- layouts --------------------------------------------------------------------------------------------
def _layout(name, mode="shared", windows=True, tp=1, B=16, pool=80 << 30, max_len=131072, chunk=8192):
    return build_layout(MODEL_PRESETS[name], tp, pool, B, max_len, mode, windows, chunk)


def test_vllm_grouping_of_gemma3_and_jamba():
    g3 = _layout("gemma-3-12b")
    assert [(g.kind, g.layers) for g in g3.groups] == [("full", 8)] + [("sliding", 8)] * 5
    assert g3.unit_bytes == 8 * KiB and g3.pool_page_units == (8 * 16,)  # 8 layers x 16 tokens, 1 MiB pages
    j = _layout("jamba-1.5-mini")
    # 4 attention layers, 28 mamba: groups of 4; the attention block grows to 16 x cdiv(4 x 311,296, 16 x 4 x 4096)
    # = 80 tokens so that a page (4 x 80 x 4 KiB = 1,310,720 B) holds a group's states (1,245,184 B)
    assert j.block_size == 80 and j.unit_bytes == 4096
    assert j.pool_page_units[0] * j.unit_bytes == 1_310_720
    assert [g.kind for g in j.groups].count("mamba") == 7
    assert all(g.state_units * 4096 == 1_245_184 for g in j.groups if g.kind == "mamba")


def test_uneven_kinds_get_padding_layers():
    # 10 full + 4 sliding: group size 4 -> full groups of 4, 4, 2 (the last padded to 4 layers)
    m = ModelSpec(
        "uneven", 14, 2, 1, 8, 1e6, 4096, layer_types=("full",) * 10 + ("sliding",) * 4, sliding_window=64
    ).validate()
    lay = build_layout(m, 1, 1 << 20, 16, 4096)
    assert [(g.kind, g.layers) for g in lay.groups] == [("full", 4), ("full", 4), ("full", 2), ("sliding", 4)]
    a = make_allocator("hybrid:16", 0, 4096, memory=ModelMemory(m, 1, 1 << 20))
    r = Request("r", 0, 30, 2)
    assert a.allocate(1, r, 30, computed=0)
    b = a.memory_breakdown(0, None)
    # 2 blocks per group; the padded group's pages carry 2 empty layers x 16 tokens each
    assert b.page_padding == 2 * 2 * 16 * 1


def test_static_split_sizes_pools_by_a_max_length_sequence():
    lay = _layout("gpt-oss-20b", "split")
    full, sliding = lay.groups
    assert (full.kind, sliding.kind) == ("full", "sliding")
    # weights: full 131072 tokens; sliding 128 - 1 + 8192 + 16 tokens, both x 12 layers
    w_full, w_sw = 131072, -(-(127 + 8192 + 16) // 16) * 16
    share = lay.pool_blocks[1] * lay.pool_page_units[1] / lay.total_units
    assert share == pytest.approx(w_sw / (w_full + w_sw), rel=1e-3)


def test_hybrid_holds_exactly_the_hand_computed_bytes_when_windows_align_with_blocks():
    m = MODEL_PRESETS["gemma-2-9b"]
    pool = 80 << 30
    a = make_allocator("hybrid:16", 0, 32768, memory=ModelMemory(m, 1, pool))
    r = Request("r", 0, 32767, 1)
    assert a.allocate(1, r, 32767, computed=0)  # the prompt in one go: every block, windows too
    assert a.allocate(1, r, 32768, computed=32767)  # decoding frees what left the window
    assert a.held_slots(1) * a.slot_bytes == m.sequence_bytes(32768)
    naive = make_allocator("naive:16", 0, 32768, memory=ModelMemory(m, 1, pool))
    assert naive.allocate(1, r, 32768, computed=0)
    assert naive.held_slots(1) * naive.slot_bytes == 42 * 32768 * 8 * KiB


def test_prefix_hits_follow_per_group_rules():
    m = ModelSpec("swa", 2, 2, 1, 8, 1e6, 4096, layer_types=("full", "sliding"), sliding_window=33).validate()
    a = make_allocator("hybrid:16+prefix", 0, 4096, memory=ModelMemory(m, 1, 64 * 2 * 16 * 32))
    ids = tuple(range(8))
    r1 = Request("a", 0, 128, 4, hash_ids=ids, hash_block_tokens=16)
    assert a.allocate(1, r1, 128, computed=0)
    a.on_computed(1, r1, 128)
    a.free(1)
    r2 = Request("b", 0, 128, 4, hash_ids=ids, hash_block_tokens=16)
    hit = a.lookup_prefix(2, r2, 127)
    assert hit.tokens == 112  # 7 full blocks (the 8th would leave no token to compute)
    assert a.allocate(2, r2, 128, hit, computed=112)
    full, sw = a.group_tables(2)
    assert NULL not in full and full[:7] == list(hit.blocks[:7])
    # sliding window 33: the hit needs cdiv(32, 16) = 2 blocks before it; the rest are never claimed
    assert sw[:5] == [NULL] * 5 and NULL not in sw[5:]
    a.check_invariants()


def test_a_split_layout_swaps_each_page_in_one_copy_call():
    """Jamba-1.5-mini at TP2, static split: an attention page is 4 copy units of 16 slots, a mamba state
    page (28 layers' states) 133 units; a swap moves units but pays one copy call per page."""
    from kvsim.engine.engine import SwapTiming

    a = make_allocator(
        "static-split:16",
        0,
        4096,
        cpu_swap_tokens=200_000,
        memory=ModelMemory(MODEL_PRESETS["jamba-1.5-mini"], 2, 8 << 30, 32),
    )
    assert a.copy_unit == 16 and a.layout.pool_page_units == (64, 2128)
    r = Request("r", 0, 100, 5)
    assert a.allocate(1, r, 100, computed=0)
    held = a.held_slots(1)
    out = a.swap_out(1)
    # 100 tokens: cdiv(100, 16) = 7 attention pages of 4 units, one state page of 133 units
    assert (len(out), out.calls) == (7 * 4 + 133, 7 + 1) and len(out) * a.copy_unit == held
    back = a.swap_in(1, r)
    assert (len(back), back.calls) == (len(out), out.calls) and a.held_slots(1) == held
    t = SwapTiming(bytes_per_slot=1000, pcie_bandwidth=1e9, per_block_s=1e-5)
    assert t.seconds(len(out), a.copy_unit, out.calls) == pytest.approx(8 * 1e-5 + 161 * 16 * 1000 / 1e9)
    assert t.seconds(5, 16) == t.seconds(5, 16, 5)  # one call per unit unless told otherwise


def test_a_model_with_mamba_layers_needs_a_layer_group_allocator():
    with pytest.raises(ConfigError, match="mamba"):
        make_allocator("paged:16", 1000, 4096, memory=ModelMemory(MODEL_PRESETS["jamba-1.5-mini"], 2, 8 << 30))


def test_hf_configs_of_hybrid_models_read_like_the_presets(tmp_path):
    import json

    from helpers import gemma2_config

    cfg = gemma2_config(hidden_activation="gelu_pytorch_tanh")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    assert m.mixers == MODEL_PRESETS["gemma-2-9b"].mixers and m.sequence_bytes(9000) == MODEL_PRESETS[
        "gemma-2-9b"
    ].sequence_bytes(9000)
    p.write_text(json.dumps({**cfg, "layer_types": ["sliding_attention"] * 41}))
    with pytest.raises(ConfigError, match="layer_types"):
        get_model(str(p))


# --- the state machine ----------------------------------------------------------------------------------
MODELS = {
    "sliding": ModelSpec(
        "sm-sliding",
        5,
        2,
        1,
        8,
        1e6,
        4096,
        layer_types=("sliding", "full", "sliding", "sliding", "sliding"),
        sliding_window=37,
    ).validate(),
    "chunked": ModelSpec(
        "sm-chunked", 3, 2, 1, 8, 1e6, 4096, layer_types=("chunked", "full", "chunked"), attention_chunk=48
    ).validate(),
    "mamba": ModelSpec(
        "sm-mamba",
        4,
        2,
        1,
        8,
        1e6,
        4096,
        layer_types=("mamba", "full", "mamba", "sliding"),
        sliding_window=20,
        mamba_d_inner=16,
        mamba_d_state=4,
        mamba_d_conv=4,
        mamba_conv_channels=16,
    ).validate(),
}


class HybridMachine(RuleBasedStateMachine):
    """Random admissions, prefill chunks, decode steps, prefix hits, swaps and frees."""

    @initialize(
        model=st.sampled_from(sorted(MODELS)),
        kind=st.sampled_from(["hybrid", "static-split", "naive"]),
        B=st.sampled_from([4, 8, 16]),
        prefix=st.booleans(),
        pages=st.integers(12, 60),
    )
    def setup(self, model, kind, B, prefix, pages):
        m = MODELS[model]
        spec = f"{kind}:{B}" + ("+prefix" if prefix else "")
        pool = pages * B * m.kv_bytes_per_token
        try:
            self.a = make_allocator(spec, 0, 4096, cpu_swap_tokens=200, memory=ModelMemory(m, 1, pool, 32))
        except ConfigError:
            assume(False)
        self.live: dict[int, list] = {}  # sid -> [request, computed, allocated]
        self.swapped: dict[int, list] = {}
        self.next = 0

    def _filled(self):
        return sum(c for _, c, _ in self.live.values())

    @rule(prompt=st.integers(1, 150), out=st.integers(1, 60), fam=st.integers(0, 2))
    def admit(self, prompt, out, fam):
        sid = self.next
        self.next += 1
        B = self.a.B
        ids = tuple(1000 * fam + j for j in range(-(-prompt // 8)))
        r = Request(str(sid), 0, prompt, out, hash_ids=ids, hash_block_tokens=8)
        hit = self.a.lookup_prefix(sid, r, prompt - 1)
        n = min(prompt, hit.tokens + 32)
        if self.a.allocate(sid, r, n, hit, computed=hit.tokens):
            assert hit.tokens % B == 0
            self.live[sid] = [r, hit.tokens, n]
            if hit.tokens:  # every block the hit gave holds this prompt's content, in that group
                chains = self.a._group_chains(sid, r)
                for g, table in enumerate(self.a.group_tables(sid)):
                    for j in range(hit.tokens // B):
                        if table and table[j] != NULL:
                            assert self.a._pool(g).cached_block(chains[g][j]) == table[j]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def step(self, data):
        sid = data.draw(st.sampled_from(sorted(self.live)))
        r, computed, allocated = self.live[sid]
        computed = allocated  # the allocated tokens were computed
        self.a.on_computed(sid, r, min(computed, r.prompt_tokens))
        if computed >= r.total_tokens:
            return
        n = min(32, r.total_tokens - computed) if computed < r.prompt_tokens else 1
        n = min(n, max(1, r.prompt_tokens - computed)) if computed < r.prompt_tokens else 1
        if self.a.allocate(sid, r, computed + n, computed=computed):
            self.live[sid] = [r, computed, computed + n]
            for g, grp in enumerate(self.a.groups):
                if grp.windowed and self.a.windows:
                    table = self.a.group_tables(sid)[g]
                    # window blocks are freed exactly when they leave the window
                    gone = grp.skipped_tokens(computed) // self.a.B
                    assert table[:gone] == [NULL] * gone and NULL not in table[gone:]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        sid = data.draw(st.sampled_from(sorted(self.live)))
        self.a.free(sid)
        del self.live[sid]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fork(self, data):
        """Parallel sampling: a sample forks off a sequence whose allocated tokens are computed."""
        sid = data.draw(st.sampled_from(sorted(self.live)))
        r, _, allocated = self.live[sid]
        child = self.next
        self.next += 1
        before = self.a.used_slots
        if self.a.fork(sid, child, allocated, r):
            self.live[sid] = [r, allocated, allocated]
            self.live[child] = [r, allocated, allocated]
            assert self.a.group_tables(child) == self.a.group_tables(sid) or self.a._mamba  # states are copied
            # only the recurrent states take new pages
            assert self.a.used_slots - before == sum(m.page_units for m in self.a._mamba)
        else:
            assert self.a.used_slots == before and self.a.held_slots(child) == 0

    @precondition(lambda self: self.live)
    @rule(data=st.data(), slots=st.integers(1, 400))
    def preempt_tail(self, data, slots):
        """Partial preemption: the tail goes, the head stays if every window it needs to go on stays."""
        sid = data.draw(st.sampled_from(sorted(self.live)))
        r, computed, allocated = self.live[sid]
        held = len(self.a.block_table(sid))
        kept = self.a.release_tail(sid, r, slots)
        if kept == 0:
            assert self.a.held_slots(sid) == 0
            del self.live[sid]
            return
        assert (
            not self.a._mamba
            and kept % self.a.B == 0
            and kept == len(self.a.block_table(sid)) * self.a.B < held * self.a.B
        )
        self.live[sid] = [r, min(computed, kept), min(allocated, kept)]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def swap_out(self, data):
        sid = data.draw(st.sampled_from(sorted(self.live)))
        held = self.a.held_slots(sid)
        out = self.a.swap_out(sid)
        if out is not None:
            self.swapped[sid] = self.live.pop(sid) + [out]
            # every held slot moves; a page is one copy call however many units it spans
            assert len(out) * self.a.copy_unit == held and 0 < out.calls <= len(out)
            assert (out.calls == len(out)) == (max(self.a.layout.pool_page_units) == self.a.copy_unit)

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        sid = data.draw(st.sampled_from(sorted(self.swapped)))
        back = self.a.swap_in(sid, self.swapped[sid][0])
        if back is not None:
            *state, out = self.swapped.pop(sid)
            self.live[sid] = state
            assert (len(back), back.calls) == (len(out), out.calls)

    @invariant()
    def accounts_for_every_slot(self):
        if not hasattr(self, "a"):
            return
        a = self.a
        a.check_invariants()
        filled = sum(c for _, c, _ in self.live.values())
        b = a.memory_breakdown(filled, None)
        assert sum(b.as_tuple()) == a.pool_tokens
        assert min(b.as_tuple()) >= 0, b
        for p, pool in enumerate(a.pools):  # free + cached + used == pool, per pool
            used = sum(1 for r in pool.ref if r > 0)
            assert used + pool.num_free == pool.num_blocks
        pad = sum(
            a.managers[g].in_use
            * (grp.page_units - (grp.state_units if grp.kind == "mamba" else a.B * grp.token_units))
            for g, grp in enumerate(a.groups)
        )
        assert b.page_padding == pad
        assert b.recurrent_state == sum(
            a.managers[g].in_use * grp.state_units for g, grp in enumerate(a.groups) if grp.kind == "mamba"
        )


TestHybridMachine = HybridMachine.TestCase
TestHybridMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def test_jamba_pages_hold_the_exact_state_and_say_what_is_padding():
    m = MODEL_PRESETS["jamba-1.5-mini"]
    a = make_allocator("hybrid", 0, 131072, memory=ModelMemory(m, 1, 8 << 30))
    r = Request("r", 0, 32767, 1)
    assert a.allocate(1, r, 32768, computed=0)
    page = 1_310_720  # 4 layers x 80 tokens x 4 KiB
    # attention: cdiv(32768, 80) = 410 pages; mamba: 7 groups of 4 layers, one page each
    assert a.held_slots(1) * a.slot_bytes == (410 + 7) * page
    b = a.memory_breakdown(32767, None)
    assert b.recurrent_state * a.slot_bytes == 28 * 311_296
    assert b.page_padding * a.slot_bytes == 7 * (page - 4 * 311_296)
    assert (b.token_states + b.reserved + b.internal_frag) * a.slot_bytes == 410 * page
    assert b.token_states * a.slot_bytes == 32767 * 4 * 4 * KiB


def test_bamba_style_config_reads_mamba2_layers(tmp_path):
    import json

    cfg = {
        "model_type": "bamba",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "layers_block_type": ["mamba", "attention", "mamba", "mamba"],
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_n_groups": 1,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    assert m.mixers == ("mamba", "full", "mamba", "mamba")
    # Mamba-2 conv state covers x, B and C: (512 + 2 x 64) x 3; SSM state 512 x 64; BF16
    assert m.state_bytes_per_layer() == ((512 + 128) * 3 + 512 * 64) * 2


def test_a_long_request_that_only_the_hybrid_layout_can_hold_runs_there():
    from helpers import sched
    from kvsim.engine.preemption import get_victim_policy
    from kvsim.engine.simulator import Simulation
    from kvsim.latency.roofline import RooflineModel
    from kvsim.hardware import get_gpu

    m = MODEL_PRESETS["gpt-oss-20b"]
    # a pool for 40,000 tokens if every layer were full; a 60,000-token request needs 12 full layers' worth
    pool = 40_000 * m.kv_bytes_per_token
    reqs = [Request("long", 0.0, 60_000, 10)]
    cfg = sched(max_model_len=65536, max_num_batched_tokens=8192)
    out = {}
    for spec in ("naive", "hybrid"):
        alloc = make_allocator(spec, 40_000, 65536, memory=ModelMemory(m, 1, pool, 8192))
        res = Simulation(reqs, alloc, RooflineModel(m, get_gpu("h100-80gb")), cfg, get_victim_policy("lifo")).run()
        out[spec] = res.sequences[0].status.value
    assert out == {"naive": "rejected", "hybrid": "finished"}


# --- latency follows the structure ---------------------------------------------------------------------
def _latency(model, gpu="h100-80gb", tp=1):
    from kvsim.latency import build_latency
    from kvsim.options import config_from_args

    return build_latency(config_from_args(["--model", model, "--gpu", gpu, "-tp", str(tp)]))


def test_sliding_layers_stop_reading_past_their_window():
    from kvsim.latency.base import StepShape

    sw = _latency("mistral-7b-v0.1")  # every layer a 4096 window
    full = _latency("mistral-7b")
    at = lambda lat, ctx: lat.breakdown(StepShape.decode(8, 8 * ctx))["attention_s"]  # noqa: E731
    assert at(sw, 4096) == pytest.approx(at(sw, 32768))
    assert at(full, 32768) > 4 * at(full, 4096)
    assert at(sw, 2048) == pytest.approx(at(full, 2048))  # inside the window nothing differs
    # a long prefill chunk walks only the window's keys
    pre = lambda lat: lat.breakdown(StepShape.of([(8192, 24576)]))["attention_s"]  # noqa: E731
    assert pre(sw) < pre(full) / 3


def test_decode_runs_of_mixed_models_sum_their_steps():
    lat = _latency("gemma-2-9b")
    times = lat.decode_step_times(16, 16 * 4000, 300)  # contexts cross the 4096 window during the run
    assert lat.decode_run_time(16, 16 * 4000, 300) == pytest.approx(sum(times))
    assert times[-1] > times[0]  # the full layers keep growing
    k = lat.decode_steps_until(16, 16 * 4000, sum(times[:120]), 300)
    assert k == 120


def test_moe_reads_the_experts_a_batch_activates():
    from kvsim.latency.perop import MoeOp

    op = MoeOp(2880, 2880, 32, 4, 0.53125, routing="uniform")
    assert op.distinct(1) == pytest.approx(4)
    assert op.distinct(1000) == pytest.approx(32)
    assert op.distinct(8) == pytest.approx(32 * (1 - (1 - 4 / 32) ** 8))
    lat = _latency("gpt-oss-20b")
    from kvsim.latency.base import StepShape

    one, many = (lat.breakdown(StepShape.decode(n, n * 100))["dense_s"] for n in (1, 64))
    assert many < 8 * one  # 64 tokens share the weights they read (at most all 32 experts)


def test_mla_decode_reads_the_latent_and_mamba_costs_no_context():
    lat = _latency("deepseek-v3", "h200-141gb", 8)
    assert lat.kv_bytes_per_token_layer == 576 * 2
    j = _latency("jamba-1.5-mini", "h200-141gb")
    from kvsim.latency.base import StepShape

    a1, a2 = (j.breakdown(StepShape.decode(8, 8 * c))["attention_s"] for c in (1000, 2000))
    assert j.recurrent_state_s(8) > 0 and j.mamba_layers == 28
    # only the 4 attention layers read context: doubling it adds 4 layers' worth of KV reads
    per_token = j._decode_token_s
    assert a2 - a1 == pytest.approx(4 * 8 * 1000 * per_token, rel=1e-6)


def test_footprint_is_the_largest_holding_of_the_request_alone():
    """Against a step-by-step replay of one request alone: chunked prefill, then one token at a time, and a
    restart after a preemption at its last token (everything but that token recomputed)."""
    import random

    rng = random.Random(3)
    for model in MODELS.values():
        for chunk in (0, 24, 64):
            a = make_allocator(
                "hybrid:8", 0, 4096, memory=ModelMemory(model, 1, 4096 * model.kv_bytes_per_token, chunk)
            )
            for _ in range(20):
                r = Request("r", 0, rng.randint(1, 200), rng.randint(1, 200))
                P, L = r.prompt_tokens, r.total_tokens
                peak, c = 0, 0
                while c < L:
                    n = min(P - c, chunk or P) if c < P else 1
                    assert a.allocate(7, r, c + n, computed=c)
                    peak = max(peak, a.held_slots(7))
                    c += n
                a.free(7)
                c = 0
                while c < L - 1:  # the restart
                    n = min(L - 1 - c, chunk or L - 1)
                    assert a.allocate(7, r, c + n, computed=c)
                    peak = max(peak, a.held_slots(7))
                    c += n
                a.free(7)
                assert a.footprint(r) == peak, (model.name, chunk, P, L)


def test_hf_configs_of_llama4_and_gpt_oss(tmp_path):
    import json

    text = {
        "model_type": "llama4_text",
        "num_hidden_layers": 48,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "vocab_size": 202048,
        "max_position_embeddings": 10485760,
        "torch_dtype": "bfloat16",
        "attention_chunk_size": 8192,
        "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)],
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama4", "text_config": text}))
    m = get_model(str(p))
    scout = MODEL_PRESETS["llama-4-scout"]
    assert m.mixers == scout.mixers and m.sequence_bytes(50_000) == scout.sequence_bytes(50_000)
    assert m.active_params == pytest.approx(17.2e9, rel=0.01)  # "17B active"
    oss = {
        "model_type": "gpt_oss",
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "num_local_experts": 32,
        "experts_per_token": 4,
        "quantization_config": {"quant_method": "mxfp4"},
    }
    p.write_text(json.dumps(oss))
    g = get_model(str(p))
    assert g.sequence_bytes(32768) == MODEL_PRESETS["gpt-oss-20b"].sequence_bytes(32768)
    assert g.weight_bytes == pytest.approx(MODEL_PRESETS["gpt-oss-20b"].weight_bytes, rel=0.01)


def test_custom_models_take_windows_and_mla():
    g = get_model("custom:layers=48,kv_heads=8,head_dim=256,params=12e9,q_heads=16,sliding_window=1024,full_every=6")
    assert g.mixers == MODEL_PRESETS["gemma-3-12b"].mixers
    assert g.sequence_bytes(32768) == MODEL_PRESETS["gemma-3-12b"].sequence_bytes(32768)
    d = get_model(
        "custom:layers=61,kv_heads=128,head_dim=192,params=671e9,kv_lora_rank=512,qk_rope_head_dim=64,dtype=bf16"
    )
    assert d.kv_bytes_per_token == 61 * 1152
    for bad in ("full_every=2", "sliding_window=8,attention_chunk=8", "sliding_window=-3"):
        with pytest.raises(ConfigError):
            get_model(f"custom:layers=4,kv_heads=2,head_dim=64,params=1e9,{bad}")


def test_vllm_maximum_concurrency_of_the_hybrid_layout_by_hand():
    from kvsim.memory_budget import memory_budget
    from kvsim.options import config_from_args

    b = memory_budget(
        config_from_args(
            ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--max-model-len", "131072", "--kv-pool-gb", "40"]
        )
    )
    pages = (40 << 30) // (12 * 16 * 2048)  # 12 layers a group x 16 tokens x 2 KiB
    # a max-length request: 8,192 full blocks + cdiv(128 - 1 + 8,192, 16) + 1 = 521 sliding blocks (vLLM)
    assert b.concurrency_by_layout()["hybrid"] == pytest.approx(pages / (8192 + 521))
    assert b.concurrency_by_layout()["naive"] == pytest.approx((40 << 30) // (24 * 16 * 2048) / 8192)


def _config(tmp_path, cfg, name="config.json"):
    import json

    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


GDN = {
    "num_hidden_layers": 8,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
}


def test_gated_deltanet_layers_hold_their_state_as_vllm_sizes_it(tmp_path):
    """Qwen3-Next's convention (every 4th layer full, the others Gated DeltaNet): by hand, the conv state
    covers q, k and v: (2 x 2 x 16 + 4 x 16) x (4 - 1) = 384 values; the recurrent state is 16 x 16 per value
    head: 4 x 256 = 1,024; bf16: 2,816 bytes per layer; with Qwen3.5's mamba_ssm_dtype float32 the recurrent
    part takes 4 bytes: 384 x 2 + 1,024 x 4 = 4,864; split over 2 ranks: half each."""
    m = get_model(
        _config(tmp_path, {"model_type": "qwen3_next", "torch_dtype": "bfloat16", "full_attention_interval": 4, **GDN})
    )
    assert m.mixers == ("mamba", "mamba", "mamba", "full") * 2
    assert m.state_bytes_per_layer() == (384 + 1024) * 2 == 2816
    assert m.state_bytes_per_layer(2) == 2816 // 2
    assert m.kv_bytes_per_token == 2 * 2 * 2 * 32 * 2  # 2 attention layers only
    q35 = get_model(
        _config(
            tmp_path,
            {
                "model_type": "qwen3_5_moe",
                "text_config": {
                    "model_type": "qwen3_5_moe_text",
                    "dtype": "bfloat16",
                    "mamba_ssm_dtype": "float32",
                    "layer_types": ["linear_attention"] * 3
                    + ["full_attention"]
                    + ["linear_attention"] * 3
                    + ["full_attention"],
                    **GDN,
                },
            },
            "q35.json",
        )
    )
    assert q35.dtype == "bf16" and q35.state_dtype == "fp32"
    assert q35.state_bytes_per_layer() == 384 * 2 + 1024 * 4 == 4864
    # in/out projections: q, k (2 x 32) and v, z (2 x 64) and 2 gates per value head in; conv; 64 -> 64 out
    assert q35.mamba_params() == 64 * (2 * 32 + 2 * 64 + 2 * 4) + 128 * 4 + 64 * 64


def test_hybrid_families_kvsim_does_not_model_are_refused_not_priced_as_attention(tmp_path):
    from kvsim.errors import ConfigError

    base = {k: v for k, v in GDN.items() if not k.startswith("linear_")}
    for field, value in (
        ("attn_type_list", [0, 1] * 4),
        ("linear_attn_config", {"kda_layers": [1, 2]}),
        ("hybrid_override_pattern", "M--M*-M-"),
        ("hybrid_override_pattern", "-M*-M-M-"),
        ("hybrid_override_pattern", "MX*-M-M-"),
        ("hybrid_override_pattern", "M-M-"),
        # shapes that would be priced wrong, not approximately: Nemotron-NAS blocks, latent MoE experts
        ("block_configs", [{"attention": {"no_op": True}, "ffn": {"ffn_mult": 2.625}}] * 8),
        ("moe_latent_size", 1024),
    ):
        with pytest.raises(ConfigError, match=f"field '{field}'"):
            get_model(_config(tmp_path, {"model_type": "x", **base, field: value}))


def test_nemotron_h_blocks_become_layers_with_or_without_an_ffn(tmp_path):
    """'MEM*EM-' is 7 blocks: mamba+MoE, mamba alone, attention+MoE, mamba+MLP = 4 kvsim layers; by hand the
    Mamba-2 state: 4 heads x 8 dims = 32 inner channels, conv over x, B and C ((32 + 2 x 2 x 16) x 3 = 288)
    and 32 x 16 = 512 state values in float32 (mamba_ssm_cache_dtype): 288 x 2 + 512 x 4 = 2,624 bytes; the
    MLP-less layer adds no FFN parameters and one all-reduce instead of two."""
    from kvsim.latency import build_latency
    from kvsim.options import config_from_args

    cfg = {
        "model_type": "nemotron_h",
        "num_hidden_layers": 7,
        "hybrid_override_pattern": "MEM*EM-",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "mamba_num_heads": 4,
        "mamba_head_dim": 8,
        "ssm_state_size": 16,
        "n_groups": 2,
        "conv_kernel": 4,
        "mamba_ssm_cache_dtype": "float32",
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 64,
        "n_shared_experts": 1,
    }
    m = get_model(_config(tmp_path, cfg))
    assert m.layers == 4 and m.mixers == ("mamba", "mamba", "full", "mamba")
    assert m.ffn_mask == (True, False, True, True) and m.moe_mask == (True, False, True, False)
    assert not m.gated_mlp and m.shared_experts == 2 and m.kv_bytes_per_token == 2 * 1 * 2 * 16 * 2
    assert m.state_bytes_per_layer() == 288 * 2 + 512 * 4 == 2624
    full = replace(m, ffn_layers=())  # the same layers, each with an FFN
    assert full.shape_params() - m.shape_params() == full.ffn_params(False)  # layer 2's would-be MLP
    p = tmp_path / "m.json"
    p.write_text(__import__("json").dumps(cfg))
    lat = build_latency(config_from_args(["--model", str(p), "-tp", "2", "--cpu-overhead", "none"]))
    assert lat.layer_reduces == 4 + 3


def test_gemma_3s_published_config_leaves_vocabulary_context_and_pattern_to_transformers(tmp_path):
    """google/gemma-3-27b-it's config.json has no vocab_size, max_position_embeddings, sliding_window_pattern
    or tie_word_embeddings in its text_config: transformers' Gemma3TextConfig defaults (262,208; 131,072; every
    6th layer global; tied) apply, and the top-level torch_dtype is the language model's."""
    text = {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    }
    m = get_model(
        _config(
            tmp_path,
            {
                "architectures": ["Gemma3ForConditionalGeneration"],
                "model_type": "gemma3",
                "torch_dtype": "bfloat16",
                "text_config": text,
            },
        )
    )
    assert (m.vocab_size, m.max_context, m.tie_word_embeddings, m.dtype) == (262_208, 131_072, True, "bf16")
    assert m.count("full") == 10 and m.mixers[5] == "full" and m.mixers[4] == "sliding"
    assert abs(m.params / 1e9 - 27.0) < 0.1  # the published 27B


def test_a_multimodal_checkpoints_quantization_applies_to_its_language_model(tmp_path):
    text = {
        "model_type": "ministral3",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    m = get_model(
        _config(
            tmp_path,
            {
                "model_type": "mistral3",
                "dtype": "bfloat16",
                "text_config": text,
                "quantization_config": {
                    "quant_method": "fp8",
                    "activation_scheme": "static",
                    "modules_to_not_convert": ["model.vision_tower", "lm_head"],
                },
            },
        )
    )
    assert m.dtype == "bf16" and m.weight_quant == "fp8"


def test_prefix_caching_counts_two_state_pages_per_recurrent_group():
    """vLLM's align mode (prefix caching of recurrent states) keeps two state pages per group and request at its
    peak (MambaSpec.max_memory_usage_bytes): 'maximum concurrency' divides by one more page per mamba group."""
    from kvsim.allocators.kv_groups import max_blocks_per_request
    from kvsim.memory_budget import memory_budget
    from kvsim.options import config_from_args

    assert max_blocks_per_request("mamba", 0, 16, 4096, 0) == 1
    assert max_blocks_per_request("mamba", 0, 16, 4096, 0, 2) == 2
    assert max_blocks_per_request("full", 0, 16, 4096, 0, 2) == 256
    base = ["--model", "jamba-1.5-mini", "--gpu", "h200", "--max-model-len", "65536"]
    one, two = (memory_budget(config_from_args(base + extra)) for extra in ([], ["--enable-prefix-caching"]))
    assert (one.state_pages, two.state_pages) == (1, 2)
    lay = next(lay for name, lay, _ in one.layouts if name == "hybrid")
    mamba_groups = sum(g.kind == "mamba" for g in lay.groups)
    need1 = lay.pool_blocks[0] / one.concurrency_by_layout()["hybrid"]
    need2 = lay.pool_blocks[0] / two.concurrency_by_layout()["hybrid"]
    assert mamba_groups > 0 and need2 - need1 == pytest.approx(mamba_groups)


def test_disable_hybrid_kv_cache_manager_serves_the_naive_layout(tmp_path):
    """vLLM's --disable-hybrid-kv-cache-manager: Gemma-2's sliding layers keep every token as its full ones do
    (kvsim's naive layout, with prefix caching as by default); a model whose layers are alike is unchanged; a model
    with mamba layers is refused, as vLLM cannot lay out its state without the manager."""
    import pandas as pd

    from kvsim.cli import main
    from kvsim.errors import ConfigError
    from kvsim.options import config_from_args
    from kvsim.runner import served_allocator

    flag = ["--disable-hybrid-kv-cache-manager"]
    gemma = ["--model", "gemma-2-9b", "--gpu", "h100"]
    assert served_allocator(config_from_args(gemma)) == "hybrid+prefix"
    assert served_allocator(config_from_args([*gemma, *flag])) == "naive+prefix"
    assert served_allocator(config_from_args(["--model", "llama-3.1-8b", *flag])) == "paged+prefix"
    with pytest.raises(ConfigError, match="mamba layers need vLLM's hybrid KV cache manager"):
        config_from_args(["--model", "jamba-1.5-mini", "--gpu", "h100", *flag])
    runs = {}
    load = ["--max-concurrency", "8", "--random-input-len", "6000", "--random-output-len", "20", "--num-prompts", "16"]
    for extra in ([], flag):
        out = tmp_path / f"o{len(runs)}"
        args = ["run", *gemma, *load, "--bench", "vllm-random", "--kv-pool-gb", "4", "--no-plots", "--out", str(out)]
        assert main([*args, *extra]) == 0
        runs[bool(extra)] = pd.read_csv(out / "runs.csv").iloc[0]
    naive, hybrid = runs[True], runs[False]
    assert naive["allocator"].startswith("naive") and hybrid["allocator"].startswith("hybrid")
    # 6,000-token prompts: the sliding layers keep only their 4,096-token window with the manager, every token without
    assert naive["window_freed_blocks"] == 0 < hybrid["window_freed_blocks"]
    assert naive["peak_held_frac"] > hybrid["peak_held_frac"]
