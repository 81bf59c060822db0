"""A throw-away single-node SLURM cluster (Debian's slurm-wlm 22.05 and munge), for tests/test_slurm.py.

Everything lives in one temporary directory: its own munge key and socket, slurm.conf and cgroup.conf,
state, spool and logs; controller and node daemon listen on free ports. Nothing in /etc is written,
so it does not touch (or see) another cluster on the machine. No slurmdbd: accounting is off, as on
the cluster of issue 10, so `sacct` fails and job status comes from `squeue` (MinJobAge keeps
finished jobs listed for an hour).

The daemons run in the foreground as children of this process (``munged -F``, ``slurmctld -D``,
``slurmd -D``); :meth:`SingleNodeSlurm.stop` cancels the cluster's jobs and stops exactly those three
processes, by pid, and is safe to call after a partial start. Needs root (apt-get install, daemons
running as root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

# Debian packages: controller, node daemon, client commands (sbatch, squeue, srun, ...), munge.
PACKAGES = ["slurm-wlm", "slurmctld", "slurmd", "slurm-client", "munge"]
PROGRAMS = ["munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "squeue", "srun", "sinfo", "scontrol", "scancel"]
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The node declares at least this much memory, so that the rules' requests (bertlook.pipeline.sizing; a few GB
# at most for the tiny configuration) fit on a small CI machine too. Memory is not enforced here (no
# cgroups), and slurmd accepts a declared size above the real one (config_overrides).
MIN_NODE_MEMORY_MB = 16000


class ClusterError(RuntimeError):
    """The cluster could not be installed or started; the message says why (with the logs' tails)."""


def _which(program: str) -> str | None:
    return shutil.which(program, path=f"{os.environ.get('PATH', '')}:{SBIN_PATH}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path.name}: none)"
    return f"--- {path.name} (last {lines} lines) ---\n" + "\n".join(text[-lines:])


def ensure_installed() -> None:
    """Install slurm-wlm and munge with apt-get unless every program is there. Raises ClusterError
    (never skips) when that is impossible: not root, no apt-get, or apt-get failing."""
    missing = [p for p in PROGRAMS if _which(p) is None]
    if not missing:
        return
    why = f"SLURM test needs {', '.join(missing)} (Debian packages {' '.join(PACKAGES)})"
    if os.geteuid() != 0:
        raise ClusterError(f"{why}: not installed, and installing them with apt-get needs root")
    apt = _which("apt-get")
    if apt is None:
        raise ClusterError(f"{why}: not installed, and there is no apt-get on this machine")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [apt, "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:  # stale package lists on a fresh machine: update once, then retry
        update = subprocess.run([apt, "-o", "DPkg::Lock::Timeout=300", "update", "-q"], capture_output=True,
                                text=True, env=env, timeout=900)
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            raise ClusterError(
                f"{why}: `{' '.join(install)}` failed (exit {proc.returncode}); apt-get update exit "
                f"{update.returncode}:\n{(update.stderr + proc.stdout + proc.stderr)[-3000:]}"
            )
    still = [p for p in PROGRAMS if _which(p) is None]
    if still:
        raise ClusterError(f"{why}: apt-get installed {' '.join(PACKAGES)} but {', '.join(still)} is still missing")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _node_size() -> tuple[int, int]:
    """CPUs and RealMemory (MB) of this machine, as slurmd sees them (`slurmd -C`)."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=60).stdout
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    return int(fields["CPUs"]), int(fields["RealMemory"])


class SingleNodeSlurm:
    """One node (this machine) in three partitions: ``debug`` (the default), ``batch`` and ``gpu``.
    The node declares one GPU (GRES ``gpu``) backed by /dev/null: SLURM schedules GPU requests
    (``--gpus=1``) as on a GPU cluster, while CUDA stays unavailable to the jobs."""

    partitions = ("debug", "batch", "gpu")

    def __init__(self, keep_logs_in: Path | None = None):
        self.keep_logs_in = keep_logs_in
        self.state: Path | None = None
        self.node = socket.gethostname().split(".")[0]
        self.cpus = 0
        self.memory_mb = 0
        self._procs: dict[str, subprocess.Popen] = {}
        self._logs: list = []

    # ---- environment of every client (sbatch, squeue, snakemake and the jobs it submits) -----------
    @property
    def conf(self) -> Path:
        return self.state / "slurm.conf"

    def env(self, base: dict | None = None) -> dict:
        """``base`` (default: os.environ) with SLURM_CONF set and the srun wrapper first on PATH."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = f"{self.state / 'bin'}:{env.get('PATH', '')}:{SBIN_PATH}"
        return env

    def run(self, *cmd: str, timeout: int = 60) -> subprocess.CompletedProcess:
        """A SLURM client command against this cluster."""
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env(), timeout=timeout)

    # ---- start ---------------------------------------------------------------------------------------
    def start(self) -> None:
        ensure_installed()
        # under /tmp, not pytest's tmp_path: munged wants every directory above its socket to be
        # searchable by all (pytest's base directory is 0700), and a unix socket path must be short
        self.state = Path(tempfile.mkdtemp(prefix="bl-slurm-", dir="/tmp"))
        os.chmod(self.state, 0o755)
        for name, mode in [("munge", 0o755), ("munge-key", 0o700), ("ctld", 0o755), ("spool", 0o755),
                           ("log", 0o755), ("bin", 0o755)]:
            (self.state / name).mkdir(mode=mode)
            os.chmod(self.state / name, mode)
        self._start_munge()
        self.cpus, real_memory = _node_size()
        self.memory_mb = max(real_memory - 1024, MIN_NODE_MEMORY_MB)
        self._write_config()
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf)])
        self._wait_idle()

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.state / "log" / f"{name}.out", "w")
        self._logs.append(out)
        self._procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                                             stdin=subprocess.DEVNULL, start_new_session=True)

    def _start_munge(self) -> None:
        key = self.state / "munge-key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = self.state / "munge" / "munge.sock"
        self._spawn("munged", [_which("munged"), "-F", f"--socket={sock}", f"--key-file={key}",
                               f"--pid-file={self.state / 'munge' / 'munged.pid'}",
                               f"--log-file={self.state / 'log' / 'munged.log'}",
                               f"--seed-file={self.state / 'munge-key' / 'munged.seed'}"])
        deadline = time.monotonic() + 30
        while True:
            enc = subprocess.run([_which("munge"), "-S", str(sock), "-n"], capture_output=True, timeout=10)
            if enc.returncode == 0:
                dec = subprocess.run([_which("unmunge"), "-S", str(sock)], input=enc.stdout,
                                     capture_output=True, timeout=10)
                if dec.returncode == 0:
                    return
            if self._procs["munged"].poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"munged did not start\n{self.logs_tail()}")
            time.sleep(0.3)

    def _write_config(self) -> None:
        s = self.state
        ctld_port, slurmd_port = _free_port(), _free_port()
        (s / "slurm.conf").write_text(f"""\
# Written by tests/slurm/single_node.py: one node, two partitions, no slurmdbd, no cgroups.
ClusterName=bertlooktest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={s / 'munge' / 'munge.sock'}
MpiDefault=none
# no cgroups (containers rarely allow them): processes tracked by parent pid, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# no slurmdbd: `sacct` answers "Slurm accounting storage is disabled"
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# finished jobs stay visible to squeue for an hour: the plugin's status command and the test read them
MinJobAge=3600
SlurmctldPidFile={s / 'slurmctld.pid'}
SlurmdPidFile={s / 'slurmd.pid'}
StateSaveLocation={s / 'ctld'}
SlurmdSpoolDir={s / 'spool'}
SlurmctldLogFile={s / 'log' / 'slurmctld.log'}
SlurmdLogFile={s / 'log' / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
# trust the node line below (RealMemory may exceed this machine's: memory is not enforced here)
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes={self.node} MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={self.node} MaxTime=INFINITE State=UP
""")
        # a device-less GPU (a GPU GRES needs a File=): schedulable, invisible to CUDA
        (s / "gres.conf").write_text(f"NodeName={self.node} Name=gpu Count=1 File=/dev/null\n")
        # Read by slurmd from the directory of slurm.conf; this file keeps a system-wide one out.
        (s / "cgroup.conf").write_text(
            "# Unused: ProctrackType=proctrack/linuxproc and TaskPlugin=task/none need no cgroups.\n"
        )
        # snakemake-executor-plugin-slurm-jobstep (0.6.1) removes every SLURM_* variable, SLURM_CONF
        # included, before it runs `srun` inside the job; on a real cluster srun then reads
        # /etc/slurm/slurm.conf. This cluster's config is not there, so srun gets it from a wrapper.
        srun = s / "bin" / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec "{_which("srun")}" "$@"\n')
        srun.chmod(srun.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def _wait_idle(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited with status {proc.returncode}\n{self.logs_tail()}")
            state = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T", timeout=20).stdout.strip()
            if state.split("\n")[0] == "idle":
                return
            time.sleep(0.5)
        raise ClusterError(f"node {self.node} not idle after {timeout:.0f} s (state {state!r})\n{self.logs_tail()}")

    # ---- inspect -----------------------------------------------------------------------------------------
    def jobs(self) -> dict[str, dict[str, str]]:
        """Every job the controller remembers (finished ones too: MinJobAge), as `scontrol -o show job`
        gives them: job id -> {JobState, Partition, NumCPUs, MinMemoryNode, TresPerJob (a GPU request:
        gres:gpu:1), Comment, JobName, ...}."""
        proc = self.run("scontrol", "-o", "show", "job")
        if proc.returncode != 0:
            if "No jobs in the system" in proc.stdout + proc.stderr:
                return {}
            raise ClusterError(f"scontrol show job failed: {proc.stderr}")
        jobs = {}
        for line in proc.stdout.splitlines():
            fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
            if "JobId" in fields:
                jobs[fields["JobId"]] = fields
        return jobs

    def logs_tail(self) -> str:
        if self.state is None:
            return ""
        return "\n".join(_tail(p) for p in sorted((self.state / "log").glob("*")))

    # ---- stop --------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel the cluster's jobs, stop slurmd, slurmctld and munged (the processes this object
        started, by pid), keep the logs in ``keep_logs_in`` and remove the state directory."""
        if self._procs.get("slurmctld") and self._procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", "--user", str(os.geteuid()), timeout=20)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and any(
                    j.get("JobState") in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING") for j in self.jobs().values()
                ):
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError, ClusterError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self.state is not None and self.state.exists():
            if self.keep_logs_in is not None:
                shutil.copytree(self.state / "log", self.keep_logs_in, dirs_exist_ok=True)
                if self.conf.exists():
                    shutil.copy2(self.conf, self.keep_logs_in / "slurm.conf")
            shutil.rmtree(self.state, ignore_errors=True)
