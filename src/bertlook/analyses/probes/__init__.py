"""The probes of paper Table 3 (Section 4.2), one module per role; this package imports nothing (the CLI's
choices read :mod:`~bertlook.analyses.probes.catalogue` alone, without torch):

* :mod:`bertlook.analyses.probes.catalogue`: probe ids, labels, Table 3's columns, sizes, checks, tasks (no torch);
* :mod:`bertlook.analyses.probes.data`: :class:`~bertlook.analyses.probes.data.ProbeData`, the word-level data;
* :mod:`bertlook.analyses.probes.features`: feature tensors, padded batches, the batch schedule (torch);
* :mod:`bertlook.analyses.probes.models`: score functions, loss and the ``nn.Module`` of each probe (torch);
* :mod:`bertlook.analyses.probes.diagnostics`: optional training diagnostics (loss curve, feature scale; torch);
* :mod:`bertlook.analyses.probes.reference`: the one-model-at-a-time reference, :func:`train_probe
  <bertlook.analyses.probes.reference.train_probe>`, ``evaluate_probe``, ``run_probes``, ``run_layer_ablations``;
* :mod:`bertlook.analyses.probes.uas`: UAS bookkeeping, MST decoding, the right-branching baseline;
* :mod:`bertlook.analyses.probes.frames`: Table 3 and the per-layer ablations as frames, from per-seed fits;
* :mod:`bertlook.analyses.probes.rows`: Table 3's frame of rows and the rows file of ``--rows-out`` / ``--add-rows``;
* :mod:`bertlook.analyses.probes.split`, ``cohorts``, ``batch`` (``kernels``: numba; ``workers``: forked groups):
  the batched engine (every probe x seed in one loop, issue 24), driven by :mod:`bertlook.analyses.probes.tables`.

Definitions: docs/definitions.md#attention-based-probes
"""
