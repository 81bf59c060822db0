# Step `atlas`: its own functions and values, included by workflow/rules/atlas.smk (Snakemake's linter wants
# rules and functions in separate files): whether the atlas is made, its inputs, its configuration file, and
# the onerror handler that renders it after a failed run.
import hashlib
import shutil
import subprocess

from bertlook.pipeline.shellcmd import command

ATLAS_DIR = os.path.join(RESULTS, f"{config['run_name']}-atlas")
ATLAS_FILES = ("atlas.html", "atlas.csv", "atlas.json")


def atlas_on():
    """config atlas.enabled: true or false, or null (the default): on with two or more models."""
    enabled = config["atlas"]["enabled"]
    return len(MODEL_RUNS) > 1 if enabled is None else bool(enabled)


def atlas_outputs():
    """What the atlas rule writes, {results_dir}/{run_name}-atlas/atlas.{html,csv,json}; none when it is off."""
    return [os.path.join(ATLAS_DIR, name) for name in ATLAS_FILES] if atlas_on() else []


def atlas_inputs():
    """Every model run's outputs that `all` asks for (its results, manifest and resources tables) but its
    report pages: the atlas comes after every model's run is complete."""
    runs = tuple(os.path.join(RESULTS, run) + os.sep for run in MODEL_RUNS)
    return [path for path in all_outputs() if path.startswith(runs) and not is_report_page(path)]


def atlas_config_file():
    """The configuration of this run (validated, defaults filled; --configfile and --config together) as the
    JSON file `bertlook atlas CONFIG` reads: .snakemake/bertlook/config-<sha256 of it>.json below the
    working directory. Written when the workflow is read (by every snakemake that reads it: the same bytes,
    replaced atomically), so that the atlas rule and the onerror handler read what the jobs ran with."""
    text = json.dumps(config, sort_keys=True, indent=1) + "\n"
    path = Path(".snakemake", "bertlook", f"config-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
    return str(path)


ATLAS_ARGS = dict(positional=[atlas_config_file()] if atlas_on() else [], out=ATLAS_DIR)


def render_atlas_after_error():
    """The onerror handler (workflow/Snakefile): after a run in which a job failed (keep-going: every other
    model went on), `bertlook atlas` renders the page of the models that did run -- the atlas rule's own
    command line, every value quoted -- into {run_name}-atlas/, its output in {run_name}-all-models/logs/
    atlas_onerror.log. Nothing when the atlas is off; its own failure is reported, never raised."""
    if not atlas_on():
        return
    log = os.path.join(SUMMARY_DIR, "logs", "atlas_onerror.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    cmd = command(BERTLOOK, "atlas", {"out": ATLAS_DIR}, args=ATLAS_ARGS["positional"])
    with open(log, "w") as out:
        out.write(f"{cmd}\n")
        out.flush()
        code = subprocess.run(
            cmd, shell=True, executable=shutil.which("bash"), stdout=out, stderr=subprocess.STDOUT
        ).returncode
    page = os.path.join(ATLAS_DIR, "atlas.html")
    if code == 0:
        print(f"\nSome jobs failed (above); the atlas of the models that ran: {page} (log: {log})", flush=True)
    else:
        print(f"\nSome jobs failed (above), and so did the atlas (exit {code}): see {log}", flush=True)
