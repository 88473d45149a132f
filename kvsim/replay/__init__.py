"""Record the batches a simulation executed, and replay them on the Triton kernels."""
