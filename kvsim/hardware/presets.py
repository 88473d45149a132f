"""Model presets (shapes from each model's public Hugging Face ``config.json``, parameter counts as published)
and the Hugging Face ids that name them."""

from __future__ import annotations

from dataclasses import replace

from kvsim.hardware.hf_config import model_from_config_dict
from kvsim.hardware.model_spec import ModelSpec


def _m(name, layers, hidden, q, kv, ffn, vocab, ctx, params, dtype="fp16", head_dim=0, gated=True, tied=False, **more):
    return ModelSpec(
        name, layers, q, kv, head_dim or hidden // q, params, ctx, dtype, hidden, ffn, vocab, gated, tied, **more
    )


def _pattern(layers: int, mixer) -> tuple[str, ...]:
    """Layer types from a rule: ``mixer(i)`` gives layer i's type."""
    return tuple(mixer(i) for i in range(layers))


# Shapes from each model's Hugging Face config.json; params as published (model cards).
MODEL_PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _m("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6.74e9),
        _m("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13.0e9),
        _m("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 69.0e9),
        _m("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8.03e9, "bf16"),
        _m("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70.6e9, "bf16"),
        _m("codellama-34b", 48, 8192, 64, 8, 22016, 32000, 16384, 33.7e9, "bf16"),
        _m("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, 7.24e9, "bf16"),
        _m("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768, 7.62e9, "bf16", head_dim=128),
        _m("qwen-72b", 80, 8192, 64, 64, 24576, 152064, 32768, 72.3e9, "bf16"),
        # Qwen/Qwen2.5-72B(-Instruct): GQA (8 KV heads); its sliding window is off (use_sliding_window false)
        _m("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 32768, 72.7e9, "bf16"),
        # microsoft/Phi-3.5-mini-instruct: 32 KV heads of 96 dims, LongRoPE to 131,072 tokens
        _m("phi-3.5-mini", 32, 3072, 32, 32, 8192, 32064, 131072, 3.82e9, "bf16"),
        _m("internlm-20b", 60, 5120, 40, 40, 13824, 103168, 4096, 20.0e9, "bf16"),
        _m("phi-2", 32, 2560, 32, 32, 10240, 51200, 2048, 2.78e9, gated=False, rotary_dim=32),  # partial 0.4
        _m("opt-13b", 40, 5120, 40, 40, 20480, 50272, 2048, 12.9e9, gated=False, tied=True, rotary_dim=0),
        # --- today's layer mixes; numbers from each repository's config.json on Hugging Face ---
        # mistralai/Mistral-7B-v0.1: every layer a 4096-token sliding window.
        _m(
            "mistral-7b-v0.1",
            32,
            4096,
            32,
            8,
            14336,
            32000,
            32768,
            7.24e9,
            "bf16",
            layer_types=("sliding",) * 32,
            sliding_window=4096,
        ),
        # google/gemma-2-9b: head_dim 256, sliding_window 4096 on even layers (0, 2, ...), full on odd ones.
        _m(
            "gemma-2-9b",
            42,
            3584,
            16,
            8,
            14336,
            256000,
            8192,
            9.24e9,
            "bf16",
            head_dim=256,
            tied=True,
            layer_types=_pattern(42, lambda i: "sliding" if i % 2 == 0 else "full"),
            sliding_window=4096,
        ),
        # google/gemma-3-12b-it (text_config): sliding_window 1024, every 6th layer full
        # (sliding_window_pattern 6); params include the vision tower vLLM loads.
        _m(
            "gemma-3-12b",
            48,
            3840,
            16,
            8,
            15360,
            262208,
            131072,
            12.2e9,
            "bf16",
            head_dim=256,
            tied=True,
            layer_types=_pattern(48, lambda i: "full" if (i + 1) % 6 == 0 else "sliding"),
            sliding_window=1024,
            encoder_params=0.43e9,  # its SigLIP vision tower and projector (12.2 B published, 11.77 B by its shapes)
        ),
        # openai/gpt-oss-20b: layer_types alternate sliding_attention (128) / full_attention; 32 experts,
        # top-4, experts in MXFP4.
        _m(
            "gpt-oss-20b",
            24,
            2880,
            64,
            8,
            2880,
            201088,
            131072,
            20.9e9,
            "bf16",
            head_dim=64,
            layer_types=_pattern(24, lambda i: "sliding" if i % 2 == 0 else "full"),
            sliding_window=128,
            num_experts=32,
            experts_per_token=4,
            moe_intermediate_size=2880,
            expert_dtype="mxfp4",
            chat_renderer="harmony",
            quant_method="mxfp4",
        ),
        # meta-llama/Llama-4-Scout-17B-16E (text_config): attention_chunk_size 8192 on RoPE layers, every 4th
        # layer global NoPE attention (no_rope_layer_interval 4); 16 experts top-1 + a shared expert;
        # 109 B params with the vision tower.
        _m(
            "llama-4-scout",
            48,
            5120,
            40,
            8,
            16384,
            202048,
            10485760,
            109e9,
            "bf16",
            head_dim=128,
            layer_types=_pattern(48, lambda i: "full" if (i + 1) % 4 == 0 else "chunked"),
            attention_chunk=8192,
            num_experts=16,
            experts_per_token=1,
            moe_intermediate_size=8192,
            shared_experts=1,
            encoder_params=1.2e9,  # its vision tower
        ),
        # deepseek-ai/DeepSeek-V3: MLA (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope 128 -> head_dim 192,
        # v_head_dim 128, q_lora_rank 1536); first_k_dense_replace 3, then 256 routed experts top-8 + 1 shared;
        # FP8 weights (671 B params without the MTP module); torch_dtype bfloat16, so the KV cache is BF16.
        _m(
            "deepseek-v3",
            61,
            7168,
            128,
            128,
            18432,
            129280,
            163840,
            671e9,
            "bf16",
            head_dim=192,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            v_head_dim=128,
            weight_dtype="fp8",
            weight_quant="fp8_block",
            quant_method="fp8",
            num_experts=256,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            moe_layers=(False,) * 3 + (True,) * 58,
        ),
        # --- models served now (config.json of each Hugging Face repository; architecture numbers also in
        # THUDM/slime's scripts/models/*.sh) ---
        # meta-llama/Llama-3.1-8B: Llama-3-8B's shapes, 131,072 positions (rope_scaling llama3, factor 8).
        _m("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 8.03e9, "bf16"),
        # meta-llama/Llama-3.1-70B and Llama-3.3-70B-Instruct: Llama-3-70B's shapes, 131,072 positions.
        _m("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072, 70.6e9, "bf16"),
        _m("llama-3.3-70b", 80, 8192, 64, 8, 28672, 128256, 131072, 70.6e9, "bf16"),
        # meta-llama/Llama-3.1-405B: 126 layers, 128 heads over 8 KV heads, MLP 53,248 wide, untied embeddings.
        _m("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072, 405.9e9, "bf16"),
        # meta-llama/Llama-3.2-1B and -3B (and -Instruct): tied embeddings, 131,072 positions (rope_scaling llama3,
        # factor 32); 1B's heads are 64 wide
        _m("llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, 1.24e9, "bf16", head_dim=64, tied=True),
        _m("llama-3.2-3b", 28, 3072, 24, 8, 8192, 128256, 131072, 3.21e9, "bf16", head_dim=128, tied=True),
        # Qwen/Qwen2.5-14B-Instruct and -32B-Instruct: GQA 40 heads over 8 KV heads, qkv bias, untied, 32,768
        # positions in the instruct models' config.json (YaRN for more is opt-in)
        _m("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064, 32768, 14.7e9, "bf16", head_dim=128),
        _m("qwen2.5-32b", 64, 5120, 40, 8, 27648, 152064, 32768, 32.5e9, "bf16", head_dim=128),
        # microsoft/phi-4: 40 heads over 10 KV heads, fused qkv and gate/up, 16,384 positions, untied
        _m("phi-4", 40, 5120, 40, 10, 17920, 100352, 16384, 14.7e9, "bf16", head_dim=128),
        # google/gemma-3-27b-it and gemma-3-4b-it (text_config): as gemma-3-12b, every 6th layer full and the rest a
        # 1,024-token sliding window, tied embeddings; params include the SigLIP vision tower vLLM loads (the same
        # 0.43 B as the 12B's: 27.4 B published, 27.0 B by the text shapes; 4.3 B, 3.88 B)
        _m(
            "gemma-3-27b",
            62,
            5376,
            32,
            16,
            21504,
            262208,
            131072,
            27.4e9,
            "bf16",
            head_dim=128,
            tied=True,
            layer_types=_pattern(62, lambda i: "full" if (i + 1) % 6 == 0 else "sliding"),
            sliding_window=1024,
            encoder_params=0.43e9,
        ),
        _m(
            "gemma-3-4b",
            34,
            2560,
            8,
            4,
            10240,
            262208,
            131072,
            4.3e9,
            "bf16",
            head_dim=256,
            tied=True,
            layer_types=_pattern(34, lambda i: "full" if (i + 1) % 6 == 0 else "sliding"),
            sliding_window=1024,
            encoder_params=0.43e9,
        ),
        # mistralai/Mistral-Small-24B-Instruct-2501: 32 heads of 128 over 8 KV heads (head_dim is not hidden /
        # heads), MLP 32,768 wide, Tekken's 131,072-token vocabulary, 32,768 positions, untied
        _m("mistral-small-24b", 40, 5120, 32, 8, 32768, 131072, 32768, 23.6e9, "bf16", head_dim=128),
        # mistralai/Mistral-Large-Instruct-2411 (and -2407): 96 heads over 8 KV heads, MLP 28,672 wide, a
        # 32,768-token vocabulary, 131,072 positions, untied (122.6 B by its shapes)
        _m("mistral-large-2411", 88, 12288, 96, 8, 28672, 32768, 131072, 123e9, "bf16", head_dim=128),
        # Qwen/Qwen3-8B, Qwen3-14B, Qwen3-32B: head_dim 128 (not hidden / heads for 32B), 40,960 positions, untied.
        # Qwen/Qwen3-0.6B, -1.7B, -4B: tied embeddings
        _m("qwen3-0.6b", 28, 1024, 16, 8, 3072, 151936, 40960, 0.596e9, "bf16", head_dim=128, tied=True),
        _m("qwen3-1.7b", 28, 2048, 16, 8, 6144, 151936, 40960, 1.72e9, "bf16", head_dim=128, tied=True),
        _m("qwen3-4b", 36, 2560, 32, 8, 9728, 151936, 40960, 4.02e9, "bf16", head_dim=128, tied=True),
        _m("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 40960, 8.19e9, "bf16", head_dim=128),
        _m("qwen3-14b", 40, 5120, 40, 8, 17408, 151936, 40960, 14.8e9, "bf16", head_dim=128),
        _m("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 40960, 32.8e9, "bf16", head_dim=128),
        # Qwen/Qwen3-235B-A22B: 94 layers, all MoE: 128 experts top-8 of width 1536, no shared expert.
        _m(
            "qwen3-235b-a22b",
            94,
            4096,
            64,
            4,
            12288,
            151936,
            40960,
            235.1e9,
            "bf16",
            head_dim=128,
            num_experts=128,
            experts_per_token=8,
            moe_intermediate_size=1536,
        ),
        # Qwen/Qwen3-30B-A3B: 48 layers, all MoE: 128 experts top-8 of width 768, no shared expert.
        _m(
            "qwen3-30b-a3b",
            48,
            2048,
            32,
            4,
            6144,
            151936,
            40960,
            30.5e9,
            "bf16",
            head_dim=128,
            num_experts=128,
            experts_per_token=8,
            moe_intermediate_size=768,
        ),
        # Qwen/Qwen3-Coder-480B-A35B-Instruct: 62 layers, all MoE: 160 experts top-8 of width 2560, no shared
        # expert; 262,144 positions.
        _m(
            "qwen3-coder-480b-a35b",
            62,
            6144,
            96,
            8,
            8192,
            151936,
            262144,
            480.2e9,
            "bf16",
            head_dim=128,
            num_experts=160,
            experts_per_token=8,
            moe_intermediate_size=2560,
        ),
        # mistralai/Mixtral-8x7B-v0.1 and -8x22B-v0.1: every layer MoE, 8 experts top-2 of the FFN width, full
        # attention (sliding_window null); the 8x22B's Instruct-v0.1 has a 32,768-entry vocabulary (below).
        _m(
            "mixtral-8x7b",
            32,
            4096,
            32,
            8,
            14336,
            32000,
            32768,
            46.7e9,
            "bf16",
            num_experts=8,
            experts_per_token=2,
            moe_intermediate_size=14336,
        ),
        _m(
            "mixtral-8x22b",
            56,
            6144,
            48,
            8,
            16384,
            32000,
            65536,
            140.6e9,
            "bf16",
            num_experts=8,
            experts_per_token=2,
            moe_intermediate_size=16384,
        ),
        # meta-llama/Llama-4-Maverick-17B-128E (text_config): Scout's attention (chunks of 8,192 on RoPE layers,
        # every 4th layer global NoPE), MoE on every 2nd layer (interleave_moe_layer_step 2: 128 experts top-1
        # of width 8192 + a shared expert), dense FFNs of 16,384 between; 400.7 B text params by its shapes plus
        # Scout's vision tower (1.2 B) that vLLM loads.
        _m(
            "llama-4-maverick",
            48,
            5120,
            40,
            8,
            16384,
            202048,
            1048576,
            401.9e9,
            "bf16",
            head_dim=128,
            layer_types=_pattern(48, lambda i: "full" if (i + 1) % 4 == 0 else "chunked"),
            attention_chunk=8192,
            num_experts=128,
            experts_per_token=1,
            moe_intermediate_size=8192,
            shared_experts=1,
            moe_layers=tuple(i % 2 == 1 for i in range(48)),
            encoder_params=1.2e9,  # Scout's vision tower
        ),
        # zai-org/GLM-4.5: 92 layers (the MTP layer vLLM skips without speculative decoding is not counted), GQA
        # with 8 KV heads, half the head rotary (partial_rotary_factor 0.5); the first 3 layers dense, then 160
        # experts top-8 of width 1536 + a shared one. GLM-4.6 and 4.7: the same shapes, 202,752 positions.
        _m(
            "glm-4.5",
            92,
            5120,
            96,
            8,
            12288,
            151552,
            131072,
            352.8e9,
            "bf16",
            head_dim=128,
            rotary_dim=64,
            num_experts=160,
            experts_per_token=8,
            moe_intermediate_size=1536,
            shared_experts=1,
            moe_layers=tuple(i >= 3 for i in range(92)),
        ),
        # zai-org/GLM-4.5-Air: 46 layers, the first dense, then 128 experts top-8 of width 1408 + a shared one
        _m(
            "glm-4.5-air",
            46,
            4096,
            96,
            8,
            10944,
            151552,
            131072,
            106.85e9,
            "bf16",
            head_dim=128,
            rotary_dim=64,
            num_experts=128,
            experts_per_token=8,
            moe_intermediate_size=1408,
            shared_experts=1,
            moe_layers=tuple(i >= 1 for i in range(46)),
        ),
        # openai/gpt-oss-120b: gpt-oss-20b's layer mix over 36 layers, 128 experts top-4 in MXFP4.
        _m(
            "gpt-oss-120b",
            36,
            2880,
            64,
            8,
            2880,
            201088,
            131072,
            116.8e9,
            "bf16",
            head_dim=64,
            layer_types=_pattern(36, lambda i: "sliding" if i % 2 == 0 else "full"),
            sliding_window=128,
            num_experts=128,
            experts_per_token=4,
            moe_intermediate_size=2880,
            expert_dtype="mxfp4",
            chat_renderer="harmony",
            quant_method="mxfp4",
        ),
        # deepseek-ai/DeepSeek-R1: DeepSeek-V3's architecture and FP8 weights.
        _m(
            "deepseek-r1",
            61,
            7168,
            128,
            128,
            18432,
            129280,
            163840,
            671e9,
            "bf16",
            head_dim=192,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            v_head_dim=128,
            weight_dtype="fp8",
            weight_quant="fp8_block",
            quant_method="fp8",
            num_experts=256,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            moe_layers=(False,) * 3 + (True,) * 58,
        ),
        # moonshotai/Kimi-K2-Instruct: DeepSeek-V3's MLA with 64 heads; first_k_dense_replace 1, then 384 experts
        # top-8 + 1 shared; FP8 weights; 163,840 vocabulary, 131,072 positions.
        _m(
            "kimi-k2",
            61,
            7168,
            64,
            64,
            18432,
            163840,
            131072,
            1.027e12,
            "bf16",
            head_dim=192,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            v_head_dim=128,
            weight_dtype="fp8",
            weight_quant="fp8_block",
            quant_method="fp8",
            num_experts=384,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            moe_layers=(False,) + (True,) * 60,
        ),
        # moonshotai/Kimi-K2.5 (text_config; a 27-layer MoonViT vision tower of ~0.46 B params beside it, in the
        # count): Kimi-K2's shapes with 262,144 positions; compressed-tensors W4A16 routed experts (symmetric INT4,
        # a bf16 scale per 32), everything else (MLA attention, shared experts, layer 0's dense MLP) in bf16.
        _m(
            "kimi-k2.5",
            61,
            7168,
            64,
            64,
            18432,
            163840,
            262144,
            1.0275e12,
            "bf16",
            head_dim=192,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            v_head_dim=128,
            expert_dtype="int4",
            weight_group_size=32,
            quant_method="compressed-tensors",
            num_experts=384,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            moe_layers=(False,) + (True,) * 60,
            encoder_params=0.46e9,  # its MoonViT vision tower
        ),
        # MiniMaxAI/MiniMax-M2 (M2.1 and M2.5 share it): 62 layers of ordinary GQA attention (attn_type_list all
        # 1), 48 heads x 128 over a 3,072 hidden size, 8 KV heads, half of each head rotary; 256 experts top-8 of
        # width 1,536, no shared expert, no dense layer; FP8 128x128 block weights (the router and LM head not);
        # 229 B params as published.
        _m(
            "minimax-m2",
            62,
            3072,
            48,
            8,
            1536,
            200064,
            196608,
            229e9,
            "bf16",
            head_dim=128,
            rotary_dim=64,
            num_experts=256,
            experts_per_token=8,
            moe_intermediate_size=1536,
            weight_dtype="fp8",
            weight_quant="fp8_block",
            quant_method="fp8",
            qk_norm_all_heads=True,
        ),
        # ai21labs/AI21-Jamba-1.5-Mini: attention every 8th layer from 4 (attn_layer_period 8, offset 4),
        # Mamba-1 elsewhere (d_state 16, d_conv 4, expand 2); MoE every 2nd layer from 1, 16 experts top-2.
        _m(
            "jamba-1.5-mini",
            32,
            4096,
            32,
            8,
            14336,
            65536,
            262144,
            51.6e9,
            "bf16",
            head_dim=128,
            rotary_dim=0,
            layer_types=_pattern(32, lambda i: "full" if i % 8 == 4 else "mamba"),
            mamba_d_inner=8192,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_conv_channels=8192,
            num_experts=16,
            experts_per_token=2,
            moe_intermediate_size=14336,
            moe_layers=tuple(i % 2 == 1 for i in range(32)),
        ),
    ]
}
# Qwen/Qwen3-8B-FP8, -14B-FP8, -32B-FP8, -30B-A3B-FP8, -235B-A22B-FP8: the bf16 models' shapes, quantization_config fp8 with
# weight_block_size [128, 128] (block-scaled FP8 weights; the embedding and LM head stay bf16)
for _name in ("qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b"):
    MODEL_PRESETS[f"{_name}-fp8"] = replace(
        MODEL_PRESETS[_name], name=f"{_name}-fp8", weight_dtype="fp8", weight_quant="fp8_block", quant_method="fp8"
    )
del _name
# Qwen/Qwen3-30B-A3B-Instruct-2507, -Thinking-2507 and the 235B's (July 2025 updates, and their -FP8): the same
# shapes with 262,144 positions in config.json (the originals 40,960), so vLLM's default context, and its rotary
# table, are 6.4x as long
for _name in ("qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-30b-a3b-fp8", "qwen3-235b-a22b-fp8"):
    _new = _name.replace("-a3b", "-a3b-2507").replace("-a22b", "-a22b-2507")
    MODEL_PRESETS[_new] = replace(MODEL_PRESETS[_name], name=_new, max_context=262144)
del _name, _new
MODEL_PRESETS["glm-4.6"] = replace(MODEL_PRESETS["glm-4.5"], name="glm-4.6", max_context=202752)
# Qwen/QwQ-32B: Qwen2.5-32B's shapes, 40,960 positions; deepseek-ai/DeepSeek-R1-Distill-Qwen-14B / -32B: Qwen2.5's
# base models' shapes with 131,072 positions; Qwen/Qwen3-4B-Instruct-2507 / -Thinking-2507: Qwen3-4B with 262,144
MODEL_PRESETS["qwq-32b"] = replace(MODEL_PRESETS["qwen2.5-32b"], name="qwq-32b", max_context=40960)
for _size in ("14b", "32b"):
    MODEL_PRESETS[f"deepseek-r1-distill-qwen-{_size}"] = replace(
        MODEL_PRESETS[f"qwen2.5-{_size}"], name=f"deepseek-r1-distill-qwen-{_size}", max_context=131072
    )
del _size
MODEL_PRESETS["qwen3-4b-2507"] = replace(MODEL_PRESETS["qwen3-4b"], name="qwen3-4b-2507", max_context=262144)
# Qwen/Qwen3-Next-80B-A3B-Instruct and -Thinking (and their -FP8, 128x128-block FP8): Gated DeltaNet layers (16 key
# heads and 32 value heads of 128, a 4-wide convolution) with every 4th layer full attention (16 heads of 256 over
# 2 KV heads, a gated output), every layer 512 experts top-10 of width 512 plus a shared expert of 512, 262,144
# positions; read from its config.json's fields as a config.json is (79.7 B published; 79.6 B by these shapes,
# which leave out the attention's output gate)
_QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "torch_dtype": "bfloat16",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "intermediate_size": 5120,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "tie_word_embeddings": False,
}
MODEL_PRESETS["qwen3-next-80b-a3b"] = replace(
    model_from_config_dict(_QWEN3_NEXT, "qwen3-next-80b-a3b"),
    name="qwen3-next-80b-a3b",
    params=79.7e9,
    from_config=False,
)
MODEL_PRESETS["qwen3-next-80b-a3b-fp8"] = replace(
    MODEL_PRESETS["qwen3-next-80b-a3b"],
    name="qwen3-next-80b-a3b-fp8",
    weight_dtype="fp8",
    weight_quant="fp8_block",
    quant_method="fp8",
)


def _qwen3_5(name: str, hidden: int, layers: int, heads: int, kv: int, v_heads: int, params: float, **ffn) -> ModelSpec:
    """A Qwen3.5 model's language model from its config.json's text_config fields (Qwen3-Next's layout: Gated
    DeltaNet layers of 16 key heads and ``v_heads`` value heads of 128, every 4th layer full attention of heads of
    256 with a gated output, 248,320-token vocabulary, 262,144 positions, an fp32 recurrent state as its config's
    mamba_ssm_dtype says), with its vision tower (27 blocks of 1,152: 0.45 B) counted as vLLM loads it. ``ffn``:
    intermediate_size (dense), or num_experts, num_experts_per_tok and moe_intermediate_size (a shared expert of
    the same width)."""
    cfg = {
        "model_type": "qwen3_5_moe_text" if "num_experts" in ffn else "qwen3_5_text",
        "torch_dtype": "bfloat16",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 256,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "partial_rotary_factor": 0.25,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": v_heads,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "tie_word_embeddings": False,
        **ffn,
    }
    if "num_experts" in ffn:
        cfg["shared_expert_intermediate_size"] = ffn["moe_intermediate_size"]
    text = model_from_config_dict(cfg, name)
    return replace(text, name=name, params=params, encoder_params=0.45e9, from_config=False)


# Qwen/Qwen3.5-397B-A17B, -122B-A10B, -35B-A3B and -27B (and their -FP8, 128x128 blocks): config.json text_config
# fields as AIConfigurator's model_configs keep them (Apache-2.0); published 397 B, 122 B, 35 B and 27 B with the
# vision tower (396.3, 122.3, 35.0 and 26.9 B by these shapes)
for _m35 in (
    _qwen3_5(
        "qwen3.5-397b-a17b",
        4096,
        60,
        32,
        2,
        64,
        397e9,
        num_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=1024,
    ),
    _qwen3_5(
        "qwen3.5-122b-a10b",
        3072,
        48,
        32,
        2,
        64,
        122e9,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=1024,
    ),
    _qwen3_5(
        "qwen3.5-35b-a3b", 2048, 40, 16, 2, 32, 35e9, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512
    ),
    _qwen3_5("qwen3.5-27b", 5120, 64, 24, 4, 48, 27e9, intermediate_size=17408),
):
    MODEL_PRESETS[_m35.name] = _m35
    MODEL_PRESETS[f"{_m35.name}-fp8"] = replace(
        _m35, name=f"{_m35.name}-fp8", weight_dtype="fp8", weight_quant="fp8_block", quant_method="fp8"
    )
del _m35
# mistralai/Mistral-Small-3.1-24B-Instruct-2503 and 3.2-24B-Instruct-2506 (text_config): the 2501 model's text shapes
# with 131,072 positions, and a Pixtral vision tower and projector of 0.44 B (23.57 B text + 0.44 B)
MODEL_PRESETS["mistral-small-3.1-24b"] = replace(
    MODEL_PRESETS["mistral-small-24b"],
    name="mistral-small-3.1-24b",
    max_context=131072,
    params=24.0e9,
    encoder_params=0.439e9,
)
# moonshotai/Kimi-K2-Instruct-0905: Kimi-K2's weights retrained for 262,144 positions (YaRN factor 64 over 4,096;
# the July release 32). moonshotai/Kimi-K2-Thinking: the same 262,144 positions with Kimi-K2.5's compressed-tensors
# INT4 routed experts (W4A16, a bf16 scale per 32; attention, shared experts and layer 0's MLP in bf16), text only
MODEL_PRESETS["kimi-k2-0905"] = replace(MODEL_PRESETS["kimi-k2"], name="kimi-k2-0905", max_context=262144)
MODEL_PRESETS["kimi-k2-thinking"] = replace(
    MODEL_PRESETS["kimi-k2.5"], name="kimi-k2-thinking", params=1.027e12, encoder_params=0.0
)
MODEL_PRESETS["mixtral-8x22b-instruct"] = replace(
    MODEL_PRESETS["mixtral-8x22b"], name="mixtral-8x22b-instruct", vocab_size=32768
)


# Hugging Face repository ids (as `vllm serve` takes them) of the presets' models: base and instruct/chat
# variants share shapes. kvsim reads no hub at run time; any other id needs its config.json.
HF_IDS = {
    **{f"meta-llama/Llama-2-{s}{v}-hf": f"llama-2-{s}" for s in ("7b", "13b", "70b") for v in ("", "-chat")},
    **{f"meta-llama/Meta-Llama-3-{s}{v}": f"llama-3-{s.lower()}" for s in ("8B", "70B") for v in ("", "-Instruct")},
    **{
        f"meta-llama/{p}Llama-3.1-{s}{v}": f"llama-3.1-{s.lower()}"
        for p in ("", "Meta-")
        for s in ("8B", "70B", "405B")
        for v in ("", "-Instruct")
    },
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    **{f"meta-llama/Llama-3.2-{s}{v}": f"llama-3.2-{s.lower()}" for s in ("1B", "3B") for v in ("", "-Instruct")},
    # DeepSeek's R1 distills of Llama keep their base models' config.json shapes
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": "llama-3.1-8b",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": "llama-3.3-70b",
    **{f"deepseek-ai/DeepSeek-R1-Distill-Qwen-{s}": f"deepseek-r1-distill-qwen-{s.lower()}" for s in ("14B", "32B")},
    **{f"Qwen/Qwen2.5-{s}-Instruct": f"qwen2.5-{s.lower()}" for s in ("14B", "32B")},
    "Qwen/QwQ-32B": "qwq-32b",
    "microsoft/phi-4": "phi-4",
    **{f"Qwen/Qwen3-4B-{v}-2507": "qwen3-4b-2507" for v in ("Instruct", "Thinking")},
    **{f"codellama/CodeLlama-34b{v}-hf": "codellama-34b" for v in ("", "-Instruct", "-Python")},
    **{f"mistralai/Mistral-7B-Instruct-v0.{v}": "mistral-7b" for v in (2, 3)},
    "mistralai/Mistral-7B-v0.3": "mistral-7b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b-v0.1",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    # the coder models keep the base model's config.json shapes
    "Qwen/Qwen2.5-Coder-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-Coder-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "Qwen/Qwen2.5-72B-Instruct": "qwen2.5-72b",
    "microsoft/Phi-3.5-mini-instruct": "phi-3.5-mini",
    "Qwen/Qwen-72B": "qwen-72b",
    "Qwen/Qwen-72B-Chat": "qwen-72b",
    "internlm/internlm-20b": "internlm-20b",
    "internlm/internlm-chat-20b": "internlm-20b",
    "microsoft/phi-2": "phi-2",
    "facebook/opt-13b": "opt-13b",
    "google/gemma-2-9b": "gemma-2-9b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    **{f"google/gemma-3-{s}-{v}": f"gemma-3-{s}" for s in ("4b", "12b", "27b") for v in ("it", "pt")},
    **{f"mistralai/Mistral-Small-24B-{v}-2501": "mistral-small-24b" for v in ("Instruct", "Base")},
    **{f"mistralai/Mistral-Small-3.1-24B-{v}-2503": "mistral-small-3.1-24b" for v in ("Instruct", "Base")},
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "mistral-small-3.1-24b",
    **{f"mistralai/Mistral-Large-Instruct-{v}": "mistral-large-2411" for v in ("2407", "2411")},
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "meta-llama/Llama-4-Scout-17B-16E": "llama-4-scout",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    # V3.1 is V3 post-trained: the same config.json shapes and 128x128-block FP8 weights
    **{f"deepseek-ai/DeepSeek-V3.1{v}": "deepseek-v3" for v in ("", "-Base", "-Terminus")},
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
    "ai21labs/AI21-Jamba-1.5-Mini": "jamba-1.5-mini",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-FP8": "qwen3-30b-a3b-fp8",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    **{
        f"Qwen/Qwen3-{size}-{v}-2507{q}": f"qwen3-{size.lower()}-2507{q.lower()}"
        for size in ("30B-A3B", "235B-A22B")
        for v in ("Instruct", "Thinking")
        for q in ("", "-FP8")
    },
    "Qwen/Qwen3-8B-FP8": "qwen3-8b-fp8",
    "Qwen/Qwen3-14B-FP8": "qwen3-14b-fp8",
    "Qwen/Qwen3-32B-FP8": "qwen3-32b-fp8",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8",
    **{f"Qwen/Qwen3-{s}": f"qwen3-{s.lower()}" for s in ("0.6B", "1.7B", "4B")},
    # the coder models keep their base model's shapes (Qwen3-Coder-30B-A3B: the 2507 30B-A3B's, 262,144 positions)
    **{f"Qwen/Qwen3-Coder-30B-A3B-Instruct{q}": f"qwen3-30b-a3b-2507{q.lower()}" for q in ("", "-FP8")},
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": "qwen3-coder-480b-a35b",
    **{
        f"Qwen/Qwen3.5-{size}{q}": f"qwen3.5-{size.lower()}{q.lower()}"
        for size in ("397B-A17B", "122B-A10B", "35B-A3B", "27B")
        for q in ("", "-FP8")
    },
    **{
        f"Qwen/Qwen3-{m}{q}": f"qwen3-next-80b-a3b{q.lower()}"
        for m in ("Next-80B-A3B-Instruct", "Next-80B-A3B-Thinking", "Coder-Next")
        for q in ("", "-FP8")
    },
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
    "mistralai/Mixtral-8x22B-Instruct-v0.1": "mixtral-8x22b-instruct",
    "meta-llama/Llama-4-Maverick-17B-128E": "llama-4-maverick",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "llama-4-maverick",
    "zai-org/GLM-4.5": "glm-4.5",
    "zai-org/GLM-4.5-Air": "glm-4.5-air",
    "zai-org/GLM-4.6": "glm-4.6",
    "zai-org/GLM-4.7": "glm-4.6",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2",
    "moonshotai/Kimi-K2-Base": "kimi-k2",
    "moonshotai/Kimi-K2-Instruct-0905": "kimi-k2-0905",
    "moonshotai/Kimi-K2-Thinking": "kimi-k2-thinking",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    **{f"MiniMaxAI/MiniMax-M2{v}": "minimax-m2" for v in ("", ".1", ".5")},
}
_HF_INDEX = {k.lower(): v for k, v in HF_IDS.items()}
