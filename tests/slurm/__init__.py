"""Helpers of tests/test_slurm.py: a throw-away single-node SLURM cluster on this machine."""
