"""The steps of a run, declared once: what each one produces, when the configuration runs it, how the
report shows it and which of its numbers the regression gate checks.

A :class:`Step` names the rule that makes it, its config switch, the maps it reads, the outputs a run
asks for (paths under ``results/{run}/``), its summary for the manifest, its report pages
(:class:`Page`), its golden tables (:class:`GoldenTable`) and what its rule's jobs cost
(:class:`bertlook.pipeline.costs.Cost`). Each step is declared next to its command,
in the ``STEPS`` tuple of its CLI module (``bertlook.cli.<step>``); :func:`bertlook.cli.declared_steps`
gathers them. ``workflow/rules/common.smk`` builds the target list (``all``), the manifest's summaries and
the report pages from them, ``rule_helpers.smk`` the resources of every rule, ``bertlook make-golden`` / ``check-regression`` their golden
groups; tests check the declarations against the rules, the captions and the documentation. The functions
here take the declarations as an argument. No Snakemake, torch or numpy here: the Snakefile imports it
while the DAG is built.

Adding an analysis: docs/ADDING_A_STEP.md walks through one.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # the declarations' costs: bertlook --help imports this module, not the sizing model
    from bertlook.pipeline.costs import Cost

#: report subcategories
TWIN_TABLES, RUN_TABLES = "Twins of the paper's tables", "Per-head and per-layer tables"
NORMS_SUB = "Norm-based maps (Kobayashi et al. 2020)"
CONTRIBUTIONS_SUB = "ALTI and value zeroing (Ferrando et al. 2022; Mohebbi et al. 2023)"
ROLLOUT_SUB = "Attention rollout (Abnar & Zuidema 2020)"
CARD_SUB = "Per-head report card"
TREES_SUB = "Single-head trees (Htut et al. 2019)"
ABLATIONS_SUB = "Probe controls"
BEYOND = "Beyond the paper"

#: the switches that are more than one config key (:func:`switches`); any other switch of a step names a
#: config section with an ``enabled`` key (``norms``, ``rollout``, ``tree_heads``, a new step's)
COMPOSITE_SWITCHES = ("probes", "random_init", "norm_probes", "probe_ablations")
#: the caption of a page declared without one of its own (under workflow/report/)
GENERIC_CAPTION = "step_page.rst"
#: the attention maps a step can read
MAPS = ("attention", "norm", "rollout", "random_init", "alti")
#: the conda environments (envs/*.yaml)
ENVS = ("torch", "analysis")


@dataclass(frozen=True)
class Page:
    """One entry of the HTML report: a table or figure ``source`` (a path under results/{run}/), its
    ``page`` (file name under the report/ folder beside it), where the report lists it (``category``,
    ``subcategory``), its ``label`` and its caption file (under workflow/report/); the optional fields are
    keywords."""

    source: str
    page: str
    category: str
    label: str
    _: KW_ONLY
    caption: str | None = None
    subcategory: str | None = None

    @property
    def caption_file(self) -> str:
        """The caption file under workflow/report/ (:data:`GENERIC_CAPTION` when none was declared)."""
        return self.caption or GENERIC_CAPTION


def figure_page(name: str, category: str, label: str, *, caption: str | None = None,
                subcategory: str | None = None) -> Page:
    """A figure's page: ``figures/<name>`` shown as ``report/<name>`` (page-sized)."""
    return Page(f"figures/{name}", name, category, label, caption=caption, subcategory=subcategory)


@dataclass(frozen=True)
class GoldenTable:
    """A golden group of every cell of a table the step writes (``path`` under results/{run}/, numbers at
    6 significant digits): rows keyed by the columns ``keys``; ``absent`` when the step is switched off,
    ``not run`` when the table says so in a ``note`` column (:mod:`bertlook.reporting.golden`)."""

    group: str
    path: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One analysis of a run, as the workflow and the report see it.

    ``name``: the step (the manifest's summary key for the steps beyond the paper); ``rule``: the rule that
    makes its outputs (default ``name``; several steps can share one job, e.g. the probes); ``switch``: a
    key of :func:`switches` (None: always on); ``maps``: the maps it reads (:data:`MAPS`); ``outputs``: what
    a run asks for, under results/{run}/; ``summary``: its summary JSON (listed in the manifest when
    ``beyond``); ``pages``: its report pages; ``golden``: the tables the regression gate checks cell by
    cell (the paper's tables have hand-written groups in :mod:`bertlook.reporting.golden`); ``syntax``: it
    also runs for every `treebanks` entry (the syntax runs); ``env``: its conda environment (:data:`ENVS`);
    ``beyond``: an analysis beyond the paper; ``cost``: what its rule's jobs cost (:mod:`bertlook.pipeline.costs`,
    read by :mod:`bertlook.pipeline.sizing`; declared once per rule: a step sharing another step's rule leaves it
    None); ``needs``: the switches of other steps its inputs come from (it is off when one of them is). Every
    field after ``outputs`` is a keyword.
    """

    name: str
    outputs: tuple[str, ...]
    _: KW_ONLY
    pages: tuple[Page, ...] = ()
    summary: str | None = None
    switch: str | None = None
    rule: str | None = None
    maps: tuple[str, ...] = ()
    syntax: bool = False
    env: str = "analysis"
    beyond: bool = False
    golden: tuple[GoldenTable, ...] = ()
    cost: Cost | None = None
    needs: tuple[str, ...] = ()

    @property
    def rule_name(self) -> str:
        return self.rule or self.name


def table(name: str) -> str:
    """``tables/<name>``: a table of a run."""
    return f"tables/{name}"


def figure(name: str) -> str:
    """``figures/<name>``: a figure of a run."""
    return f"figures/{name}"


#: the steps every run has besides the declared ones (they make no table or figure of their own)
SUPPORT_RULES = ("segments", "extract_segments", "gather_extraction", "treebank", "extract_words", "gradients_shard",
                 "manifest", "report_pages")


def check_steps(declared: Sequence[Step]) -> tuple[Step, ...]:
    """``declared``, checked: unique names, known maps and envs, relative outputs without wildcards, summaries
    only beyond the paper (the manifest rule lists the paper's), unique report page names and golden groups.
    A mistake in a declaration fails the DAG build with the step's name."""
    seen: dict[str, set[str]] = {"step": set(), "page": set(), "golden group": set()}

    def once(kind: str, name: str, step: Step) -> None:
        if name in seen[kind]:
            raise ValueError(f"step {step.name!r}: {kind} {name!r} is declared twice")
        seen[kind].add(name)

    for step in declared:
        once("step", step.name, step)
        problems = [f"map kind {m!r} (known: {', '.join(MAPS)})" for m in step.maps if m not in MAPS]
        problems += [f"env {step.env!r} (known: {', '.join(ENVS)})"] if step.env not in ENVS else []
        problems += [f"output {o!r} (a path under results/{{run}}/, no wildcard)" for o in step.outputs
                     if not o or o.startswith("/") or "{" in o]
        if step.summary and not step.beyond:
            problems.append("a summary, but the step is the paper's (manifest.smk lists those)")
        problems += [f"page {p.page!r} (an .html or .png)" for p in step.pages
                     if not p.page.endswith((".html", ".png"))]
        if problems or not step.outputs:
            raise ValueError(f"step {step.name!r}: bad declaration: {'; '.join(problems) or 'no outputs'}")
        for page in step.pages:
            once("page", page.page, step)
        for table in step.golden:
            once("golden group", table.group, step)
    return tuple(declared)


def switches(config: Mapping[str, Any], has_train_split: bool, declared: Sequence[Step] = ()) -> dict[str, bool]:
    """Which switchable steps a (validated) configuration runs: the :data:`COMPOSITE_SWITCHES`, ``norms``
    and every other switch of the ``declared`` steps (``config[switch]["enabled"]``). ``has_train_split``:
    the main treebank has a train split (the probes need one)."""
    probes = bool(has_train_split)
    on = {name: bool(config[name]["enabled"]) for name in ("norms", *(s.switch for s in declared if s.switch))
          if name not in COMPOSITE_SWITCHES}
    for step in declared:  # a step whose inputs come from a switched-off step is off too
        if step.switch in on and step.needs:
            on[step.switch] = on[step.switch] and all(on.get(n, True) for n in step.needs)
    return {
        **on,
        "probes": probes,
        "random_init": probes and bool(config["probes"]["random_init"]),
        "norm_probes": on["norms"] and probes and bool(config["norms"]["probes"]),
        "probe_ablations": probes and bool(config["probes"]["layer_ablations"]),
    }


def enabled_steps(declared: Sequence[Step], on: Mapping[str, bool], *, beyond: bool | None = None) -> list[Step]:
    """The ``declared`` steps that the switches ``on`` (:func:`switches`) run, in order; ``beyond``: only
    those beyond the paper (True) or only the paper's (False)."""
    return [s for s in declared if (s.switch is None or on[s.switch]) and (beyond is None or s.beyond == beyond)]


def run_outputs(declared: Sequence[Step], on: Mapping[str, bool]) -> list[str]:
    """What a model run asks for, under results/{run}/ (the manifest comes from the manifest rule)."""
    return [path for step in enabled_steps(declared, on) for path in step.outputs]


def syntax_steps(declared: Sequence[Step]) -> list[Step]:
    """The steps of a syntax run (a `treebanks` entry: the trees, Table 1 and Fig 5)."""
    return [s for s in declared if s.syntax]


def run_pages(declared: Sequence[Step], on: Mapping[str, bool]) -> list[Page]:
    """The report pages of a model run."""
    return [page for step in enabled_steps(declared, on) for page in step.pages]


def syntax_pages(declared: Sequence[Step]) -> list[Page]:
    """The report pages of a syntax run."""
    return [page for step in syntax_steps(declared) for page in step.pages]


def beyond_summaries(declared: Sequence[Step], on: Mapping[str, bool]) -> dict[str, str]:
    """``{step name: its summary under results/{run}/}`` of the steps beyond the paper that run, for the
    manifest (in declaration order)."""
    return {s.name: s.summary for s in enabled_steps(declared, on, beyond=True) if s.summary}


def golden_tables(declared: Sequence[Step]) -> list[GoldenTable]:
    """The golden tables of every declared step, switched on or not (a switched-off step's group is
    ``absent``: the golden file says what a run left out)."""
    return [table for step in declared for table in step.golden]


def rule_costs(declared: Sequence[Step], tables: Sequence[Mapping[str, Cost]] = ()) -> dict[str, Cost]:
    """``{rule: its cost}`` from the costs of the ``declared`` steps and the ``tables`` of rules without a step
    (the ``COSTS`` of the CLI modules); a rule whose cost is declared twice is an error naming it."""
    found: dict[str, Cost] = {}
    for rule, cost in [(s.rule_name, s.cost) for s in declared if s.cost] + [kv for t in tables for kv in t.items()]:
        if rule in found:
            raise ValueError(f"rule {rule!r}: its cost is declared twice")
        found[rule] = cost
    return found


__all__ = ["BEYOND", "COMPOSITE_SWITCHES", "ENVS", "GENERIC_CAPTION", "GoldenTable", "MAPS", "Page", "SUPPORT_RULES",
           "Step", "beyond_summaries", "check_steps", "enabled_steps", "figure", "figure_page", "golden_tables",
           "rule_costs", "run_outputs", "run_pages", "switches", "syntax_pages", "syntax_steps", "table"]
