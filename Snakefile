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


# Every other rule file, one per step, in pipeline order (a rule may name an earlier file's rules as
# `rules.X`); a new step's .smk comes last and is picked up without a line here (docs/ADDING_A_STEP.md).
for rule_file in step_rule_files():

    include: rule_file


rule all:
    default_target: True
    input:
        all_outputs(),


# A finished run speaks to a person: what it found beside the paper, where the results are, how long it took
# (bertlook.reporting.run_summary; not after a dry run, --report or a job of a cluster run).
onsuccess:
    print_run_summary()
