"""Triton paged-attention and block-copy kernels, with plain torch references (see README, "Kernels")."""
