# What every rule is made of -- its command line (bertlook_cmd, CMD), log and benchmark paths, resources
# (step_resources, rule_resource) -- and put together by the rule templates of the Snakefile
# (_analysis_step, _torch_step, _model_step, _download). Included by the Snakefile after common.smk.
from functools import cache

from bertlook.pipeline.shellcmd import command

# The step CLI, run from this checkout's src/ with the Python that runs Snakemake, or with the
# rule's conda env Python under --software-deployment-method conda. The two paths are passed in the
# environment (BERTLOOK_SRC, BERTLOOK_PYTHON, set here each time the Snakefile is parsed: by the
# snakemake that runs a job, locally or in a SLURM job alike), not written into the command line:
# the command lines (rule params) are copied into the HTML report, which must not carry the
# checkout's or the virtualenv's absolute paths. A command copied from a log by hand falls back to
# `python` on PATH and `src` below the current directory (the checkout's root). Never from a config value.
os.environ["BERTLOOK_SRC"] = str(BERTLOOK_ROOT / "src")
os.environ["BERTLOOK_PYTHON"] = (
    "python" if "conda" in str(workflow.deployment_settings.deployment_method).lower() else sys.executable
)


envvars:
    "BERTLOOK_SRC",
    "BERTLOOK_PYTHON",


BERTLOOK = 'PYTHONPATH="${BERTLOOK_SRC:-src}${PYTHONPATH:+:$PYTHONPATH}" "${BERTLOOK_PYTHON:-python}" -m bertlook'


# ---- command lines ------------------------------------------------------------------------------
# Every rule has exactly one parameter, `cmd = bertlook_cmd(STEP, ...)`, and the shell line CMD.
# Flag values are constants (config values), or IN.x / OUT.x / WC.x / functions of
# (wildcards, input, output) resolved when the job runs; bertlook.pipeline.shellcmd.command quotes every
# one of them. None/False leave a flag out, True gives the bare flag, a list repeats it.
CMD = "{params.cmd} > {log:q} 2>&1"


class _JobRef:
    """IN.name / OUT.name / WC.name: a job's named input, output or wildcard value."""

    def __init__(self, kind):
        self._kind = kind

    def __getattr__(self, name):
        kind = self._kind

        def get(wildcards, input, output):
            return getattr({"input": input, "output": output, "wildcards": wildcards}[kind], name)

        return get


IN, OUT, WC = _JobRef("input"), _JobRef("output"), _JobRef("wildcards")


def bertlook_cmd(step, *flag_groups, omp_threads=False, positional=(), **flags):
    """params function: the whole `bertlook STEP ...` command line of a job, every value quoted.
    flag_groups: functions of (wildcards, input, output) returning a dict of flags (e.g. the model);
    positional: the step's positional arguments (constants), before the flags."""

    def cmd(wildcards, input, output, threads):
        values = {}
        for group in flag_groups:
            values.update(group(wildcards, input, output))
        for name, value in flags.items():
            values[name] = value(wildcards, input, output) if callable(value) else value
        env = {"OMP_NUM_THREADS": threads} if omp_threads else None
        return command(BERTLOOK, step, values, env, args=positional)

    return cmd


def model_cmd(step, **flags):
    """bertlook_cmd of a step that runs the run's model (--model/--revision, OMP_NUM_THREADS = threads)."""
    return bertlook_cmd(step, model_flags, omp_threads=True, **flags)


def settings(section, *keys):
    """Flags taken as they are from one config section: ``**settings("clustering", "mds_eps")`` is
    ``mds_eps=config["clustering"]["mds_eps"]``."""
    return {key: config[section].get(key) for key in keys}


def log_path(rule_name):
    return run_path("logs", f"{rule_name}.log")


def bench_path(rule_name):
    """Snakemake benchmark file (wall time, max RSS, I/O) of a rule, per run."""
    return run_path("benchmarks", f"{rule_name}.tsv")


# ---- resources ------------------------------------------------------------------------------------
RULE_COSTS = declared_costs()  # what the jobs of every rule cost (bertlook.pipeline.costs), read by step_resources


def step_resources(rule):
    """mem_mb / runtime / disk_mb of a rule (bertlook.pipeline.sizing) from the cost its declaration gives (its
    step's `cost`, or the COSTS table of its CLI module); an undeclared rule is an error naming it."""
    return sizing.snakemake_resources(rule, config, RULE_COSTS)


def rule_resource(key):
    """A resource of the templates: ``step_resources`` of the rule made from them, by the name Snakemake
    passes (``rulename``), made once per rule."""
    return lambda wildcards, input, attempt, rulename: _resources_of(rulename)[key](wildcards, input, attempt)


@cache
def _resources_of(rulename):
    """step_resources of the rule Snakemake calls ``rulename``, by its name in this workflow (``rules.NAME``),
    also when bertlook runs as a module whose rules are renamed (`use rule * from bertlook as bertlook_*`);
    the name in this workflow is then the part of ``rulename`` whose rule is that one."""
    names = (rulename[i:j] for n in range(len(rulename), 0, -1) for i in range(len(rulename) - n + 1) for j in [i + n])
    own = next((name for name in names if rules.has(name) and getattr(rules, name).rule.name == rulename), rulename)
    return step_resources(own)


def download_cmd(section):
    """The command of a download rule of ``config[section]`` (wikipedia or glove)."""
    return bertlook_cmd(
        "download",
        url=config[section]["url"],
        out=OUT.file,
        **settings(section, "sha256", "sha1sums_url"),
        summary=OUT.summary,
    )
