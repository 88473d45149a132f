"""Content identity of a request's prompt blocks, from trace hash ids.

A trace identifies its prompts by ``hash_ids``: one id per ``hash_block_tokens`` (H) tokens, chained,
so equal ids mean the same tokens from the start of the prompt through that chunk (Mooncake: H=512).
The simulator's blocks hold B tokens. Simulator block j covers tokens [jB, (j+1)B); it is keyed by
the id of the H-chunk holding its last token plus its end offset inside that chunk. When B divides H,
each id covers exactly H/B blocks. When it does not, a block that straddles a chunk boundary is keyed
by the later chunk, whose id also pins tokens beyond the block: two prompts that agree on the block
but differ later in that chunk are then treated as different. Sharing is never overstated, and is
understated only at such boundaries.

Only full blocks inside the prompt are identified (a partial last block is never shared), and like
vLLM V1 the keys are chained: block j's hash covers its parent's hash, so a hit implies the whole prefix.
"""

from __future__ import annotations

from kvsim.trace.request import Request


_last: tuple = (None, 0, [])  # (request, block size, its hashes): replicas of a fleet ask about the same request


def prompt_block_hashes(request: Request, block_size: int) -> list[int]:
    """Chained hashes of the request's identified full prompt blocks, in order (may be empty; do not modify)."""
    global _last
    if _last[0] is request and _last[1] == block_size:
        return _last[2]
    out = _block_hashes(request, block_size)
    _last = (request, block_size, out)
    return out


def _block_hashes(request: Request, block_size: int) -> list[int]:
    ids, H = request.hash_ids, request.hash_block_tokens
    if not ids or not H:
        return []
    out: list[int] = []
    parent = hash((0x6B7673696D, H))  # ints only: str hashes vary between processes
    end = block_size
    while end <= request.prompt_tokens:
        chunk = (end - 1) // H
        if chunk >= len(ids):
            break
        parent = hash((parent, ids[chunk], end - chunk * H))
        out.append(parent)
        end += block_size
    return out
