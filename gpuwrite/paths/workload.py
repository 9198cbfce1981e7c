"""The messages a run sends, their payload, and the byte-exact check of what arrived.

Shared by the emulated runner (:mod:`gpuwrite.paths.runner`) and the testbed runner, so
that both send the same bytes for the same seed and judge delivery the same way.

A message may be any number of bytes. It starts on a 4-byte word of the source (the
device verbs copy 32-bit words) and has its own range of the destination, from the same
word on. The bytes after its end, up to the next word, belong to nobody: the destination
is filled with a canary first, and those bytes must still hold it afterwards, so a path
that delivers a whole last word where it should deliver part of one is caught.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwrite import layouts as L
from gpuwrite.paths import kernels as K

CANARY_WORD = 0xDEADBEEF


@dataclass(frozen=True)
class Workload:
    """``msgs``: one row per message in QP order (``K.M_SIZE``, ``K.M_SRC_WORD``,
    ``K.M_DST_OFF``); ``qp_of``: each message's QP; ``payload``: the source words."""

    msgs: np.ndarray
    qp_of: np.ndarray
    payload: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self.msgs[:, K.M_SIZE]

    @property
    def words(self) -> np.ndarray:
        """Words each message spans (its last may be partly its own)."""
        return (self.sizes + 3) // 4

    def qp_first(self, n_qps: int) -> np.ndarray:
        """Index of each QP's first message, and the total, for ``send_messages``."""
        return np.searchsorted(self.qp_of, np.arange(n_qps + 1)).astype(np.int64)

    def destination(self) -> np.ndarray:
        """A destination buffer's initial contents: the canary in every word."""
        return np.full(len(self.payload), CANARY_WORD, dtype=np.uint32)

    def arrived(self, got: np.ndarray) -> np.ndarray:
        """Per message: its bytes in ``got`` (the destination, as words) equal the ones
        sent, and the bytes after it in its last word still hold the canary."""
        want = self.payload.view(np.uint8).copy()
        canary = self.destination().view(np.uint8)
        slack = self.words * 4 - self.sizes
        part = slack > 0
        if part.any():
            ends, n = (self.msgs[:, K.M_SRC_WORD] * 4 + self.sizes)[part], slack[part]
            at = np.repeat(ends - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
            want[at] = canary[at]
        same = np.asarray(got).view(np.uint8) == want
        # Messages tile the destination word by word, in order: one segment each.
        return np.logical_and.reduceat(same, self.msgs[:, K.M_SRC_WORD] * 4)

    def untouched(self, got: np.ndarray, m: int) -> bool:
        """Whether message ``m``'s destination range still holds only the canary."""
        a = int(self.msgs[m, K.M_SRC_WORD])
        return bool(np.all(np.asarray(got)[a:a + int(self.words[m])] == CANARY_WORD))


def build(path: str, sizes_bytes, n_qps: int, seed: int) -> Workload:
    """Spreads ``sizes_bytes`` round-robin over ``n_qps`` QPs and draws the payload from
    ``seed``; raises ValueError naming a size the path cannot send."""
    if path not in K.PATH_IDS:
        raise ValueError(f"path={path!r}: allowed {', '.join(K.PATH_IDS)}")
    sizes = np.asarray(sizes_bytes)
    if sizes.ndim != 1 or len(sizes) == 0:
        raise ValueError("sizes_bytes must be a non-empty list of message sizes")
    if not np.issubdtype(sizes.dtype, np.integer):
        raise ValueError(f"sizes_bytes: whole numbers of bytes, got {sizes.dtype} values")
    sizes = sizes.astype(np.int64)
    if (sizes <= 0).any():
        raise ValueError(f"message size {int(sizes[sizes <= 0][0])} bytes: sizes must be "
                         "positive")
    if path == "gpu_push_inline" and sizes.max() > L.MAX_INLINE_BYTES:
        raise ValueError(f"message size {int(sizes.max())} bytes is too large for an inline "
                         f"WQE: at most {L.MAX_INLINE_BYTES}")
    if n_qps < 1:
        raise ValueError(f"n_qps={n_qps}: must be at least 1")
    qp_of = np.arange(len(sizes)) % n_qps
    order = np.argsort(qp_of, kind="stable")
    sizes, qp_of = sizes[order], qp_of[order]
    words = (sizes + 3) // 4
    src_word = np.concatenate([[0], np.cumsum(words)[:-1]]).astype(np.int64)
    payload = np.random.default_rng(seed).integers(0, 2**32, size=int(words.sum()),
                                                   dtype=np.uint32)
    msgs = np.stack([sizes, src_word, src_word * 4], axis=1).astype(np.int64)
    return Workload(msgs=msgs, qp_of=qp_of, payload=payload)
