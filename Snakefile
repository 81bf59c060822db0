# bertlook: "What Does BERT Look At?" (Clark et al., 2019), from corpus to tables and figures.
#   snakemake --cores all                                   # paper configuration (config.yaml)
#   snakemake --cores all --configfile config/offline.yaml  # offline configuration
#   snakemake --report results/<run>/report.html            # HTML report of a finished run
from snakemake.utils import min_version

min_version("8.20")


# The paper configuration, unless --configfile/--config gave another one (e.g. config/offline.yaml).
if not config:

    configfile: "config.yaml"



report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/segments.smk"
include: "workflow/rules/extract_segments.smk"
include: "workflow/rules/surface_stats.smk"
include: "workflow/rules/cluster_heads.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/treebank.smk"
include: "workflow/rules/extract_words.smk"
include: "workflow/rules/heads.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/tree_heads.smk"
include: "workflow/rules/coref.smk"
include: "workflow/rules/gradients.smk"
include: "workflow/rules/rollout.smk"
include: "workflow/rules/head_report.smk"
include: "workflow/rules/languages.smk"
include: "workflow/rules/manifest.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/report_pages.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
