"""kvsim: how well does a KV-cache memory manager use GPU memory, and what does that do to serving?"""

__version__ = "0.1.0"
