"""The steps of a run, declared once: what each one produces, when the configuration runs it and how the
report shows it.

A :class:`Step` names the rule that makes it, its config switch, the maps it reads, the outputs a run
asks for (paths under ``results/{run}/``), its summary for the manifest and its report pages
(:class:`Page`). ``workflow/rules/common.smk`` builds the target list (``all``), the manifest's summaries
and the report pages of every run from :data:`STEPS`; tests check the declarations against the rules, the
captions and the documentation. No Snakemake, torch or numpy here: the Snakefile imports it while the DAG
is built.

Adding an analysis: declare its :class:`Step` here (docs/ADDING_A_STEP.md walks through one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: report subcategories
TWIN_TABLES, RUN_TABLES = "Twins of the paper's tables", "Per-head and per-layer tables"
NORMS_SUB = "Norm-based maps (Kobayashi et al. 2020)"
ROLLOUT_SUB = "Attention rollout (Abnar & Zuidema 2020)"
CARD_SUB = "Per-head report card"
TREES_SUB = "Single-head trees (Htut et al. 2019)"
ABLATIONS_SUB = "Probe controls"
BEYOND = "Beyond the paper"

#: the switches a step can hang on (:func:`switches`); None: the step always runs
SWITCHES = ("probes", "random_init", "norms", "norm_probes", "rollout", "head_report", "tree_heads",
            "probe_ablations")
#: the attention maps a step can read
MAPS = ("attention", "norm", "rollout", "random_init")
#: the conda environments (envs/*.yaml)
ENVS = ("torch", "analysis")


@dataclass(frozen=True)
class Page:
    """One entry of the HTML report: a table or figure ``source`` (a path under results/{run}/), its
    ``page`` (file name under the report/ folder beside it), where the report lists it (``category``,
    ``subcategory``), its ``label`` and its caption file (under workflow/report/)."""

    source: str
    page: str
    category: str
    label: str
    caption: str
    subcategory: str | None = None


def figure_page(name: str, category: str, label: str, caption: str, subcategory: str | None = None) -> Page:
    """A figure's page: ``figures/<name>`` shown as ``report/<name>`` (page-sized)."""
    return Page(f"figures/{name}", name, category, label, caption, subcategory)


@dataclass(frozen=True)
class Step:
    """One analysis of a run, as the workflow and the report see it.

    ``name``: the step (the manifest's summary key for the steps beyond the paper); ``rule``: the rule that
    makes its outputs (default ``name``; several steps can share one job, e.g. the probes); ``switch``: a
    key of :func:`switches` (None: always on); ``maps``: the maps it reads (:data:`MAPS`); ``outputs``: what
    a run asks for, under results/{run}/; ``summary``: its summary JSON (listed in the manifest when
    ``beyond``); ``pages``: its report pages; ``syntax``: it also runs for every `treebanks` entry (the
    syntax runs); ``env``: its conda environment (:data:`ENVS`); ``beyond``: an analysis beyond the paper.
    """

    name: str
    outputs: tuple[str, ...]
    pages: tuple[Page, ...] = ()
    summary: str | None = None
    switch: str | None = None
    rule: str | None = None
    maps: tuple[str, ...] = ()
    syntax: bool = False
    env: str = "analysis"
    beyond: bool = False

    @property
    def rule_name(self) -> str:
        return self.rule or self.name


def _t(name: str) -> str:
    return f"tables/{name}"


def _f(name: str) -> str:
    return f"figures/{name}"


TABLE1 = Page(_t("table1.md"), "table1.html", "Tables", "Table 1 twin: single heads vs dependency relations",
              "table1.rst", TWIN_TABLES)
HEAD_ACCURACY = Page(_t("head_accuracy.csv"), "head_accuracy.html", "Tables",
                     "Accuracy of every head per relation (Table 1, Figure 5)", "head_accuracy.rst", RUN_TABLES)
FIG5 = figure_page("fig5_syntax_heads.png", "Figures", "Figure 5 twin: heads for dependency relations",
                   "fig5_syntax_heads.rst")

#: every step of a run whose outputs the run asks for, paper first, in manifest order
STEPS: tuple[Step, ...] = (
    Step("surface_stats", (_t("attention_stats.csv"),), maps=("attention",),
         pages=(Page(_t("attention_stats.csv"), "attention_stats.html", "Tables",
                     "Surface statistics per head (Figures 2 and 4)", "attention_stats.rst", RUN_TABLES),)),
    Step("cluster_heads", (_t("js_divergence.csv"), _t("head_clusters.csv")), maps=("attention",), env="torch",
         pages=(Page(_t("js_divergence.csv"), "js_divergence.html", "Tables",
                     "JS divergence between heads (Figure 6)", "js_divergence.rst", RUN_TABLES),
                Page(_t("head_clusters.csv"), "head_clusters.html", "Tables",
                     "Head embedding and behaviour labels (Figure 6)", "head_clusters.rst", RUN_TABLES))),
    Step("figures", tuple(_f(n) for n in ("fig1_example_heads.png", "fig2_special_tokens.png", "fig4_entropy.png",
                                          "fig6_head_clusters.png")),
         pages=(figure_page("fig1_example_heads.png", "Figures", "Figure 1 twin: example heads",
                            "fig1_example_heads.rst"),
                figure_page("fig2_special_tokens.png", "Figures",
                            "Figure 2 twin: attention to [CLS], [SEP], . and ,", "fig2_special_tokens.rst"),
                figure_page("fig4_entropy.png", "Figures", "Figure 4 twin: attention entropy", "fig4_entropy.rst"),
                figure_page("fig6_head_clusters.png", "Figures", "Figure 6 twin: head clusters",
                            "fig6_head_clusters.rst"))),
    Step("heads", (_t("head_accuracy.csv"), _t("table1.csv"), _t("table1.md"), _f("fig5_syntax_heads.png")),
         maps=("attention",), syntax=True, pages=(TABLE1, HEAD_ACCURACY, FIG5)),
    Step("probes", (_t("table3.csv"), _t("table3.md")), switch="probes", maps=("attention",), env="torch",
         pages=(Page(_t("table3.md"), "table3.html", "Tables", "Table 3 twin: attention-based probes", "table3.rst",
                     TWIN_TABLES),)),
    Step("coref", (_t("table2.csv"), _t("table2.md"), _t("coref_heads.csv")),
         pages=(Page(_t("table2.md"), "table2.html", "Tables", "Table 2 twin: coreference", "table2.rst",
                     TWIN_TABLES),)),
    Step("gradients", (_t("sep_gradients.csv"), _f("fig3_sep_gradients.png")),
         pages=(Page(_t("sep_gradients.csv"), "sep_gradients.html", "Tables",
                     "Gradients of attention to [SEP] per layer (Figure 3)", "sep_gradients.rst", RUN_TABLES),
                figure_page("fig3_sep_gradients.png", "Figures", "Figure 3 twin: gradients of attention to [SEP]",
                            "fig3_sep_gradients.rst"))),
    Step("compare", ("comparison.csv", "comparison.md"),
         pages=(Page("comparison.md", "comparison.html", "Comparison with the paper", "Comparison with the paper",
                     "comparison.rst"),)),
    # ---- beyond the paper (README "Beyond the paper"); the manifest lists their summaries
    Step("stats_norm", (_t("attention_stats_norm.csv"),), rule="surface_stats", switch="norms",
         maps=("norm",), beyond=True, summary=_t("attention_stats_norm.summary.json"),
         pages=(Page(_t("attention_stats_norm.csv"), "attention_stats_norm.html", BEYOND,
                     "Surface statistics per head, norm-based maps", "attention_stats_norm.rst", NORMS_SUB),)),
    Step("cluster_heads_norm", (_t("head_clusters_norm.csv"),), rule="cluster_heads", switch="norms",
         maps=("norm",), env="torch", beyond=True,
         pages=(Page(_t("head_clusters_norm.csv"), "head_clusters_norm.html", BEYOND,
                     "Head embedding and behaviour labels, norm-based maps", "head_clusters_norm.rst", NORMS_SUB),)),
    Step("heads_norm", (_t("table1_norm.csv"), _t("table1_norm.md")), rule="heads", switch="norms",
         maps=("norm",), beyond=True, summary=_t("head_accuracy_norm.summary.json"),
         pages=(Page(_t("table1_norm.md"), "table1_norm.html", BEYOND, "Table 1 on the norm-based maps",
                     "table1_norm.rst", NORMS_SUB),
                figure_page("fig5_syntax_heads_norm.png", BEYOND, "Figure 5 twin on the norm-based maps",
                            "fig5_syntax_heads_norm.rst", NORMS_SUB))),
    Step("fig_norms", (_f("fig_norms.png"),), rule="figures", switch="norms", maps=("attention", "norm"),
         beyond=True,
         pages=(figure_page("fig_norms.png", BEYOND, "Figure: attention vs norm-based maps", "fig_norms.rst",
                            NORMS_SUB),)),
    Step("probes_norm", (_t("table3_norm.csv"), _t("table3_norm.md")), rule="probes", switch="norm_probes",
         maps=("norm",), env="torch", beyond=True, summary=_t("table3_norm.summary.json"),
         pages=(Page(_t("table3_norm.md"), "table3_norm.html", BEYOND, "Table 3 on the norm-based maps",
                     "table3_norm.rst", NORMS_SUB),)),
    Step("rollout", (_t("rollout_stats.csv"), _f("fig_rollout.png")), switch="rollout", maps=("rollout",),
         beyond=True, summary=_t("rollout_stats.summary.json"),
         pages=(Page(_t("rollout_stats.csv"), "rollout_stats.html", BEYOND, "Rollout statistics per layer",
                     "rollout_stats.rst", ROLLOUT_SUB),
                figure_page("fig_rollout.png", BEYOND, "Figure: attention rollout by layer", "fig_rollout.rst",
                            ROLLOUT_SUB))),
    Step("rollout_table1", (_t("table1_rollout.csv"), _t("table1_rollout.md")), rule="rollout_words",
         switch="rollout", maps=("rollout",), beyond=True, summary=_t("table1_rollout.summary.json"),
         pages=(Page(_t("table1_rollout.md"), "table1_rollout.html", BEYOND, "Table 1 on the rollout maps",
                     "table1_rollout.rst", ROLLOUT_SUB),)),
    Step("head_report", (_t("head_report.csv"), _f("fig_head_report.png")), switch="head_report", beyond=True,
         summary=_t("head_report.summary.json"),
         pages=(Page(_t("head_report.csv"), "head_report.html", BEYOND, "Per-head report card (table)",
                     "head_report.rst", CARD_SUB),
                figure_page("fig_head_report.png", BEYOND, "Per-head report card (figure)", "fig_head_report.rst",
                            CARD_SUB))),
    Step("tree_heads", (_t("tree_heads.csv"), _t("tree_heads_best.csv"), _t("tree_heads.md"),
                        _f("fig_tree_heads.png")),
         switch="tree_heads", maps=("attention",), beyond=True, summary=_t("tree_heads.summary.json"),
         pages=(Page(_t("tree_heads.md"), "tree_heads.html", BEYOND, "Single-head trees: best head per layer",
                     "tree_heads_best.rst", TREES_SUB),
                Page(_t("tree_heads.csv"), "tree_heads_all.html", BEYOND, "Single-head trees: every head",
                     "tree_heads.rst", TREES_SUB),
                figure_page("fig_tree_heads.png", BEYOND, "Figure: single-head trees by layer", "fig_tree_heads.rst",
                            TREES_SUB))),
    Step("probe_ablations", (_t("probe_ablations.csv"), _t("probe_ablations.md")), rule="probes",
         switch="probe_ablations", maps=("attention",), env="torch", beyond=True,
         summary=_t("probe_ablations.summary.json"),
         pages=(Page(_t("probe_ablations.md"), "probe_ablations.html", BEYOND,
                     "Per-layer ablations of the Attn + GloVe probe", "probe_ablations.rst", ABLATIONS_SUB),)),
    Step("resources", ("resources.csv", "resources.md"),
         pages=(Page("resources.md", "resources.html", "Resources", "Measured resources per job",
                     "resources.rst"),)),
)

#: the steps every run has besides those of :data:`STEPS` (they make no table or figure of their own)
SUPPORT_RULES = ("segments", "extract_segments", "gather_extraction", "treebank", "extract_words", "gradients_shard",
                 "manifest", "report_pages")


def switches(config: Mapping[str, Any], has_train_split: bool) -> dict[str, bool]:
    """Which switchable steps a (validated) configuration runs. ``has_train_split``: the main treebank
    has a train split (the probes need one)."""
    probes = bool(has_train_split)
    norms = bool(config["norms"]["enabled"])
    return {
        "probes": probes,
        "random_init": probes and bool(config["probes"]["random_init"]),
        "norms": norms,
        "norm_probes": norms and probes and bool(config["norms"]["probes"]),
        "rollout": bool(config["rollout"]["enabled"]),
        "head_report": bool(config["head_report"]["enabled"]),
        "tree_heads": bool(config["tree_heads"]["enabled"]),
        "probe_ablations": probes and bool(config["probes"]["layer_ablations"]),
    }


def enabled_steps(on: Mapping[str, bool], *, beyond: bool | None = None) -> list[Step]:
    """The steps of :data:`STEPS` that the switches ``on`` (:func:`switches`) run, in order; ``beyond``:
    only those beyond the paper (True) or only the paper's (False)."""
    return [s for s in STEPS if (s.switch is None or on[s.switch]) and (beyond is None or s.beyond == beyond)]


def run_outputs(on: Mapping[str, bool]) -> list[str]:
    """What a model run asks for, under results/{run}/ (the manifest comes from the manifest rule)."""
    return [path for step in enabled_steps(on) for path in step.outputs]


def syntax_steps() -> list[Step]:
    """The steps of a syntax run (a `treebanks` entry: the trees, Table 1 and Fig 5)."""
    return [s for s in STEPS if s.syntax]


def run_pages(on: Mapping[str, bool]) -> list[Page]:
    """The report pages of a model run."""
    return [page for step in enabled_steps(on) for page in step.pages]


def syntax_pages() -> list[Page]:
    """The report pages of a syntax run."""
    return [page for step in syntax_steps() for page in step.pages]


def beyond_summaries(on: Mapping[str, bool]) -> dict[str, str]:
    """``{step name: its summary under results/{run}/}`` of the steps beyond the paper that run, for the
    manifest (in :data:`STEPS` order)."""
    return {s.name: s.summary for s in enabled_steps(on, beyond=True) if s.summary}


__all__ = ["BEYOND", "ENVS", "MAPS", "Page", "STEPS", "SUPPORT_RULES", "SWITCHES", "Step", "beyond_summaries",
           "enabled_steps", "figure_page", "run_outputs", "run_pages", "switches", "syntax_pages", "syntax_steps"]
