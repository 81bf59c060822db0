#!/usr/bin/env bash
# Usage: scripts/check_stale_lock.sh [WORKDIR] [CONFIG]
# Exit 2 with what to do when WORKDIR/.snakemake/locks holds a lock that no running snakemake owns
# (a killed run); exit 0 otherwise. Called by `make demo` / `make reproduce` before they start.
# Heuristic: Snakemake's lock files hold no process id, so any snakemake process on this machine
# counts as the owner (then Snakemake itself decides).
set -u
workdir="${1:-.}"
config="${2:-config.yaml}"
if ls "$workdir"/.snakemake/locks/*.lock >/dev/null 2>&1 && ! pgrep -f '[s]nakemake' >/dev/null 2>&1; then
  echo "error: $workdir/.snakemake/locks holds the lock of a run that is no longer running (killed?)." >&2
  echo "  run: make unlock CONFIG=$config   (= snakemake --unlock --configfile $config), then the same command again;" >&2
  echo "  the killed run's outputs were written atomically, so the rerun only redoes what is missing." >&2
  exit 2
fi
exit 0
