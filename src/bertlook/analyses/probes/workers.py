"""Cohort groups of the batched probes in forked worker processes (:meth:`BatchedProbes._run
<bertlook.analyses.probes.batch.BatchedProbes._run>`).

The probes' per-step work is many small torch operations driven from Python, so two threads of one process
spend much of their time waiting for each other's GIL: on the demo's probes (two groups of cohorts, 2,000 steps)
each group trained in 23.4 / 24.2 s as its own process and in 35.6 / 38.6 s as a thread beside the other
(docs/development/benchmarks.md). :func:`run_forked` runs every group but the first in a child process forked
from the caller (the features, the parameters and the compiled kernels are shared copy-on-write, nothing is
loaded twice), the first in the caller; each child sends back its result and its cohorts' parameters and last
gradients, which the caller copies into its own cohorts. A child computes exactly what the same group computes
in a thread (one torch thread per group either way), so the numbers do not depend on the choice.

What crosses the pipe are numpy arrays in ``.npz`` form read back with ``allow_pickle=False`` (no pickle), and a
child's error as its message. Linux only (``fork``; elsewhere the caller uses threads: :data:`AVAILABLE`). A child
that dies without answering (killed, out of memory) is an error naming its cohorts and exit code.
"""

from __future__ import annotations

import io
import multiprocessing
import sys
import traceback
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bertlook.errors import BertlookError

#: fork is what makes the children cheap (nothing re-imported or re-read); Linux's default start method
AVAILABLE = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def run_forked(groups: Sequence[list[int]], work: Callable, args: tuple, params: Callable[[list[int]], list]) -> list:
    """``[work(g, *args) for g in groups]``, the first group in this process, each other in a forked child;
    ``params(g)``: group ``g``'s parameter tensors, which each child's values (and ``.grad``) replace here.
    ``work`` returns ``(columns, arrays)``: a list of ints and an array or a list of arrays."""
    ctx = multiprocessing.get_context("fork")
    children = []
    try:
        for g in groups[1:]:
            recv, send = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_child, args=(g, work, args, params, send), daemon=True)
            child.start()
            send.close()
            children.append((g, child, recv))
        results = [work(groups[0], *args)]
        for g, child, recv in children:
            results.append(_receive(g, child, recv, params(g)))
        return results
    finally:
        for _, child, recv in children:
            recv.close()
            if child.is_alive():
                child.kill()
            child.join()


def _child(g: list[int], work: Callable, args: tuple, params: Callable, send) -> None:
    try:
        torch.set_num_threads(1)  # as a thread of the caller's pool would (one torch thread per group)
        cols, arrays = work(g, *args)
        ps = params(g)
        payload = _pack(cols, arrays, [p.detach() for p in ps], [p.grad for p in ps])
    except BaseException as err:  # the caller raises it
        payload = _pack_error(err)
    send.send_bytes(payload)
    send.close()


def _receive(g: list[int], child, recv, ps: list) -> Any:
    try:
        payload = recv.recv_bytes()
    except EOFError:
        child.join()
        raise BertlookError(f"probes: the worker process of cohorts {g} ended without a result "
                            f"(exit code {child.exitcode})") from None
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        if "error" in z.files:
            raise BertlookError(f"probes: the worker process of cohorts {g} failed: {z['error'].item()}")
        cols = z["cols"].tolist()
        arrays = z["array"] if "array" in z.files else [z[f"a{i}"] for i in range(int(z["n_arrays"]))]
        with torch.no_grad():
            for i, p in enumerate(ps):
                p.copy_(torch.from_numpy(z[f"p{i}"]))
                p.grad = torch.from_numpy(z[f"g{i}"]).clone() if f"g{i}" in z.files else None
    return cols, arrays


def _pack(cols: list[int], arrays, values: list, grads: list) -> bytes:
    out: dict[str, np.ndarray] = {"cols": np.asarray(cols, dtype=np.int64)}
    if isinstance(arrays, np.ndarray):
        out["array"] = arrays
    else:
        out["n_arrays"] = np.asarray(len(arrays))
        out.update({f"a{i}": np.asarray(a) for i, a in enumerate(arrays)})
    out.update({f"p{i}": v.numpy() for i, v in enumerate(values)})
    out.update({f"g{i}": g.numpy() for i, g in enumerate(grads) if g is not None})
    buf = io.BytesIO()
    np.savez(buf, **out)
    return buf.getvalue()


def _pack_error(err: BaseException) -> bytes:
    buf = io.BytesIO()
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    np.savez(buf, error=np.asarray(text))
    return buf.getvalue()
