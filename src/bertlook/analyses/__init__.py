"""Stage 3, analyses: compute the numbers (surface statistics, clustering, head accuracy, coreference,
gradients, probes)."""
