"""The batched engine's cohorts (torch): stacked models of one probe family, with hand-written gradients.

A cohort holds the parameters of its models as ``[seed, variant, ...]`` tensors, each (variant, seed) model
starting from the reference's module (:func:`~bertlook.analyses.probes.models.make_model` under
``torch.manual_seed(seed)``, copied in). It computes its models' scores without autograd (``forward``, returning a
context) and, given the gradient of the summed loss with respect to those scores, adds its parameters' gradients
(``backward``) to a :class:`Grads`: the derivatives are written out next to each forward (tests/test_probe_batch.py
checks them against autograd on the reference modules). :class:`AttnCohort` (Attn, Attn+GloVe and its variants,
the ablations: Attn+GloVe over every head with fixed 0/1 masks on the weights; one per attention source),
:class:`MLPCohort` (Attn+GloVe with MLP weights), :class:`HiddenCohort` (Distances+GloVe, GloVe only),
:class:`OffsetCohort` (Distances only); :data:`COHORTS` by family
(:attr:`bertlook.analyses.probes.catalogue.ProbeTask.family`).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import torch

from bertlook.analyses.probes import kernels
from bertlook.analyses.probes.features import distance_features
from bertlook.analyses.probes.models import make_model
from bertlook.analyses.probes.split import Rows
from bertlook.analyses.probes.catalogue import HIDDEN, N_DIST, ProbeTask, base_kind


# ================================================================================= shared by all
def _reference_modules(tasks: Sequence[ProbeTask], seeds: Sequence[int], K: int, d: int) -> list[list]:
    """``[variant][seed]``: the untrained module of each task and seed, drawn exactly as
    :func:`bertlook.analyses.probes.reference.train_probe` draws it (``torch.manual_seed(seed)``, then
    ``make_model``)."""
    out = []
    for t in tasks:
        row = []
        for seed in seeds:
            torch.manual_seed(int(seed))
            row.append(make_model(t.probe, num_heads_total=K, glove_dim=d or None, heads=t.heads))
        out.append(row)
    return out


def _stack(mods: list[list], get) -> torch.Tensor:
    """``[seed, variant, ...]`` of ``get(module)`` (``mods`` ``[variant][seed]``)."""
    return torch.stack([torch.stack([get(m).detach() for m in row]) for row in mods], dim=1).contiguous()


class Grads:
    """One step's gradients of a cohort's parameters: the first contribution of a seed is copied, the next
    ones added (no zeroing pass); seeds without a row get zeros."""

    def __init__(self, params: Sequence[torch.Tensor]):
        self.params = list(params)
        self.seen: set[int] = set()
        for p in self.params:
            p.grad = torch.empty_like(p)

    def add(self, s: int, grads: Sequence[torch.Tensor]) -> None:
        """Seed ``s``'s gradients ``grads`` (one per parameter, without the seed axis)."""
        for p, g in zip(self.params, grads):
            p.grad[s].add_(g) if s in self.seen else p.grad[s].copy_(g)
        self.seen.add(s)

    def add_rows(self, rows: Rows, grads: Sequence[torch.Tensor]) -> None:
        """``grads`` ``[row, ...]``: each row's to its seed's."""
        if rows.identity and not self.seen:
            for p, g in zip(self.params, grads):
                p.grad.copy_(g)
            self.seen.update(range(rows.R))
            return
        for r, s in enumerate(rows.seed_index):
            self.add(s, [g[r] for g in grads])

    def finish(self, n_seeds: int) -> None:
        """End the step: the seeds without a contribution get zero gradients."""
        for s in range(n_seeds):
            if s not in self.seen:
                for p in self.params:
                    p.grad[s].zero_()
        self.seen.clear()

# ========================================================================================== cohorts

class AttnCohort:
    """Attn+GloVe models over every head on one attention ``maps`` source: ``ab`` ``[seed, variant, 2]`` (a, b
    of the ROOT features), ``weight`` ``[seed, variant, 2K, 2d]``, ``bias`` ``[seed, variant, 2K]``
    (``W [v_i ; v_j] + c``). ``attn`` = no GloVe weight; an ablation = its excluded heads' rows held at 0
    (they start at 0 and their gradient is masked to exactly 0, so Adam never moves them).

    With ``P_i = W_dep v_i + c`` and ``Q_j = W_cand v_j`` (``[word, variant, 2K]``, batched products over the rows),
    a word candidate scores ``s_ij = x_ij . (P_i + Q_j)`` and ROOT ``s_i0 = a ra_i + b rb_i``, ``ra_i = rt[i, 0] .
    (P_i + Q_0)`` (``rb``: ``rt[i, 1]``); these and their gradients are read from each sentence's maps by the
    fused loops :func:`~bertlook.analyses.probes.kernels.attn_scores` / ``attn_backward`` (no ``[word, 2K, word]``
    features are built). Exactly uniform maps (``attn_glove_uniform``) are summed in closed form instead."""

    def __init__(self, maps: str, tasks: Sequence[ProbeTask], seeds: Sequence[int], K: int, d: int, **_):
        self.maps, self.tasks, self.K, self.d = maps, list(tasks), K, d
        S, V = len(seeds), len(self.tasks)
        ab, weight, bias = torch.zeros(S, V, 2), torch.zeros(S, V, 2 * K, 2 * d), torch.zeros(S, V, 2 * K)
        wmask, bmask = torch.zeros(V, 2 * K, 1), torch.zeros(V, 2 * K)  # [variant, probe_feature(, 1)]
        for v, (t, mods) in enumerate(zip(self.tasks, _reference_modules(self.tasks, seeds, K, d))):
            rows = torch.from_numpy(_feature_rows(t, K))  # [probe_feature]: the features the task reads
            bmask[v, rows] = 1.0
            wmask[v, rows] = 0.0 if t.probe == "attn" else 1.0
            for s, m in enumerate(mods):
                ab[s, v] = m.root_ab.detach()
                if t.probe == "attn":
                    bias[s, v, rows] = m.w.detach()
                else:
                    weight[s, v, rows], bias[s, v, rows] = m.proj.weight.detach(), m.proj.bias.detach()
        self.ab, self.weight, self.bias = ab, weight, bias
        full = bool((wmask == 1).all() and (bmask == 1).all())
        self.wmask, self.bmask = (None, None) if full else (wmask, bmask)
        self.released = [v for v, t in enumerate(self.tasks) if base_kind(t.probe)[1]]

    def params(self) -> list[torch.Tensor]:
        return [self.ab, self.weight, self.bias]

    def cost(self) -> float:
        """Estimated ms per step, one thread (:meth:`BatchedProbes._groups` where the costs are not measured on the
        split, :attr:`BatchedProbes.measure`): each cohort alone over 300 steps on an
        Ice Lake Xeon, on the demo's stores (72 heads; 2026-12-04: 15 variants 6.98 ms, 3 variants 1.96, 1 variant
        1.07) and the scale check's (144 heads; 2026-12-05: 27 variants 16.8, 3 variants 2.67, 1 variant 1.41); a
        part of each variant's work does not grow with the heads (the GloVe products)."""
        if self.maps == "uniform":
            return 0.5 + 0.3 * len(self.tasks)
        k = self.K / 72
        return 0.48 + 0.17 * k + (0.25 + 0.17 * k) * len(self.tasks)

    def forward(self, rows: Rows):
        """Each row's ``[variant, word, candidate]`` scores (the rows padded together), and the context of
        :meth:`backward`."""
        dep, cand = rows.glove(bool(self.released))
        params = [rows.per_seed(p) for p in self.params()]
        if self.maps == "uniform":
            u = torch.tensor([float(np.float32(1.0) / np.float32(W + 2)) for W in rows.lengths])  # [row]
            ctx = self._forward_uniform(u, dep, cand, *params)
            return [ctx[0][r, :, :W, : W + 1] for r, W in enumerate(rows.lengths)], ctx
        return self._forward(rows, dep, cand, *params)

    def backward(self, rows: Rows, ctx, grads: Sequence[torch.Tensor], acc: Grads) -> None:
        """Add the loss's gradients to ``acc``, given ``grads`` (each row's d loss / d scores, ``[variant, word,
        candidate]``)."""
        if self.maps != "uniform":
            acc.add_rows(rows, self._backward(rows, ctx, grads))
            return
        G = grads[0].new_zeros(rows.R, grads[0].shape[0], rows.Wm, rows.Wm + 1)  # [row, variant, word, candidate]
        for r, (g, W) in enumerate(zip(grads, rows.lengths)):
            G[r, :, :W, : W + 1] = g
        acc.add_rows(rows, self._backward_uniform(ctx, G))

    def _pq(self, dep, cand, W, c):
        """``P`` ``[row, word, variant, 2K]`` and ``Q`` ``[row, candidate, variant, 2K]`` (the released variants'
        ``Q`` from the off-by-one candidate vectors)."""
        R, V, F, d = W.shape[0], W.shape[1], 2 * self.K, self.d
        Wf = W.view(R, V * F, 2 * d)  # [row, variant*probe_feature, 2 d_glove]
        P = torch.baddbmm(c.reshape(R, 1, V * F), dep, Wf[..., :d].transpose(1, 2)).view(R, -1, V, F)
        Q = torch.bmm(cand[:, 0], Wf[..., d:].transpose(1, 2)).view(R, -1, V, F)
        for v in self.released:
            Q[:, :, v] = torch.bmm(cand[:, 1], W[:, v, :, d:].transpose(1, 2))
        return P, Q

    def _forward(self, rows: Rows, dep, cand, ab, W, c):
        """Each row's scores ``[variant, word, candidate]`` from its maps (:func:`~bertlook.analyses.probes.kernels.
        attn_scores`), and the context of :meth:`_backward`: ``P``, ``Q`` and each row's ``ra``, ``rb``."""
        P, Q = self._pq(dep, cand, W, c)  # [row, word, variant, probe_feature], [row, candidate, variant, ..]
        V, scores, rr = P.shape[2], [], []
        for r, Wn in enumerate(rows.lengths):
            gt, rt = rows.maps(self.maps, r)  # [word, word, layer*head], [word, 2, probe_feature]
            s, rr_r = torch.empty(V, Wn, Wn + 1), torch.empty(Wn, V, 2)
            kernels.attn_scores(gt.numpy(), rt.numpy(), P[r].numpy(), Q[r].numpy(), ab[r].numpy(), s.numpy(),
                                      rr_r.numpy())
            scores.append(s)
            rr.append(rr_r)
        return scores, (P.shape, Q.shape, dep, cand, ab, rr)

    def _forward_uniform(self, u, dep, cand, ab, W, c):
        """Exactly uniform maps (every feature ``u = 1/(W+2)``): ``s_ij = u sum_f (P_if + Q_jf)``,
        ``s_i0 = (a + b) u sum_f (P_if + Q_0f)``, without the ``[word, 2K, word]`` features."""
        P, Q = self._pq(dep, cand, W, c)
        sp, sq = P.sum(-1).transpose(1, 2), Q.sum(-1).transpose(1, 2)  # [row, variant, word], [row, variant, candidate]
        u = u[:, None, None]  # [row, 1, 1]
        ra = u * (sp + sq[..., :1])  # [row, variant, word]: ra = rb
        s_words = (sp.unsqueeze(-1) + sq[..., None, 1:]) * u.unsqueeze(-1)  # [row, variant, word, word]
        s = torch.cat([((ab[..., 0:1] + ab[..., 1:2]) * ra).unsqueeze(-1), s_words], dim=-1)
        return s, ("uniform", u, dep, cand, ab, ra, P.shape, Q.shape)

    def _backward_uniform(self, ctx, G):
        _, u, dep, cand, ab, ra, pshape, qshape = ctx[1]
        Gw, G0 = G[..., 1:], G[..., 0]  # [row, variant, word, word], [row, variant, word]
        g0 = G0 * (ab[..., 0:1] + ab[..., 1:2]) * u  # [row, variant, word]: d loss / d (P_if + Q_0f) via ROOT
        gp = Gw.sum(-1) * u + g0  # [row, variant, word]: d loss / d P_if, every f
        gq = torch.cat([g0.sum(-1, keepdim=True), Gw.sum(-2) * u], dim=-1)  # [row, variant, candidate]
        dP = gp.transpose(1, 2).unsqueeze(-1).expand(pshape).contiguous()  # [row, word, variant, probe_feature]
        dQ = gq.transpose(1, 2).unsqueeze(-1).expand(qshape).contiguous()  # [row, candidate, variant, probe_feature]
        dab = (G0 * ra).sum(-1, keepdim=True).expand(*ra.shape[:2], 2)  # [row, variant, 2]
        return self._param_grads(dab, dP, dQ, dep, cand)

    def _backward(self, rows: Rows, ctx, grads: Sequence[torch.Tensor]):
        """d loss / d (ab, W, c) ``[row, variant, ...]`` from each row's d loss / d scores ``[variant, word,
        candidate]``:
        ``dP_i = sum_j G_ij x_ij + G_i0 xr_i``, ``dQ_j = sum_i G_ij x_ij``, ``dQ_0 = sum_i G_i0 xr_i`` (``xr_i = a rt_i0
        + b rt_i1``; :func:`~bertlook.analyses.probes.kernels.attn_backward`), ``dW_dep = sum_i dP_i v_i^T``, ``dc =
        sum_i dP_i``, ``dW_cand = sum_j dQ_j v_j^T`` (:meth:`_param_grads`), ``da = sum_i G_i0 ra_i``, ``db = sum_i
        G_i0 rb_i``."""
        pshape, qshape, dep, cand, ab, rr = ctx
        dP, dQ, dab = torch.zeros(pshape), torch.zeros(qshape), torch.zeros(ab.shape)  # [row, ...]
        for r, g in enumerate(grads):
            gt, rt = rows.maps(self.maps, r)
            kernels.attn_backward(gt.numpy(), rt.numpy(), g.contiguous().numpy(), ab[r].numpy(), rr[r].numpy(),
                                        dP[r].numpy(), dQ[r].numpy(), dab[r].numpy())
        return self._param_grads(dab, dP, dQ, dep, cand)

    def _param_grads(self, dab, dP, dQ, dep, cand):
        """(dab, dW, dc) from ``dP`` ``[row, word, variant, 2K]`` and ``dQ`` ``[row, candidate, variant, 2K]``."""
        R, V, F, d = dP.shape[0], dP.shape[2], dP.shape[3], self.d
        dWd = torch.bmm(dP.reshape(R, -1, V * F).transpose(1, 2), dep)  # [row, variant*probe_feature, d_glove]
        dWc = torch.bmm(dQ.reshape(R, -1, V * F).transpose(1, 2), cand[:, 0])  # [row, variant*probe_feature, d_glove]
        dW = torch.cat([dWd, dWc], dim=-1).view(R, V, F, 2 * d)  # [row, variant, probe_feature, 2 d_glove]
        for v in self.released:
            dW[:, v, :, d:] = torch.bmm(dQ[:, :, v].transpose(1, 2), cand[:, 1])
        dc = dP.sum(1)  # [row, variant, probe_feature]
        if self.wmask is not None:
            dW.mul_(self.wmask)
            dc.mul_(self.bmask)
        return dab, dW, dc

    def state(self, v: int, s: int, ts=None) -> dict[str, torch.Tensor]:
        """Model (v, s) of ``ts`` (default :meth:`params`) under the reference module's names and shapes."""
        (ab, weight, bias), rows = ts or self.params(), torch.from_numpy(_feature_rows(self.tasks[v], self.K))
        if self.tasks[v].probe == "attn":
            return {"root_ab": ab[s, v], "w": bias[s, v, rows]}
        return {"root_ab": ab[s, v], "proj.weight": weight[s, v, rows], "proj.bias": bias[s, v, rows]}


def _feature_rows(task: ProbeTask, K: int) -> np.ndarray:
    """The ``2K`` feature rows a task reads: its heads' ``A(i->j)`` rows, then their ``A(j->i)`` rows."""
    sel = np.arange(K) if task.heads is None else np.asarray(task.heads, dtype=np.int64)  # [layer*head]
    return np.concatenate([sel, K + sel])  # [probe_feature]


class MLPCohort:
    """``attn_glove_mlp``, one sentence at a time: per-feature weights ``W2 h + c2`` with ``h = tanh(W1 [v_i ; v_j]
    + c1)``; the word scores ``sum_m x_m (W2 h + c2)_m`` are computed as ``h . (x W2) + x . c2``, so a step
    costs two ``[W*W, 2K] x [2K, 256]`` products (``z = x W2``, and ``x^T (G h)`` for ``W2``'s gradient).
    ``h = 2 sigma - 1`` is used through ``sigma = sigmoid(2 pre)`` (:func:`_sigma`, the fused loops of
    :mod:`~bertlook.analyses.probes.kernels`)."""

    def __init__(self, maps: str, tasks: Sequence[ProbeTask], seeds: Sequence[int], K: int, d: int):
        self.maps, self.tasks, self.K, self.d = maps, list(tasks), K, d
        mods = _reference_modules(self.tasks, seeds, K, d)
        self.ab = _stack(mods, lambda m: m.root_ab)  # [seed, variant, 2]
        self.w1 = _stack(mods, lambda m: m.hidden.weight)  # [seed, variant, hidden, 2d]
        self.c1 = _stack(mods, lambda m: m.hidden.bias)  # [seed, variant, hidden]
        self.w2 = _stack(mods, lambda m: m.proj.weight)  # [seed, variant, 2K, hidden]
        self.c2 = _stack(mods, lambda m: m.proj.bias)  # [seed, variant, 2K]

    def params(self) -> list[torch.Tensor]:
        return [self.ab, self.w1, self.c1, self.w2, self.c2]

    def cost(self) -> float:
        return (6.4 + 1.4 * self.K / 72) * len(self.tasks)  # 7.8 ms at 72 heads, 9.2 at 144 (AttnCohort.cost)

    def forward(self, rows: Rows):
        scores, ctx = [], []
        for r, n in enumerate(rows.sent):
            (gt, rt), W = rows.maps(self.maps, r), rows.lengths[r]  # [word, word, layer*head], [word, 2, probe_feature]
            # [word*word, probe_feature]: x_ij = [A(i->j) ; A(j->i)], (i, j) row-major
            xt = torch.cat([gt.reshape(W * W, -1), gt.transpose(0, 1).reshape(W * W, -1)], dim=1)
            one = [self._forward(xt, rt, rows.split.dep[n], rows.split.cand(n),
                                 *(p[rows.seed_index[r], v] for p in self.params())) for v in range(len(self.tasks))]
            scores.append(torch.stack([o[0] for o in one]))  # [variant, word, candidate]
            ctx.append([o[1] for o in one])
        return scores, ctx

    def _forward(self, xt, root, dep, cand, ab, w1, c1, w2, c2):
        d, W = self.d, dep.shape[0]
        sig = _sigma(torch.addmm(c1, dep, w1[:, :d].T), cand @ w1[:, d:].T)  # [word, candidate, hidden]
        z = xt @ w2  # [word*word, hidden]: x_ij W2
        part = torch.empty(W, W)  # sum_h sigma_ijh z_ijh (word candidates)
        kernels.mlp_scores(sig.numpy(), z.numpy(), part.numpy())
        sig0 = sig[:, 0]  # [word, hidden]: the ROOT candidate
        c2h = c2 - w2.sum(1)  # [probe_feature]: with h = 2 sigma - 1, W2 h + c2 = 2 W2 sigma + c2h
        s_words = part.mul_(2.0) + torch.mv(xt, c2h).view(W, W)  # [word, word]
        proj0 = torch.addmm(c2h, sig0, w2.T, alpha=2.0)  # [word, probe_feature]: the ROOT candidate's weights
        ra, rb = (proj0 * root[:, 0]).sum(-1), (proj0 * root[:, 1]).sum(-1)  # [word]
        s = torch.cat([(ab[0] * ra + ab[1] * rb).unsqueeze(1), s_words], dim=1)  # [word, candidate]
        return s, (xt, root, dep, cand, ab, w2, sig, z, sig0, ra, rb)

    def backward(self, rows: Rows, ctx, grads: Sequence[torch.Tensor], acc: Grads) -> None:
        for r, (row_ctx, g) in enumerate(zip(ctx, grads)):
            out = [self._backward(c, g[v]) for v, c in enumerate(row_ctx)]  # per variant: (dab, dw1, dc1, dw2, dc2)
            acc.add(rows.seed_index[r], [torch.stack(x) for x in zip(*out)])

    def _backward(self, ctx, G):
        """``G`` ``[word, candidate]``: ``dW2 = x^T (G h) + gr^T h0`` with ``gr_i = G_i0 xr_i``, ``dc2 = x^T G +
        sum_i gr_i``, ``dh_ij = G_ij z_ij``, ``dh_i0 = gr_i W2``, then through the tanh (``1 - h^2 = 4 sigma
        (1 - sigma)``) to ``W1``, ``c1`` (:func:`~bertlook.analyses.probes.kernels.mlp_backward`)."""
        xt, root, dep, cand, ab, w2, sig, z, sig0, ra, rb = ctx
        W = dep.shape[0]
        Gw, G0 = G[:, 1:], G[:, 0]  # [word, word], [word]
        gr = (ab[0] * root[:, 0] + ab[1] * root[:, 1]) * G0[:, None]  # [word, probe_feature]: d loss / d proj0
        dc2 = torch.addmv(gr.sum(0), xt.T, Gw.reshape(-1))  # [probe_feature]
        m, dA, dB = torch.empty(W * W, HIDDEN), torch.empty(W, HIDDEN), torch.empty(W + 1, HIDDEN)
        # m = sigma G (word candidates); dA, dB: a quarter of d loss / d (a_i, b_j)
        kernels.mlp_backward(sig.numpy(), z.numpy(), G.contiguous().numpy(), (gr @ w2).numpy(), m.numpy(),
                                   dA.numpy(), dB.numpy())
        dw2 = torch.addmm(gr.T @ sig0, xt.T, m, beta=2.0, alpha=2.0)
        dw2.sub_(dc2[:, None])  # [probe_feature, hidden]: h = 2 sigma - 1
        dA, dB = dA.mul_(4.0), dB.mul_(4.0)  # [word, hidden], [candidate, hidden]
        dw1 = torch.cat([dA.T @ dep, dB.T @ cand], dim=1)  # [hidden, 2d]
        dab = torch.stack([(G0 * ra).sum(), (G0 * rb).sum()])
        return dab, dw1, dA.sum(0), dw2, dc2

    def state(self, v: int, s: int, ts=None) -> dict[str, torch.Tensor]:
        ab, w1, c1, w2, c2 = ts or self.params()
        return {"root_ab": ab[s, v], "hidden.weight": w1[s, v], "hidden.bias": c1[s, v], "proj.weight": w2[s, v],
                "proj.bias": c2[s, v]}


class HiddenCohort:
    """``distances_glove`` and ``glove_only``, one sentence at a time: ``tanh(H [dist_ij ; v_i ; v_j] + c)`` ->
    ``wo . h + bo``; ``w`` ``[seed, variant, hidden, 8 + 2d]`` (``glove_only``: its distance columns held at 0),
    ``c`` ``[seed, variant, hidden]``, ``wo`` ``[seed, variant, hidden]``, ``bo`` ``[seed, variant]``; ``h`` through
    ``sigma = sigmoid(2 pre)``: ``wo . h + bo = 2 wo . sigma + bo - sum(wo)``."""

    def __init__(self, maps: str, tasks: Sequence[ProbeTask], seeds: Sequence[int], K: int, d: int):
        self.tasks, self.d = list(tasks), d
        S, V = len(seeds), len(self.tasks)
        self.dist = [t.probe == "distances_glove" for t in self.tasks]
        self.w, self.c = torch.zeros(S, V, HIDDEN, N_DIST + 2 * d), torch.zeros(S, V, HIDDEN)
        self.wo, self.bo = torch.zeros(S, V, HIDDEN), torch.zeros(S, V)
        for v, mods in enumerate(_reference_modules(self.tasks, seeds, K, d)):
            first = 0 if self.dist[v] else N_DIST
            for s, m in enumerate(mods):
                self.w[s, v, :, first:], self.c[s, v] = m.hidden.weight.detach(), m.hidden.bias.detach()
                self.wo[s, v], self.bo[s, v] = m.out.weight.detach()[0], m.out.bias.detach()[0]

    def params(self) -> list[torch.Tensor]:
        return [self.w, self.c, self.wo, self.bo]

    def cost(self) -> float:
        return 3.0 * len(self.tasks)

    def forward(self, rows: Rows):
        scores, ctx = [], []
        V, d = len(self.tasks), self.d
        for r, (n, W) in enumerate(zip(rows.sent, rows.lengths)):
            s = rows.seed_index[r]
            w, c, wo, bo = self.w[s], self.c[s], self.wo[s], self.bo[s]  # [variant, hidden, feature], ..
            dep, cand = rows.split.dep[n], rows.split.cand(n)  # [word, d_glove], [candidate, d_glove]
            A = torch.baddbmm(c.unsqueeze(1), dep.expand(V, -1, -1), w[:, :, N_DIST : N_DIST + d].transpose(1, 2))
            B = torch.matmul(cand, w[:, :, N_DIST + d :].transpose(1, 2))  # [variant, candidate, hidden]
            # [variant, offset, hidden]: H dist of each offset (glove_only: its distance weights are 0, so 0)
            D = torch.matmul(_offset_tables(W)[0], w[:, :, :N_DIST].transpose(1, 2))
            sigs, out = [_sigma(A[v], B[v], D[v]) for v in range(V)], torch.empty(V, W, W + 1)
            for v, sig in enumerate(sigs):  # sum_h sigma_ijh wo_h
                kernels.hidden_scores(sig.numpy(), wo[v].numpy(), out[v].numpy())
            scores.append(out.mul_(2.0).add_((bo - wo.sum(1))[:, None, None]))  # [variant, word, candidate]
            ctx.append((sigs, dep, cand, W))
        return scores, ctx

    def backward(self, rows: Rows, ctx, grads: Sequence[torch.Tensor], acc: Grads) -> None:
        """``dwo = h^T G``, ``dbo = sum G``, ``dpre = G wo (1 - h^2)``; ``dH = dpre^T [dist ; v_i ; v_j]``
        (:func:`~bertlook.analyses.probes.kernels.hidden_backward`: ``dpre`` summed by word, candidate and offset)."""
        V = len(self.tasks)
        for r, ((sigs, dep, cand, W), G) in enumerate(zip(ctx, grads)):
            wo = self.wo[rows.seed_index[r]]  # [variant, hidden]
            gsum = G.sum((1, 2))  # [variant]
            dwo, dA = torch.empty(V, HIDDEN), torch.empty(V, W, HIDDEN)
            dB, dD = torch.empty(V, W + 1, HIDDEN), torch.empty(V, 2 * W, HIDDEN)  # a quarter of d loss / d pre, summed
            for v, sig in enumerate(sigs):
                kernels.hidden_backward(sig.numpy(), wo[v].numpy(), G[v].contiguous().numpy(), dwo[v].numpy(),
                                              dA[v].numpy(), dB[v].numpy(), dD[v].numpy())
            dwo.mul_(2.0).sub_(gsum[:, None])
            dA, dB = dA.mul_(4.0), dB.mul_(4.0)  # [variant, word | candidate, hidden]
            table = _offset_tables(W)[0]  # [offset, 8]
            ddist = torch.stack([(dD[v].T @ table).mul_(4.0) if self.dist[v] else dD.new_zeros(HIDDEN, N_DIST)
                                 for v in range(V)])  # [variant, hidden, 8]
            dw = torch.cat([ddist, dA.transpose(1, 2) @ dep, dB.transpose(1, 2) @ cand], dim=2)  # [variant, H, feature]
            acc.add(rows.seed_index[r], [dw, dA.sum(1), dwo, gsum])

    def state(self, v: int, s: int, ts=None) -> dict[str, torch.Tensor]:
        (w, c, wo, bo), first = ts or self.params(), 0 if self.dist[v] else N_DIST
        return {"hidden.weight": w[s, v, :, first:], "hidden.bias": c[s, v], "out.weight": wo[s, v][None],
                "out.bias": bo[s, v][None]}


def _sigma(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor | None = None) -> torch.Tensor:
    """``sigma = sigmoid(2 (a_i + b_j [+ d_o]))`` ``[word, candidate, hidden]`` (``tanh(x) = 2 sigmoid(2x) - 1``; the
    factor 2 is exact): :func:`~bertlook.analyses.probes.kernels.sigma_grid` of the doubled terms and their factors
    ``exp(-2 t)``, or the terms alone where the factors' product could overflow (``direct``)."""
    by_offset = d is not None
    terms = [t.mul(2.0) for t in (a, b, d if by_offset else a.new_zeros(1, a.shape[1]))]
    direct = not kernels.factored(*(t.numpy() for t in terms[: 2 + by_offset]))
    factors = terms if direct else [torch.exp(t.neg()) for t in terms]
    sg = torch.empty(a.shape[0], b.shape[0], a.shape[1])
    kernels.sigma_grid(*(t.numpy() for t in factors), *(t.numpy() for t in terms), direct, by_offset, sg.numpy())
    return sg


@functools.lru_cache(maxsize=256)
def _offset_tables(W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``2W`` distinct distance-feature rows of a sentence of ``W`` words (offsets ``j - i`` = ``-(W-1)..W-1``,
    then ROOT; ``[2W, 8]``, copied from :func:`distance_features`) and each pair's row (``[W*(W+1)]``)."""
    feats = distance_features(W)  # [word, candidate, probe_feature]
    table = np.zeros((2 * W, N_DIST), dtype=np.float32)  # [offset, probe_feature]
    for o in range(-(W - 1), W):
        i, j = (0, 1 + o) if o >= 0 else (-o, 1)  # a pair (0-based dependent, candidate) with offset o
        table[o + W - 1] = feats[i, j]
    table[2 * W - 1] = feats[0, 0]  # ROOT
    i, j = np.arange(1, W + 1)[:, None], np.arange(0, W + 1)[None, :]  # [word, 1], [1, candidate]
    index = np.where(j == 0, 2 * W - 1, j - i + W - 1)  # [word, candidate]
    return torch.from_numpy(table), torch.from_numpy(index.astype(np.int64).reshape(-1))


class OffsetCohort:
    """``distances_only``: ``tanh(H dist_ij + c)`` -> ``wo . h + bo``; ``dist_ij`` depends only on ``j - i``, so the
    ``2W`` distinct rows of every row's sentence are scored (padded together) and gathered."""

    def __init__(self, maps: str, tasks: Sequence[ProbeTask], seeds: Sequence[int], K: int, d: int):
        self.tasks = list(tasks)
        mods = _reference_modules(self.tasks, seeds, K, d)
        self.w, self.c = _stack(mods, lambda m: m.hidden.weight), _stack(mods, lambda m: m.hidden.bias)  # [.., H(, 8)]
        self.wo, self.bo = _stack(mods, lambda m: m.out.weight[0]), _stack(mods, lambda m: m.out.bias[0])  # [.., H], []

    def params(self) -> list[torch.Tensor]:
        return [self.w, self.c, self.wo, self.bo]

    def cost(self) -> float:
        return 0.8

    def forward(self, rows: Rows):
        table = torch.zeros(rows.R, 2 * rows.Wm, N_DIST)  # [row, offset, probe_feature]
        for r, W in enumerate(rows.lengths):
            table[r, : 2 * W] = _offset_tables(W)[0]
        w, c, wo, bo = (rows.per_seed(p) for p in self.params())  # [row, variant, hidden, 8], ..
        h = torch.tanh_(torch.matmul(table[:, None], w.transpose(2, 3)).add_(c[:, :, None]))  # [row, V, offset, H]
        st = torch.matmul(h, wo.unsqueeze(-1)).squeeze(-1).add_(bo[..., None])  # [row, variant, offset]
        scores = [st[r][:, _offset_tables(W)[1]].view(-1, W, W + 1) for r, W in enumerate(rows.lengths)]
        return scores, (table, h, wo)

    def backward(self, rows: Rows, ctx, grads: Sequence[torch.Tensor], acc: Grads) -> None:
        table, h, wo = ctx
        gst = torch.zeros(h.shape[:3])  # [row, variant, offset]: d loss / d each offset's score
        for r, (W, G) in enumerate(zip(rows.lengths, grads)):
            gst[r].index_add_(1, _offset_tables(W)[1], G.reshape(G.shape[0], -1))
        dwo = torch.matmul(h.transpose(2, 3), gst.unsqueeze(-1)).squeeze(-1)  # [row, variant, hidden]
        dpre = torch.ops.aten.tanh_backward(gst.unsqueeze(-1) * wo.unsqueeze(2), h)  # [row, variant, offset, hidden]
        dw = torch.matmul(dpre.transpose(2, 3), table[:, None])  # [row, variant, hidden, 8]
        for r, s in enumerate(rows.seed_index):
            acc.add(s, [dw[r], dpre[r].sum(1), dwo[r], gst[r].sum(-1)])

    def state(self, v: int, s: int, ts=None) -> dict[str, torch.Tensor]:
        w, c, wo, bo = ts or self.params()
        return {"hidden.weight": w[s, v], "hidden.bias": c[s, v], "out.weight": wo[s, v][None],
                "out.bias": bo[s, v][None]}


#: the cohort class of each family (:attr:`bertlook.analyses.probes.catalogue.ProbeTask.family`)
COHORTS = {"attn": AttnCohort, "mlp": MLPCohort, "hidden": HiddenCohort, "offset": OffsetCohort}
