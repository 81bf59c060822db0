"""Stage 4, reporting: figures, the paper's numbers and the comparison, manifest, measured resources."""
