# contextuality: how contextual are a model's word representations? (Ethayarajh, EMNLP 2019, for any model)
# Thin entry point: configuration, validation and helpers live in workflow/rules/common.smk,
# one rule family per file in workflow/rules/, the logic in the contextuality package (src/).
import os

from snakemake.utils import min_version

from contextuality.workflow.targets import report_config

min_version("9.6")


# The default run, unless --configfile names another (which then replaces it rather than merging
# into it: a paper run must not inherit the default's models; `--configfile config/config.yaml my.yaml` adds to
# it). `--report` without --configfile reports the last run here that built something, with its config
# (.snakemake/contextuality/run_config.yaml).
if not workflow.overwrite_configfiles:

    configfile: report_config() or "config/config.yaml"


report: "workflow/report/workflow.rst"


# The image every job runs in with --software-deployment-method apptainer (ignored otherwise): an apptainer
# image file beside this Snakefile, made from the job image of profiles/kubernetes/image (this project and its
# pinned dependencies) with its build.sh and `apptainer build`; no registry is needed. CONTEXTUALITY_IMAGE names
# another image, a file or a `docker://` address (docs/usage.md, "Scale out").
container: os.environ.get("CONTEXTUALITY_IMAGE", os.path.join(workflow.basedir, "contextuality-image.sif"))


include: "workflow/rules/common.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/static_embeddings.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/senses.smk"
include: "workflow/rules/similarity.smk"


rule all:
    default_target: True
    input:
        final_outputs,
