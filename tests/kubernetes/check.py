"""Assertions of tests/kubernetes/run.sh on the cluster's own records: one Kubernetes Job (and pod) per rule job.

  check.py JOBS_RUN1_JSON JOBS_JSON PODS_JSON LOCAL_LOG KILLED RUN2_START
JOBS_RUN1_JSON is `kubectl get jobs -o json` after the first run's abort, before its unfinished and failed
Jobs were deleted; JOBS_JSON and PODS_JSON the same for jobs and pods at the end; LOCAL_LOG the local
reference run's log (its job counts); KILLED how many pods the test killed on purpose (each a failed Job,
its rule job run again); RUN2_START when the second run (the rerun after the abort) started, as UTC
`%Y-%m-%dT%H:%M:%SZ`.

A rule job has two Jobs only where the first run's abort cut it off: the killed one, or one that was
running or waiting beside it (the rerun finds its output incomplete and runs it again). Then its first Job
was made before RUN2_START and its second after.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "slurm"))
from compare import LOCAL_RULES, fail, job_stats  # noqa: E402  (the SLURM proof's definitions)


def _command(job: dict) -> str:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return " ".join(container.get("args", []) + container.get("command", []))


def rule_job_of(job: dict) -> str:
    """The rule job a Kubernetes Job ran: `rule:wildcards`, from the plugin's --target-jobs argument."""
    match = re.search(r"--target-jobs '?([^' \"]+)'?", _command(job))
    if not match:
        fail(f"Job {job['metadata']['name']} runs no rule job: {_command(job)[:200]}")
    return match.group(1)


def main() -> None:
    run1 = {job["metadata"]["name"]: job for job in json.loads(Path(sys.argv[1]).read_text())["items"]}
    jobs = json.loads(Path(sys.argv[2]).read_text())["items"]
    pods = json.loads(Path(sys.argv[3]).read_text())["items"]
    expected = Counter(
        {rule: n for rule, n in job_stats(Path(sys.argv[4]).read_text()).items() if rule not in LOCAL_RULES}
    )
    killed, run2_start = int(sys.argv[5]), sys.argv[6]
    # every Job either run made: what the deletion between the runs removed, as run 1 left it
    deleted = [job for name, job in run1.items() if name not in {job["metadata"]["name"] for job in jobs}]
    if any(job["status"].get("succeeded") for job in deleted):
        fail(f"a succeeded Job of run 1 was deleted: {[job['metadata']['name'] for job in deleted]}")
    everything = jobs + deleted
    by_rule_job: dict[str, list[dict]] = defaultdict(list)
    for job in sorted(everything, key=lambda job: job["metadata"]["creationTimestamp"]):
        by_rule_job[rule_job_of(job)].append(job)
    # every rule job of the local run ran on the cluster, and nothing else did
    per_rule = Counter(rule_job.split(":")[0] for rule_job in by_rule_job)
    if per_rule != expected:
        fail(f"rule jobs run as Kubernetes Jobs {dict(per_rule)}, the local run's {dict(expected)}")
    failed = [job for job in everything if job["status"].get("failed")]
    if len(failed) != killed or any(job["metadata"]["name"] in run1 and job not in deleted for job in failed):
        fail(f"{len(failed)} failed Jobs, {killed} killed on purpose (run 1's deleted before run 2)")
    redone = []
    for rule_job, its_jobs in by_rule_job.items():
        if not its_jobs[-1]["status"].get("succeeded"):
            fail(f"{rule_job}: its last Job did not succeed")
        if len(its_jobs) == 1:
            continue
        created = [job["metadata"]["creationTimestamp"] for job in its_jobs]
        if len(its_jobs) != 2 or not created[0] < run2_start <= created[1]:
            fail(
                f"{rule_job}: {len(its_jobs)} Jobs, made at {created}; a rerun redoes only what the abort at "
                f"{run2_start} cut off"
            )
        redone.append(rule_job)
    by_job = Counter(pod["metadata"]["labels"].get("job-name") for pod in pods)
    if sorted(by_job) != sorted(job["metadata"]["name"] for job in jobs) or set(by_job.values()) != {1}:
        fail(f"not one pod per Job: {dict(by_job)}")
    phases = Counter(pod["status"]["phase"] for pod in pods)
    if phases != Counter({"Succeeded": len(jobs)}):
        fail(f"pod phases {dict(phases)} of the {len(jobs)} Jobs left")
    # every pod ran on the cluster's node, with hostNetwork from the test's webhook; extraction pods with a GPU limit
    gpu_pods = 0
    for pod in pods:
        spec = pod["spec"]
        if not spec.get("hostNetwork") or spec.get("nodeName") != "localhost":
            fail(f"pod {pod['metadata']['name']}: hostNetwork {spec.get('hostNetwork')}, node {spec.get('nodeName')}")
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        if limits.get("nvidia.com/gpu") == "1":
            gpu_pods += 1
    extraction_jobs = sum(rule_job_of(job).split(":")[0] == "extract" for job in jobs)
    if gpu_pods != extraction_jobs:
        fail(f"{gpu_pods} pods with limits nvidia.com/gpu: 1, {extraction_jobs} extraction pods")
    before = sum(job["metadata"]["creationTimestamp"] < run2_start for job in everything)
    unfinished = [rule_job_of(job) for job in deleted if not job["status"].get("failed")]
    print(
        f"ok: {len(everything)} Kubernetes Jobs ({before} in run 1, {len(everything) - before} in run 2; "
        f"deleted between the runs: {len(deleted) - len(unfinished)} failed, {len(unfinished)} unfinished "
        f"{sorted(unfinished)}), one pod each for the {len(jobs)} left ({dict(phases)}), for the local run's "
        f"{sum(expected.values())} rule jobs "
        f"({dict(sorted(expected.items()))}): each ran once, except {killed} killed on purpose and "
        f"{len(redone) - killed} cut off by run 1's abort, run again by run 2 ({', '.join(sorted(redone))}); "
        f"{gpu_pods} extraction pods with requests = limits nvidia.com/gpu: 1"
    )


if __name__ == "__main__":
    main()
