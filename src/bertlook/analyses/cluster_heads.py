"""Jensen-Shannon divergence between heads, 2-D MDS embedding and behaviour labels (paper Fig 6).

:func:`js_divergence_example` / :func:`js_divergence_matrix` (summed over examples), :func:`mds_embedding`,
:func:`behaviour_labels`, :func:`cluster_heads` / :func:`cluster_matrix` (``bertlook cluster-heads``). The
vectorized identity of :func:`js_divergence_example`, with ``xlx(x) = sum x ln x`` over all entries::

    JS_ij = 0.5 * (xlx(P_i) + xlx(P_j) + ln 2 * (sum P_i + sum P_j) - xlx(P_i + P_j))

Only ``xlx(P_i + P_j)`` needs every pair: the default backend ``numba`` computes it with the fused float32
kernel of :mod:`bertlook.analyses.xlogx` (Cephes logarithm, float64 sums); ``numpy`` and ``torch`` are
the references (the same numbers up to float32 rounding).

The reader of the extraction stream, :class:`JsAccumulator`, takes an example layer by layer, on the maps'
device; a causal map's sums skip the keys after the query (they add exactly 0), and ``rows=R`` estimates the
sums from R sampled query rows per example (:mod:`bertlook.analyses.js_device`).

Sharded runs: :func:`js_divergence_partial` (``cluster-heads --out-partial``), :func:`reduce_js_divergence`
(``cluster-heads --partial``; refuses to add exact and estimated partials).

Definitions: docs/definitions.md#jensen-shannon-divergence-between-heads-and-mds
"""

from __future__ import annotations

import inspect
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

# Behaviour labels (released precedence: the later check wins): thresholds shared with Fig 1
from bertlook.analyses.behaviours import (  # noqa: F401 (re-exported)
    BROAD_ENTROPY_THRESHOLD, CLS_THRESHOLD, LABEL_COLUMNS, NEXT_THRESHOLD, PREV_THRESHOLD, PUNCT_THRESHOLD,
    SEP_THRESHOLD,
)
from bertlook.attention.extraction import progress_bar
from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError
from bertlook.naming import head_label
from bertlook.attention.shards import select_examples
from bertlook.analyses.js_device import (
    ESTIMATOR, EntryPlan, OpenExample, copy_triangle, js_matrix_torch, js_terms_torch, to_device,
)
from bertlook.analyses.token_roles import is_causal
from bertlook.pipeline.sharding import partial_metas, same_value

JS_SMOOTHING = 1e-3  # p~ = (1 - s) * p + s / n
DEFAULT_CHUNK_BYTES = 2**20  # one block of pairwise mixtures (x2 buffers): about L2-sized


JS_COLUMNS_FIRST = "head"
CLUSTER_COLUMNS = ["layer", "head", "x", "y", "behavior"]



# --------------------------------------------------------------------------------------------- JS
def js_pair_naive(p: "np.ndarray", q: "np.ndarray", *, smoothing: float = JS_SMOOTHING) -> float:
    """Direct JS divergence of two attention maps ``[..., n]`` (rows = from-tokens), summed over rows.

    Each row is smoothed ``(1 - smoothing) * p + smoothing / n``; float64 numpy; no vectorization over
    pairs (the reference for tests and the benchmark baseline). With ``smoothing=0`` the inputs must
    be strictly positive.
    """
    p = np.asarray(p, dtype=np.float64)  # [..., key_pos]
    q = np.asarray(q, dtype=np.float64)  # [..., key_pos]
    n = p.shape[-1]
    p = (1.0 - smoothing) * p + smoothing / n
    q = (1.0 - smoothing) * q + smoothing / n
    m = 0.5 * (p + q)
    kl_pm = (p * np.log(p / m)).sum()
    kl_qm = (q * np.log(q / m)).sum()
    return float(0.5 * kl_pm + 0.5 * kl_qm)


def _auto_chunk(entries: int, itemsize: int, budget: int = DEFAULT_CHUNK_BYTES) -> int:
    """Heads per block of the numpy / torch references: ``budget`` bytes of ``entries`` per head."""
    return max(1, budget // max(1, entries * itemsize))


def _mixture_xlx_numpy(P, chunk: int, num_threads: int) -> "np.ndarray":  # P: [layer_head, query_pos * key_pos]
    """``out[i, j] = sum (P_i + P_j) ln (P_i + P_j)`` for ``j >= i`` (numpy; zeros below)."""
    K, E = P.shape
    out = np.zeros((K, K), dtype=np.float64)  # [layer_head, layer_head], upper triangle

    def rows(start: int) -> None:
        buf = np.empty(chunk * E, dtype=P.dtype)  # [chunk * query_pos * key_pos]
        lg = np.empty_like(buf)
        for i in range(start, K, num_threads):
            for j0 in range(i, K, chunk):
                j1 = min(K, j0 + chunk)
                S = buf[: (j1 - j0) * E].reshape(j1 - j0, E)  # [chunk, query_pos * key_pos]
                LS = lg[: (j1 - j0) * E].reshape(j1 - j0, E)  # [chunk, query_pos * key_pos]
                np.add(P[i], P[j0:j1], out=S)
                np.log(S, out=LS)
                out[i, j0:j1] = np.einsum("be,be->b", S, LS)  # [chunk]

    if num_threads <= 1:
        rows(0)
    else:  # numpy releases the GIL inside add/log/einsum; threads own disjoint rows of ``out``
        with ThreadPoolExecutor(max_workers=num_threads) as ex:
            for fut in [ex.submit(rows, t) for t in range(num_threads)]:
                fut.result()
    return out


def _mixture_xlx_torch(P, chunk: int) -> "np.ndarray":
    """Same as :func:`_mixture_xlx_numpy` with torch (intra-op threads: ``torch.set_num_threads``)."""
    import torch  # lazy: the torch backend only (the cluster_heads job gathers partial sums: no torch, ~2 s less)

    T = torch.from_numpy(P)  # [layer_head, query_pos * key_pos]
    K, E = T.shape
    out = np.zeros((K, K), dtype=np.float64)  # [layer_head, layer_head], upper triangle
    buf = torch.empty(chunk * E, dtype=T.dtype)  # [chunk * query_pos * key_pos]
    lg = torch.empty_like(buf)
    for i in range(K):
        for j0 in range(i, K, chunk):
            j1 = min(K, j0 + chunk)
            S = buf[: (j1 - j0) * E].view(j1 - j0, E)  # [chunk, query_pos * key_pos]
            LS = lg[: (j1 - j0) * E].view(j1 - j0, E)  # [chunk, query_pos * key_pos]
            torch.add(T[i], T[j0:j1], out=S)
            torch.log(S, out=LS)
            LS.mul_(S)
            out[i, j0:j1] = LS.sum(dim=1, dtype=torch.float64).numpy()  # [chunk]
    return out


BACKENDS = ("numba", "numpy", "torch")
DEFAULT_BACKEND = "numba"
_FALLBACK_WARNED = []  # the numba -> torch fallback warns once per process


def _numba_kernels():
    """:mod:`bertlook.analyses.xlogx`, or ``None`` (one line on stderr) when numba cannot be imported."""
    try:
        from bertlook.analyses import xlogx  # lazy: numba is optional (ImportError: the numpy form)
    except ImportError as err:
        if not _FALLBACK_WARNED:
            _FALLBACK_WARNED.append(True)
            print(f"bertlook: JS divergence backend numba unavailable ({err}); using torch", file=sys.stderr)
        return None
    return xlogx


def _mixture_xlx_torch_threads(P, chunk: int, threads: int) -> "np.ndarray":
    """:func:`_mixture_xlx_torch` with ``threads`` intra-op threads for the call."""
    import torch  # lazy: see _mixture_xlx_torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _mixture_xlx_torch(P, chunk)  # [layer_head, layer_head]
    finally:
        torch.set_num_threads(old)


def js_divergence_example(
    attn: "np.ndarray",
    *,
    chunk: int | None = None,
    dtype: str = "float32",
    backend: str = DEFAULT_BACKEND,
    num_threads: int = 1,
) -> "np.ndarray":
    """JS divergence matrix ``[K, K]`` (float64) of one example ``attn[layers, heads, n, n]``.

    All pairs are computed at once from the identity in the module docstring. ``backend``:
    ``numba`` (default): one fused pass per pair (:func:`bertlook.analyses.xlogx.mixture_xlx`, 2.8x numpy and
    6x torch on one core, scripts/bench_js.py; torch with a warning when numba cannot be imported); ``numpy``
    or ``torch`` (references): one head ``i`` against a block of ``chunk`` heads ``j >= i`` per step
    (default: a block of about :data:`DEFAULT_CHUNK_BYTES`, so the scratch memory stays cache-sized
    whatever ``n`` is; numba does not use ``chunk``). ``dtype``: compute type (``float32`` or
    ``float64``); sums are returned in float64. ``num_threads``: worker threads over rows ``i``
    (numba, numpy), or torch's intra-op threads for the call.
    """
    _check_options(dtype, backend)
    a = np.asarray(attn)
    if a.ndim != 4 or a.shape[2] != a.shape[3]:
        raise BertlookError(f"attention must have shape [layers, heads, n, n], got {list(a.shape)}")
    L, H, n, _ = a.shape  # a: [layer, head, query_pos, key_pos]
    K = L * H
    # a fresh array: the smoothing below works in place and must not touch the caller's data
    P = np.array(a, dtype=dtype, copy=True).reshape(K, n * n)  # [layer_head, query_pos * key_pos]
    _smooth(P, n)
    return _js_from_terms([(1.0, *_js_terms(P, chunk=chunk, backend=backend, num_threads=num_threads))])


def _check_options(dtype: str, backend: str) -> None:
    if dtype not in ("float32", "float64"):
        raise BertlookError(f"dtype must be float32 or float64, got {dtype!r}")
    if backend not in BACKENDS:
        raise BertlookError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def _smooth(P: "np.ndarray", n: int) -> None:
    """``P = (1 - s) P + s / n`` in place (float32 or float64 numpy; the same operations for every caller)."""
    P *= 1.0 - JS_SMOOTHING
    P += JS_SMOOTHING / n


def _js_terms(P: "np.ndarray", *, chunk: int | None = None, backend: str = DEFAULT_BACKEND,
              num_threads: int = 1) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """``(xlx[K], tot[K], mix[K, K])`` of smoothed entries ``P[K, E]`` (the identity of the module docstring):
    ``sum P ln P`` and ``sum P`` per head, ``sum (P_i + P_j) ln (P_i + P_j)`` for ``j >= i``; float64."""
    c = max(1, min(P.shape[0], int(chunk) if chunk else _auto_chunk(P.shape[1], P.itemsize)))
    threads = max(1, int(num_threads or 1))
    kernels = _numba_kernels() if backend == "numba" else None
    if kernels is not None:  # the per-head sums with the same logarithm as the pairs
        xlx, tot = kernels.row_xlx(P)  # [layer_head], [layer_head]
        return xlx, tot, kernels.mixture_xlx(P, threads)  # [layer_head, layer_head]
    xlx = np.einsum("ke,ke->k", P, np.log(P), dtype=np.float64)  # [layer_head]: sum p ln p per head
    tot = P.sum(axis=1, dtype=np.float64)  # [layer_head]
    if backend == "numpy":
        return xlx, tot, _mixture_xlx_numpy(P, c, threads)  # [layer_head, layer_head]
    return xlx, tot, _mixture_xlx_torch_threads(P, c, threads)  # [layer_head, layer_head]


def _js_from_terms(terms) -> "np.ndarray":
    """The JS matrix ``[K, K]`` of ``[(weight, xlx, tot, mix), ...]`` (groups of entries of equal weight,
    :class:`bertlook.analyses.js_device.EntryPlan`): symmetric, zero diagonal, negatives clipped."""
    raw = None
    for w, xlx, tot, mix in terms:
        base = xlx + math.log(2.0) * tot  # [layer_head]
        part = 0.5 * (base[:, None] + base[None, :] - mix)  # [layer_head, layer_head], upper triangle
        if w != 1.0:
            part *= w
        raw = part if raw is None else raw + part
    js = np.triu(raw, k=1)  # [layer_head, layer_head]
    js = js + js.T
    np.maximum(js, 0.0, out=js)  # rounding can leave tiny negatives for (near-)identical heads
    return js


PARTIAL_KIND = "js-divergence"


def js_divergence_sum(
    store: "AttentionStore",
    *,
    max_examples: int | None = None,
    segments=None,
    chunk: int | None = None,
    dtype: str = "float32",
    backend: str = DEFAULT_BACKEND,
    num_threads: int = 1,
    progress: bool = False,
    causal: bool | None = None,
    rows: int | None = None,
    seed: int = 0,
) -> tuple["np.ndarray", int]:
    """``(sum of the per-example JS matrices [K, K], number of examples)`` over the selected examples.

    Selection (:func:`bertlook.attention.shards.select_examples`): all examples; with ``max_examples`` the
    first N segments of the ``segments`` file, or without it the first N examples of the store. No
    example selected gives a zero matrix and 0. ``progress``: a progress bar (ETA) on stderr.
    The maps are not checked here: :meth:`AttentionStore.get <bertlook.attention.store.AttentionStore.get>`
    already refuses a map with a non-finite or negative value or a row that does not sum to 1, and
    the store's index refuses an example without tokens (``n >= 1``).
    """
    acc = _store_accumulator(store, max_examples=max_examples, segments=segments, chunk=chunk, dtype=dtype,
                             backend=backend, num_threads=num_threads, progress=progress, causal=causal, rows=rows,
                             seed=seed)
    return acc.total, acc.n_examples


def _store_accumulator(store: "AttentionStore", *, max_examples, segments, progress, causal, **kwargs) -> "JsAccumulator":
    """A :class:`JsAccumulator` fed the selected examples of ``store`` (``causal`` None: the store's model's)."""
    causal = is_causal(store.meta) if causal is None else causal
    acc = JsAccumulator(store.num_layers, store.num_heads, where=store.path, causal=causal, **kwargs)
    for k in progress_bar(select_examples(store, max_examples, segments), desc="js", unit="ex", enabled=progress):
        acc.add(store.records[k], store.get(k))
    return acc


def js_divergence_matrix(store: "AttentionStore", **kwargs) -> "np.ndarray":
    """Sum over (the first ``max_examples``) examples of the per-example JS matrices: ``[K, K]``.

    Head ``k = layer * num_heads + head`` (0-indexed); float64, symmetric, zero diagonal. One
    example is in memory at a time. ``chunk``, ``dtype``, ``backend``, ``num_threads``: see
    :func:`js_divergence_example`; keyword arguments (``segments``, ...): those of :func:`js_divergence_sum`.
    """
    total, used = js_divergence_sum(store, **kwargs)
    if used == 0:
        raise BertlookError(f"{store.path}: no examples to compute JS divergences on")
    return total


def js_divergence_partial(store: "AttentionStore", **kwargs) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
    """``(meta, arrays)`` of one store for a sharded run: ``arrays["js_sum"]`` (the summed matrix) and
    ``meta`` (layout, ``n_examples`` used, ``n_examples_in_store``, ``max_examples``). Keyword
    arguments: those of :func:`js_divergence_sum`."""
    kwargs = {"max_examples": None, "segments": None, "progress": False, "causal": None, **kwargs}
    acc = _store_accumulator(store, **kwargs)
    return acc.partial(n_examples_in_store=len(store), max_examples=kwargs["max_examples"])


def reduce_js_divergence(partials, *, where=None) -> tuple["np.ndarray", dict[str, Any]]:
    """Add partial JS sums (:func:`js_divergence_partial`, shard order) -> ``(matrix, info)``.

    One partial gives its matrix exactly (added to zeros). ``info``: ``num_layers``, ``num_heads``,
    ``n_examples`` (used), ``n_examples_in_store``. No example at all is an error.
    """
    where, metas = partial_metas(partials, where, "JS divergences")
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    H = same_value([m["num_heads"] for m in metas], "num_heads", where)
    same_value([m.get("max_examples") for m in metas], "max_examples", where)
    estimator = same_value([m.get("estimator", "exact") for m in metas], "JS estimator", where)
    rows = same_value([m.get("rows") for m in metas], "JS estimator rows", where)
    K = L * H
    total = np.zeros((K, K), dtype=np.float64)  # [layer_head, layer_head]
    for (meta, arrays), w in zip(partials, where):
        part = np.asarray(arrays["js_sum"], dtype=np.float64)  # [layer_head, layer_head]
        if part.shape != (K, K):
            raise BertlookError(f"{w}: JS partial of shape {list(part.shape)}, expected {[K, K]}")
        total += part
    used = sum(int(m["n_examples"]) for m in metas)
    if used == 0:
        where_txt = where[0] if len(where) == 1 else ", ".join(map(str, where))
        raise BertlookError(f"{where_txt}: no examples to compute JS divergences on")
    return total, {"num_layers": L, "num_heads": H, "n_examples": used, "estimator": estimator, "rows": rows,
                   "n_examples_in_store": sum(int(m["n_examples_in_store"]) for m in metas)}


# -------------------------------------------------------------------------------------------- MDS
def mds_embedding(
    D: "np.ndarray", *, seed: int, n_init: int = 4, max_iter: int = 300, eps: float = 1e-9
) -> "np.ndarray":
    """Metric MDS (scikit-learn SMACOF) of a precomputed dissimilarity matrix -> ``[K, 2]``.

    Random initialisation seeded with ``seed``, ``n_init`` restarts, single process: deterministic.
    Parameter names follow the installed scikit-learn (1.8+: ``metric_mds`` / ``metric="precomputed"``;
    older: ``metric=True`` / ``dissimilarity="precomputed"``), all passed explicitly.
    """
    from sklearn.manifold import MDS  # lazy: only the cluster_heads job embeds (sklearn.manifold ~1 s)

    if int(n_init) < 1 or int(max_iter) < 1 or not float(eps) >= 0:
        raise BertlookError(f"MDS needs n_init >= 1, max_iter >= 1, eps >= 0 (got {n_init}, {max_iter}, {eps})")
    D = np.asarray(D, dtype=np.float64)  # [layer_head, layer_head]
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise BertlookError(f"MDS needs a square dissimilarity matrix, got shape {list(D.shape)}")
    if not np.isfinite(D).all():
        raise BertlookError("MDS dissimilarity matrix has non-finite values")
    if not np.allclose(D, D.T, rtol=1e-9, atol=1e-12):
        raise BertlookError("MDS dissimilarity matrix is not symmetric")
    D = 0.5 * (D + D.T)
    params = inspect.signature(MDS).parameters
    kwargs: dict[str, Any] = {
        "n_components": 2,
        "n_init": int(n_init),
        "max_iter": int(max_iter),
        "eps": float(eps),
        "n_jobs": 1,
        "random_state": int(seed),
        "verbose": 0,
    }
    if "metric_mds" in params:
        kwargs.update(metric_mds=True, metric="precomputed")
    else:  # scikit-learn < 1.8
        kwargs.update(metric=True, dissimilarity="precomputed")
    if "init" in params:
        kwargs["init"] = "random"
    if "normalized_stress" in params:
        kwargs["normalized_stress"] = False
    return np.asarray(MDS(**kwargs).fit_transform(D), dtype=np.float64)  # [layer_head, 2]


# ------------------------------------------------------------------------------------- behaviours
def behaviour_labels(stats_df: "pd.DataFrame") -> list[str]:
    """One label per row of ``stats_df`` (columns next, prev, entropy, cls, sep, punct).

    Released precedence, later check wins: other < next token < previous token < broad < [CLS] <
    [SEP] < punctuation.
    """
    missing = [c for c in LABEL_COLUMNS if c not in stats_df.columns]
    if missing:
        raise BertlookError(f"statistics table lacks column(s) {', '.join(missing)}")
    labels = []
    for row in stats_df[list(LABEL_COLUMNS)].itertuples(index=False):
        label = "other"
        if row.next > NEXT_THRESHOLD:
            label = "next token"
        if row.prev > PREV_THRESHOLD:
            label = "previous token"
        if row.entropy > BROAD_ENTROPY_THRESHOLD:
            label = "broad"
        if row.cls > CLS_THRESHOLD:
            label = "[CLS]"
        if row.sep > SEP_THRESHOLD:
            label = "[SEP]"
        if row.punct > PUNCT_THRESHOLD:
            label = "punctuation"
        labels.append(label)
    return labels


def _align_stats(stats_df: "pd.DataFrame", num_layers: int, num_heads: int) -> "pd.DataFrame":
    """Rows of ``stats_df`` in head order (layer-major, 1-indexed); error on missing/duplicate heads."""
    for c in ("layer", "head"):
        if c not in stats_df.columns:
            raise BertlookError(f"statistics table lacks column {c!r}")
    try:
        keys = stats_df[["layer", "head"]].astype(int)
    except (TypeError, ValueError) as err:
        raise BertlookError(f"statistics table: non-integer layer/head: {err}") from None
    dup = keys.duplicated()
    if dup.any():
        r = keys[dup].iloc[0]
        raise BertlookError(f"statistics table: head {r['layer']}-{r['head']} appears more than once")
    df = stats_df.copy()
    df[["layer", "head"]] = keys
    df = df.set_index(["layer", "head"])
    want = pd.MultiIndex.from_product(
        [range(1, num_layers + 1), range(1, num_heads + 1)], names=["layer", "head"]
    )
    missing = want.difference(df.index)
    if len(missing):
        lab = ", ".join(f"{l}-{h}" for l, h in list(missing)[:5])
        raise BertlookError(
            f"statistics table lacks {len(missing)} head(s) of the {num_layers}x{num_heads} store (e.g. {lab})"
        )
    extra = df.index.difference(want)
    if len(extra):
        lab = ", ".join(f"{l}-{h}" for l, h in list(extra)[:5])
        raise BertlookError(f"statistics table has head(s) not in the {num_layers}x{num_heads} store: {lab}")
    return df.loc[want].reset_index()


def cluster_heads(
    store: "AttentionStore",
    stats_df: "pd.DataFrame",
    *,
    seed: int,
    max_examples: int | None = None,
    n_init: int = 4,
    max_iter: int = 300,
    eps: float = 1e-9,
    chunk: int | None = None,
    num_threads: int = 1,
) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """JS divergence table and 2-D MDS embedding with behaviour labels.

    Returns ``(js_df, clusters_df)``: ``js_df`` is the ``K x K`` matrix with a first column ``head``
    and column names the 1-indexed "L-H" labels; ``clusters_df`` has columns ``layer,head,x,y,behavior``.
    """
    L, H = store.num_layers, store.num_heads
    _align_stats(stats_df, L, H)
    D = js_divergence_matrix(store, max_examples=max_examples, chunk=chunk, num_threads=num_threads)
    return cluster_matrix(D, stats_df, L, H, seed=seed, n_init=n_init, max_iter=max_iter, eps=eps)


def cluster_matrix(
    D: "np.ndarray",
    stats_df: "pd.DataFrame",
    num_layers: int,
    num_heads: int,
    *,
    seed: int,
    n_init: int = 4,
    max_iter: int = 300,
    eps: float = 1e-9,
) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """:func:`cluster_heads` from an already summed JS matrix ``D`` (e.g. reduced over shards)."""
    L, H = num_layers, num_heads
    stats = _align_stats(stats_df, L, H)
    xy = mds_embedding(D, seed=seed, n_init=n_init, max_iter=max_iter, eps=eps)
    labels = [head_label(l, h) for l in range(L) for h in range(H)]
    js_df = pd.DataFrame(D, columns=labels)  # [layer_head, layer_head]
    js_df.insert(0, JS_COLUMNS_FIRST, labels)
    clusters_df = pd.DataFrame(
        {
            "layer": stats["layer"].to_numpy(),
            "head": stats["head"].to_numpy(),
            "x": xy[:, 0],
            "y": xy[:, 1],
            "behavior": behaviour_labels(stats),
        },
        columns=CLUSTER_COLUMNS,
    )
    return js_df, clusters_df


class JsAccumulator:
    """The summed JS matrix, one example at a time, layer by layer: the per-example work of
    :func:`js_divergence_sum`, also a reader of the extraction stream. :meth:`partial` gives ``(meta, arrays)``
    as :func:`js_divergence_partial`.

    The stream calls ``add_layer(record, layer, a)`` for ``layer = 0 .. L-1`` (``a[head, n, n]``: a torch
    tensor on the model's device, or a numpy array), then ``end_example(record)``; :meth:`add` (a whole
    ``attn[L, H, n, n]``) does the same. Pairs cross layers, so the kept entries of every layer
    (:class:`bertlook.analyses.js_device.EntryPlan`) wait for ``end_example``: on the host (numpy arrays, CPU
    tensors) as float32 smoothed entries for :func:`_js_terms` (the numba kernel by default, bit for bit
    :func:`js_divergence_example` on an encoder's maps), on another device (or ``device_kernel=True``) as
    float16 for :func:`bertlook.analyses.js_device.js_terms_torch`, the sum kept on the device until
    :meth:`partial` (no synchronisation per example).

    ``causal`` (a decoder's maps): only the visible triangle is read (exact: the skipped entries add 0).
    ``rows`` (None: exact, the paper's definition): the stratified estimator of R sampled query rows per
    example, seeded with ``seed`` and the example's id (:mod:`bertlook.analyses.js_device`).
    Other keyword arguments: :func:`js_divergence_example`'s ``chunk``, ``dtype``, ``backend``, ``num_threads``.
    """

    def __init__(self, num_layers: int, num_heads: int, *, where: Any = "attention", causal: bool = False,
                 rows: int | None = None, seed: int = 0, device_kernel: bool | None = None, **kwargs: Any) -> None:
        self.num_layers, self.num_heads, self.where = int(num_layers), int(num_heads), where
        self.causal, self.seed, self.device_kernel = bool(causal), int(seed), device_kernel
        if rows is not None and int(rows) < 1:
            raise BertlookError(f"JS estimator: rows must be >= 1, got {rows}")
        self.rows = None if rows is None else int(rows)
        self.kwargs = kwargs  # js_divergence_example's chunk, dtype, backend, num_threads
        _check_options(kwargs.get("dtype", "float32"), kwargs.get("backend", DEFAULT_BACKEND))
        K = self.num_layers * self.num_heads
        self._host_total = np.zeros((K, K), dtype=np.float64)  # [layer_head, layer_head]
        self._dev_totals: dict[Any, Any] = {}  # device -> float64 tensor [layer_head, layer_head]
        self.n_examples = 0
        self._open: dict[int, OpenExample] = {}  # the examples between their first layer and end_example

    @property
    def total(self) -> "np.ndarray":
        """The summed matrix so far on the host (float64 ``[K, K]``; copies the device sums: synchronises)."""
        out = self._host_total.copy()
        for t in self._dev_totals.values():
            out += t.cpu().numpy()
        return out

    def add(self, record: dict[str, Any], attn: "np.ndarray") -> None:
        """One example ``attn[L, H, n, n]`` (numpy): :meth:`add_layer` for each layer, then :meth:`end_example`."""
        a = np.asarray(attn)  # [layer, head, query_pos, key_pos]
        if a.ndim != 4 or a.shape[0] != self.num_layers:
            raise BertlookError(f"{self.where}: attention must have shape [{self.num_layers}, heads, n, n], "
                                f"got {list(a.shape)}")
        for layer in range(self.num_layers):
            self.add_layer(record, layer, a[layer])
        self.end_example(record)

    def add_layer(self, record: dict[str, Any], layer: int, a: Any) -> None:
        """Layer ``layer`` of an example: ``a[head, n, n]`` (torch tensor or numpy array). The examples of a batch
        may be open at once (the stream hands every example layer 0, then layer 1, ...): each one's layers are kept
        by the record (its object), in order, until its :meth:`end_example`."""
        ex = self._open.get(id(record))
        expected = 0 if ex is None else ex.next_layer
        if layer != expected:
            raise BertlookError(f"{self.where}: JS reader got layer {layer} of example {record.get('id')!r}, "
                                f"expected {expected}")
        shape = tuple(a.shape)
        if len(shape) != 3 or shape[0] != self.num_heads or shape[1] != shape[2] or shape[1] < 1:
            raise BertlookError(f"{self.where}: a layer's maps must have shape [{self.num_heads}, n, n], "
                                f"got {list(shape)}")
        if ex is None:
            ex = self._open[id(record)] = self._start(record, shape[1], a)
        elif shape[1] != ex.plan.n:
            raise BertlookError(f"{self.where}: layer {layer} has {shape[1]} tokens, layer 0 had {ex.plan.n}")
        if ex.device is None:
            self._host_layer(ex, layer, a)
        else:
            self._device_layer(ex, a)
        ex.next_layer += 1

    def _start(self, record: dict[str, Any], n: int, a: Any) -> "OpenExample":
        if self.rows is not None and "id" not in record:
            raise BertlookError(f"{self.where}: the JS estimator needs an example id (record without 'id')")
        ex = OpenExample(plan=EntryPlan(n, causal=self.causal, rows=self.rows, seed=self.seed,
                                         example_id=record.get("id")))
        plan = ex.plan
        on_host = isinstance(a, np.ndarray) or (a.device.type == "cpu" and not self.device_kernel)
        ex.device = None if on_host else a.device
        K, dtype = self.num_layers * self.num_heads, self.kwargs.get("dtype", "float32")
        if on_host:
            ex.parts = [np.empty((K, n * len(plan.q) if idx is None else len(idx)), dtype=dtype)
                        for _, idx in plan.groups]  # per group: [layer_head, entry]
        else:
            ex.parts = []  # per layer: float16 [head, entry]
            ex.q_dev = None if plan.all_rows else to_device(plan.q, a.device)
            ex.idx_dev = [None if idx is None else to_device(idx, a.device) for _, idx in plan.groups]
        return ex

    def _host_layer(self, ex: "OpenExample", layer: int, a: Any) -> None:
        x = a if isinstance(a, np.ndarray) else a.detach().contiguous().numpy()  # [head, query_pos, key_pos]
        if x.dtype not in (np.float16, np.float32):
            x = x.astype(np.float32)  # as js_divergence_example's callers: float32 maps, then ``dtype``
        plan, H = ex.plan, self.num_heads
        if not plan.all_rows:
            x = x[:, plan.q, :]  # [head, rows, key_pos]
        flat = x.reshape(H, -1)  # [head, rows * key_pos]
        for (_, idx), buf in zip(plan.groups, ex.parts):
            dst = buf[layer * H:(layer + 1) * H]  # [head, entry]
            if idx is None:
                dst[...] = flat
            elif plan.all_rows:  # the visible triangle: row slices copy faster than a gather (28 -> 17 ms, n 1,024)
                copy_triangle(x, dst)
            else:
                dst[...] = flat[:, idx]
            _smooth(dst, plan.n)

    def _device_layer(self, ex: "OpenExample", a: Any) -> None:
        import torch  # lazy: the device path only

        x = a if ex.q_dev is None else a.index_select(1, ex.q_dev)  # [head, rows, key_pos]
        flat = x.reshape(self.num_heads, -1)  # [head, rows * key_pos]
        parts = [flat if idx is None else flat.index_select(1, idx) for idx in ex.idx_dev]
        ex.parts.append(torch.cat(parts, dim=1).to(torch.float16))  # a copy: [head, entry]

    def end_example(self, record: dict[str, Any]) -> None:
        """The example's JS matrix, added to the sum (after its last layer)."""
        ex = self._open.pop(id(record), None)
        if ex is None or ex.next_layer != self.num_layers:
            raise BertlookError(f"{self.where}: JS reader: end_example of example {record.get('id')!r} after "
                                f"{0 if ex is None else ex.next_layer} of {self.num_layers} layers")
        plan, parts = ex.plan, ex.parts
        if ex.device is None:
            opts = {k: v for k, v in self.kwargs.items() if k != "dtype"}
            self._host_total += _js_from_terms([(w, *_js_terms(P, **opts)) for (w, _), P in zip(plan.groups, parts)])
        else:
            self._device_example(plan, parts)
        self.n_examples += 1

    def _device_example(self, plan, parts) -> None:
        import torch  # lazy: the device path only

        dtype = getattr(torch, self.kwargs.get("dtype", "float32"))
        P = torch.cat(parts, dim=0).to(dtype)  # [layer_head, entry]
        P.mul_(1.0 - JS_SMOOTHING).add_(JS_SMOOTHING / plan.n)
        w = plan.entry_weight  # [entry] or None
        w = None if w is None else to_device(w.astype(self.kwargs.get("dtype", "float32")), P.device)
        js = js_matrix_torch(*js_terms_torch(P, w))  # [layer_head, layer_head], float64 on the device
        key = str(P.device)
        self._dev_totals[key] = js if key not in self._dev_totals else self._dev_totals[key].add_(js)

    def meta(self) -> dict[str, Any]:
        """The estimator's keys of a partial's meta (none when exact: the format of exact partials is unchanged)."""
        if self.rows is None:
            return {}
        return {"estimator": ESTIMATOR, "rows": self.rows, "seed": self.seed}

    def partial(self, *, n_examples_in_store: int, max_examples: int | None = None):
        meta = {"attention": str(self.where), "num_layers": self.num_layers, "num_heads": self.num_heads,
                "n_examples": self.n_examples, "n_examples_in_store": int(n_examples_in_store),
                "max_examples": max_examples, **self.meta()}
        return meta, {"js_sum": self.total}
