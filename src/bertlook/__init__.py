"""bertlook: a reproducible re-run of "What Does BERT Look At?" (Clark et al., 2019)."""

__version__ = "0.1.0"
