#!/usr/bin/env bash
# Usage: scripts/check_stale_lock.sh [WORKDIR] [CONFIG]
# Exit 2 with what to do when WORKDIR/.snakemake/locks holds a lock that no running snakemake owns
# (a killed run); exit 0 otherwise. Called by `make demo` / `make reproduce` before they start.
# Snakemake's lock files hold no process id, so a running snakemake counts as the owner when it works
# in WORKDIR: its current directory is WORKDIR, or its command line names WORKDIR (--directory).
# Snakemake's own processes on other working directories do not count.
set -u
workdir="${1:-.}"
config="${2:-config.yaml}"
ls "$workdir"/.snakemake/locks/*.lock >/dev/null 2>&1 || exit 0
target="$(cd "$workdir" && pwd -P)"
for pid in $(pgrep -f '[s]nakemake' 2>/dev/null); do
  [ "$pid" = "$$" ] && continue
  cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null || true)"
  [ "$cwd" = "$target" ] && exit 0
  # the command line, NUL-separated: an argument equal to WORKDIR (resolved) owns it
  while IFS= read -r -d '' arg; do
    arg="${arg#--directory=}"
    case "$arg" in
      /*) [ -d "$arg" ] && [ "$(cd "$arg" 2>/dev/null && pwd -P)" = "$target" ] && exit 0 ;;
      *) [ -n "$cwd" ] && [ -d "$cwd/$arg" ] && [ "$(cd "$cwd/$arg" 2>/dev/null && pwd -P)" = "$target" ] && exit 0 ;;
    esac
  done < "/proc/$pid/cmdline" 2>/dev/null
done
echo "error: $workdir/.snakemake/locks holds the lock of a run that is no longer running (killed?)." >&2
echo "  run: make unlock CONFIG=$config   (= snakemake --unlock --configfile $config), then the same command again;" >&2
echo "  the killed run's outputs were written atomically, so the rerun only redoes what is missing." >&2
exit 2
