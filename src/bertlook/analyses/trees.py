"""Spanning-tree decoders shared by the probes (Table 3's MST column) and the single-head trees (tree-heads).

* :func:`chu_liu_edmonds`: maximum spanning arborescence rooted at node 0, one cycle contracted per
  recursion (the probes' decoder since issue 4; kept as it is so that Table 3's MST numbers do not move).
* :func:`chu_liu_edmonds_multi`: the same arborescence, every cycle of the greedy graph contracted at
  once per level (Edmonds' original formulation). On attention maps, whose greedy graphs hold many
  cycles, it needs a few levels where :func:`chu_liu_edmonds` needs one per cycle: the tree-heads step
  decodes every head of every sentence with it (``scripts/bench_tree_heads.py`` measures both).
* :func:`gold_root_scores`: a dependent x head word-score matrix turned into a CLE input whose only
  tree root is the gold root word (Htut et al. 2019's "gold root" decoding).
* :func:`max_spanning_tree_batch`: undirected maximum spanning trees of many symmetric matrices at
  once (Prim's algorithm, vectorised over the matrices).

Definitions: docs/definitions.md#single-head-trees-tree-heads
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


# ================================================================================ Chu-Liu-Edmonds
def _find_cycle(heads: np.ndarray) -> list[int] | None:
    n = len(heads)
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current path, 2 done
    for start in range(1, n):
        if state[start]:
            continue
        path = []
        v = start
        while v > 0 and state[v] == 0:
            state[v] = 1
            path.append(v)
            v = int(heads[v])
        if v > 0 and state[v] == 1:
            return path[path.index(v):]
        for p in path:
            state[p] = 2
    return None


def _cle(s: np.ndarray) -> np.ndarray:
    n = s.shape[0]
    heads = np.full(n, -1, dtype=np.int64)
    heads[1:] = s[1:].argmax(axis=1)
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    cyc = np.array(cycle, dtype=np.int64)
    in_cycle = np.zeros(n, dtype=bool)
    in_cycle[cyc] = True
    rest = np.flatnonzero(~in_cycle)  # node 0 is never on a cycle, so rest[0] == 0
    m = len(rest)
    new = np.full((m + 1, m + 1), -np.inf)
    new[:m, :m] = s[np.ix_(rest, rest)]
    out_sub = s[np.ix_(rest, cyc)]  # a rest word taking its head inside the cycle
    best_out = out_sub.argmax(axis=1)
    new[:m, m] = out_sub.max(axis=1)
    with np.errstate(invalid="ignore"):
        into = s[np.ix_(cyc, rest)] - s[cyc, heads[cyc]][:, None]  # breaking the cycle at v
    best_in = into.argmax(axis=0)
    new[m, :m] = into.max(axis=0)
    new[0, :] = -np.inf
    new[m, m] = -np.inf
    sub = _cle(new)
    out = heads.copy()
    for u in range(1, m):
        h = int(sub[u])
        out[rest[u]] = cyc[best_out[u]] if h == m else rest[h]
    h = int(sub[m])
    out[cyc[best_in[h]]] = rest[h]
    return out


def _prepare(scores: np.ndarray) -> np.ndarray:
    s = np.array(scores, dtype=np.float64)  # [node, node]: dependent, head; node 0 = ROOT
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"scores must be square, got shape {list(s.shape)}")
    np.fill_diagonal(s, -np.inf)
    s[0, :] = -np.inf
    return s


def chu_liu_edmonds(scores: np.ndarray) -> np.ndarray:
    """Maximum spanning arborescence rooted at node 0.

    ``scores[d, h]`` = score of head ``h`` for dependent ``d`` (``[n, n]``, node 0 = ROOT, row 0 and
    the diagonal ignored). Returns ``heads`` (``[n]``, ``heads[0] = -1``) maximising the summed scores
    of a tree; ROOT may have several children. ``-inf`` marks forbidden edges.
    """
    s = _prepare(scores)  # [node, node]
    if s.shape[0] == 1:
        return np.array([-1], dtype=np.int64)
    return _cle(s)


def _rows_gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``out[b, j] = a[b, idx[b, j]]`` for 2-D ``a`` and ``idx`` of the same number of rows (what
    ``np.take_along_axis(a, idx, axis=1)`` does, as one flat gather: a tenth of its overhead)."""
    offs = (np.arange(a.shape[0]) * a.shape[1])[:, None]  # [batch, 1]
    return a.ravel()[idx + offs]


def _cycle_labels(g: np.ndarray) -> np.ndarray:
    """For each row of ``g`` (``[B, n]``), the functional graph ``v -> g[b, v]`` (``g[b, 0] = 0``): the
    smallest node of each node's cycle for the nodes on a cycle, -1 elsewhere (node 0 is never on
    one). Pointer doubling: ``2 ceil(log2 n)`` gathers, no loop over nodes."""
    B, n = g.shape
    offs = (np.arange(B) * n)[:, None]  # [batch, 1]
    f = g.copy()  # [batch, node]
    steps = 1
    while steps < n:  # f = g^(2^k), 2^k >= n: every node has reached its cycle (or ROOT)
        f = f.ravel()[f + offs]  # [batch, node]
        steps *= 2
    on = np.zeros(B * n, dtype=bool)  # [batch*node]
    on[(f + offs).ravel()] = True  # the image of g^n: the nodes on cycles (and ROOT)
    on = on.reshape(B, n)  # [batch, node]
    on[:, 0] = False
    label = np.where(on, np.arange(n)[None, :], n)  # [batch, node]
    h = np.where(on, g, 0) + offs  # [batch, node]: one step along the cycle (flat)
    steps = 1
    while steps < n:  # label = min over h^j(v), j < 2^k
        label = np.minimum(label, label.ravel()[h])  # [batch, node]
        h = h.ravel()[h]  # [batch, node]: indices into the flat array, offsets kept
        steps *= 2
    return np.where(on, label, -1)  # [batch, node]


def chu_liu_edmonds_batch(scores: np.ndarray, *, compiled: bool = True) -> np.ndarray:
    """:func:`chu_liu_edmonds` of ``B`` matrices of the same size at once (``[B, n, n]`` -> ``[B, n]``).

    The same input convention (``scores[b, d, h]``, node 0 = ROOT, row 0 and the diagonal ignored,
    ``-inf`` forbidden; every node needs a finite edge to some head) and the same maximal summed score;
    the tree is the same unless two trees tie. Edmonds' contraction done in place on dense matrices and
    vectorised over the batch: each pass finds the greedy graph's cycles of every matrix (pointer
    doubling) and contracts one cycle per matrix (the one holding its smallest node on a cycle) into
    that node, updating only the representative's row and column (``O(B n |cycle|)`` per pass) and
    remembering which original edge each contracted score stands for; the tree is unfolded from the
    last contraction back. Attention maps need about one pass per word (their cycles appear one after
    another), but each pass costs a few array operations for the whole batch, where
    :func:`chu_liu_edmonds` recurses once per cycle per matrix (``scripts/bench_tree_heads.py``).
    ``compiled`` (default): the same contractions, compiled per matrix (:mod:`bertlook.analyses.trees_numba`;
    the same trees, ties included), when numba is installed.
    """
    s = np.array(scores, dtype=np.float64)  # [batch, node, node]: dependent, head; node 0 = ROOT
    if s.ndim != 3 or s.shape[1] != s.shape[2]:
        raise ValueError(f"scores must be [B, n, n], got shape {list(s.shape)}")
    B, n, _ = s.shape
    if n == 1 or B == 0:
        return np.full((B, n), -1, dtype=np.int64)
    ar = np.arange(n)  # [node]
    s[:, ar, ar] = -np.inf
    s[:, 0, :] = -np.inf
    kernel = None if not compiled else _compiled()
    if kernel is not None:
        heads = np.empty((B, n), dtype=np.int64)  # [batch, node]
        kernel.cle_batch(s, heads)
        return heads
    return _cle_batch_numpy(s)


def _compiled():
    """:mod:`bertlook.analyses.trees_numba`, or None without numba (the numpy form then runs, same trees)."""
    try:
        from bertlook.analyses import trees_numba  # lazy: numba is optional (ImportError: the numpy form)
    except ImportError:
        return None
    return trees_numba


def _cle_batch_numpy(s: np.ndarray) -> np.ndarray:
    """The numpy form of :func:`chu_liu_edmonds_batch` on prepared scores ``s`` (modified)."""
    B, n, _ = s.shape
    ar = np.arange(n)  # [node]
    od = np.broadcast_to(ar[None, :, None], (B, n, n)).astype(np.int32)  # [batch, node, node]: original dependent
    oh = np.broadcast_to(ar[None, None, :], (B, n, n)).astype(np.int32)  # [batch, node, node]: original head
    active = np.ones((B, n), dtype=bool)  # [batch, node]
    g = s.argmax(axis=2)  # [batch, node]: greedy heads
    g[:, 0] = 0
    rep = np.broadcast_to(ar[None, :], (B, n)).copy()  # [batch, node]: the node holding each original node
    log = []
    alive = np.arange(B)  # [todo]: the matrices whose greedy graph had a cycle at the last pass
    while len(alive):
        lab_a = _cycle_labels(g[alive])  # [todo, node]
        has = (lab_a >= 0).any(axis=1)  # [todo]
        bs = alive[has]  # [todo]: a matrix without a cycle is done (its greedy heads never change again)
        alive = bs
        if not len(bs):
            break
        t = len(bs)
        tt = np.arange(t)  # [todo]
        lab_t = lab_a[has]  # [todo, node]
        c = np.where(lab_t >= 0, lab_t, n).min(axis=1)  # [todo]: the cycle contracted, into its smallest node
        member = lab_t == c[:, None]  # [todo, node]
        size = member.sum(axis=1)  # [todo]
        cmax = int(size.max())
        first = np.argsort(~member, axis=1, kind="stable")[:, :cmax]  # [todo, member]: members first, ascending
        idx = np.where(np.arange(cmax)[None, :] < size[:, None], first, c[:, None])  # [todo, member]; padded with c
        bb = bs[:, None]  # [todo, 1]
        gi = g[bb, idx]  # [todo, member]: the cycle's heads
        cyc_od, cyc_oh = od[bb, idx, gi], oh[bb, idx, gi]  # [todo, member]: the cycle's original edges
        rows = s[bb, idx, :] - s[bb, idx, gi][:, :, None]  # [todo, member, node]: a member taking head x instead
        v_in = rows.argmax(axis=1)  # [todo, node]
        new_row = rows.max(axis=1)  # [todo, node]
        n_in = _rows_gather(idx, v_in)  # [todo, node]
        row_od, row_oh = od[bb, n_in, ar[None, :]], oh[bb, n_in, ar[None, :]]  # [todo, node]
        cols = s[bb, :, idx]  # [todo, member, node]: cols[., k, x] = s[x, member k]
        v_out = cols.argmax(axis=1)  # [todo, node]
        new_col = cols.max(axis=1)  # [todo, node]
        n_out = _rows_gather(idx, v_out)  # [todo, node]
        col_od, col_oh = od[bb, ar[None, :], n_out], oh[bb, ar[None, :], n_out]  # [todo, node]
        log.append((bs, idx, size, cyc_od, cyc_oh, rep[bs].copy()))
        new_row[member] = -np.inf
        new_col[member] = -np.inf
        s[bb, idx, :] = -np.inf
        s[bb, :, idx] = -np.inf
        active[bb, idx] = False
        s[bs, c, :] = new_row
        s[bs, :, c] = new_col
        od[bs, c, :], oh[bs, c, :] = row_od, row_oh
        od[bs, :, c], oh[bs, :, c] = col_od, col_oh
        active[bs, c] = True
        gt = g[bs]  # [todo, node]
        gt = np.where(_rows_gather(member, gt), c[:, None], gt)  # heads inside the cycle -> c
        gt[~active[bs]] = 0
        gt[tt, c] = new_row.argmax(axis=1)
        gt[:, 0] = 0
        g[bs] = gt
        rt = rep[bs]  # [todo, node]
        rep[bs] = np.where(_rows_gather(member, rt), c[:, None], rt)
    heads = np.full((B, n), -1, dtype=np.int64)  # [batch, node]
    fb, fv = np.nonzero(active & (ar[None, :] > 0))  # the active nodes, ROOT excepted
    heads[fb, od[fb, fv, g[fb, fv]]] = oh[fb, fv, g[fb, fv]]
    for bs, idx, size, cyc_od, cyc_oh, rep_before in reversed(log):
        t, cmax = idx.shape
        tt = np.arange(t)  # [todo]
        mem = np.zeros((t, n), dtype=bool)  # [todo, node]
        mem[tt[:, None], idx] = True
        inside = _rows_gather(mem, rep_before)  # [todo, node]: original nodes in the contracted set
        # the one edge entering the set is the only assigned one inside it (its own edges come later)
        entering = (inside & (heads[bs] >= 0)).argmax(axis=1)  # [todo]: its original dependent
        v_star = rep_before[tt, entering]  # [todo]: the member it enters, whose cycle edge is dropped
        keep = (np.arange(cmax)[None, :] < size[:, None]) & (idx != v_star[:, None])  # [todo, member]
        kb, kk = np.nonzero(keep)
        heads[bs[kb], cyc_od[kb, kk]] = cyc_oh[kb, kk]
    heads[:, 0] = -1
    return heads


def gold_root_scores(word_scores: np.ndarray, roots: Sequence[int]) -> np.ndarray:
    """The CLE input (``[W+1, W+1]``, node 0 = ROOT) of a ``[W, W]`` dependent x head word-score matrix
    whose tree must hang from the gold root word(s) ``roots`` (0-based words).

    Each word of ``roots`` takes ROOT as its head (score 0, the only edge it may take), every other word
    must take a word head (no edge to ROOT): a maximum spanning arborescence of the result is the
    maximum spanning tree of the words rooted at the gold root.
    """
    W = word_scores.shape[0]
    s = np.full((W + 1, W + 1), -np.inf)  # [node, node]: dependent, head; node 0 = ROOT
    s[1:, 1:] = word_scores  # [word, word]
    r = np.asarray(roots, dtype=np.int64) + 1  # [root]: their nodes
    s[r, :] = -np.inf
    s[r, 0] = 0.0
    return s


# =========================================================================== undirected spanning trees
def max_spanning_tree_batch(weights: np.ndarray) -> np.ndarray:
    """Maximum spanning trees of ``B`` symmetric ``[n, n]`` matrices (``[B, n, n]``; the diagonal ignored).

    Prim's algorithm from node 0, vectorised over the ``B`` matrices: ``n - 1`` steps, each adding to
    every tree the outside node with the heaviest edge to it (ties: the lowest node). Returns
    ``parent`` ``[B, n]``: ``parent[b, 0] = -1``, and the tree's edges are ``(v, parent[b, v])``.
    """
    w = np.asarray(weights, dtype=np.float64)  # [batch, node, node]
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(f"weights must be [B, n, n], got shape {list(w.shape)}")
    B, n, _ = w.shape
    parent = np.full((B, n), -1, dtype=np.int64)  # [batch, node]
    if n <= 1:
        return parent
    rows = np.arange(B)  # [batch]
    inside = np.zeros((B, n), dtype=bool)  # [batch, node]
    inside[:, 0] = True
    best = w[:, 0, :].copy()  # [batch, node]: heaviest edge from each node to the tree
    link = np.zeros((B, n), dtype=np.int64)  # [batch, node]: the tree node at its other end
    for _ in range(n - 1):
        cand = np.where(inside, -np.inf, best)  # [batch, node]
        v = cand.argmax(axis=1)  # [batch]
        parent[rows, v] = link[rows, v]
        inside[rows, v] = True
        wv = w[rows, v, :]  # [batch, node]: the new tree node's edges
        better = wv > best  # [batch, node]
        best = np.where(better, wv, best)  # [batch, node]
        link = np.where(better, v[:, None], link)  # [batch, node]
    return parent
