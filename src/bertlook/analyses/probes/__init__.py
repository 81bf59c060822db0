"""The probes of paper Table 3 (Section 4.2), one module per role (docs/DESIGN.md "Modules"); this package
imports nothing, so the CLI's choices read :mod:`~bertlook.analyses.probes.catalogue` alone, without torch.

The catalogue (ids, labels, columns, checks, tasks) and :mod:`~bertlook.analyses.probes.data` (the word-level
data) need no torch; ``features``, ``models``, ``diagnostics`` and the one-model-at-a-time ``reference`` do.
``uas`` (UAS, MST, right-branching), ``frames`` and ``rows`` (Table 3 and the ablations as frames, the rows
file) serve both engines; the batched engine (every probe x seed in one loop, issue 24) is ``split``,
``cohorts``, ``kernels`` (numba), ``workers`` (forked groups) and ``batch``, driven by ``tables``.

Definitions: docs/definitions.md#attention-based-probes
"""
