"""The x86 assembly of numba kernels compiled afresh (the cached dispatchers cannot be inspected), and this
machine's CPU flags: the compiled-code checks of tests/test_xlogx.py and tests/test_probe_kernels.py."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""


def compiled_asm(py_func, arg_types: tuple, **options) -> str:
    """``py_func`` compiled with ``njit(nogil=True, **options)`` for ``arg_types``; its assembly."""
    from numba import njit

    kernel = njit(nogil=True, **options)(py_func)
    kernel.compile(arg_types)
    return kernel.inspect_asm(arg_types)
