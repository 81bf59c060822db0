"""Keep freed map-sized blocks in the process heap: glibc's ``mallopt`` for the model steps.

A forward pass at long contexts allocates and frees tensors of ``batch x heads x n^2`` floats for every layer
(the attention scores, their softmax, the float16 copy: 64 MiB each for 16 heads at 1,024 tokens). glibc serves
blocks above its mmap threshold (dynamic, at most 32 MiB on 64-bit) with ``mmap`` and returns them with ``munmap``
when freed, so each such tensor is fresh memory whose pages the kernel faults in and zeroes on first touch: a
random 4-layer x 16-head decoder's eager forward over 40 segments of <= 1,024 tokens took 19.3 s, 12 of them
in the kernel (``sys`` time), and 6.3 s with the two settings below (2026-12-05, 2-core AMD EPYC,
docs/development/benchmarks.md#long-contexts). :func:`reuse_freed_memory` raises the mmap threshold and the trim
threshold to 2 GiB, so freed blocks stay in the heap and are reused by the next layer. Nothing else changes: the
same operations on the same values (the numbers are the same bit for bit); the process's RSS stays at its peak
instead of shrinking between layers (a job's peak RSS, what the sizing requests, is the same).

``BERTLOOK_HOST_MALLOC=system`` leaves glibc's defaults. Another C library (musl, macOS): nothing is changed, and
the reason is returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 2**31 - 1  # blocks up to 2 GiB from the heap; free heap up to 2 GiB kept
ENV = "BERTLOOK_HOST_MALLOC"
_DONE: list[str] = []


def reuse_freed_memory() -> str:
    """Set glibc's mmap and trim thresholds to :data:`KEEP_BYTES` once per process; returns what was done (for the
    log): ``"heap reuse on"``, or why not (``BERTLOOK_HOST_MALLOC=system``, no glibc ``mallopt``)."""
    if _DONE:
        return _DONE[0]
    if os.environ.get(ENV, "").strip().lower() == "system":
        outcome = f"glibc defaults kept ({ENV}=system)"
    else:
        outcome = _mallopt()
    _DONE.append(outcome)
    return outcome


def _mallopt() -> str:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return f"no glibc mallopt in {name or 'the C library'}: the allocator's defaults kept"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, KEEP_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) != 1:
        return "mallopt refused the thresholds: the allocator's defaults kept"
    return "heap reuse on (mmap and trim thresholds 2 GiB)"
