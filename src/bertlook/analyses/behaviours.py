"""The behaviour thresholds of the heads (the authors' released ones), in one light module: the labels of
Fig 6 (:func:`bertlook.analyses.cluster_heads.behaviour_labels`) and the example heads of Fig 1
(:func:`bertlook.reporting.example_figures.choose_example_heads`) read them from here. Definitions:
docs/definitions.md, "Jensen-Shannon divergence between heads and MDS" and "Example heads of Fig 1"."""

from __future__ import annotations

# Behaviour labels (released precedence: the later check wins). A share (0..1) or nats; a head has the
# behaviour when its statistic is strictly above the threshold.
NEXT_THRESHOLD = 0.5
PREV_THRESHOLD = 0.5
BROAD_ENTROPY_THRESHOLD = 3.8
CLS_THRESHOLD = 0.6
SEP_THRESHOLD = 0.6
PUNCT_THRESHOLD = 0.6
LABEL_COLUMNS = ("next", "prev", "entropy", "cls", "sep", "punct")
