"""Assertions of tests/kubernetes/run.sh on the cluster's own records: one Kubernetes Job (and pod) per rule job.

  check.py JOBS_JSON PODS_JSON LOCAL_LOG KILLED
JOBS_JSON and PODS_JSON are `kubectl get jobs|pods -o json`; LOCAL_LOG the local reference run's log (its
job counts); KILLED how many pods the test killed on purpose (each a failed Job, its rule job run again).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "slurm"))
from compare import LOCAL_RULES, fail, job_stats  # noqa: E402  (the SLURM proof's definitions)


def rule_of(job: dict) -> str:
    command = " ".join(job["spec"]["template"]["spec"]["containers"][0].get("args", []) +
                       job["spec"]["template"]["spec"]["containers"][0].get("command", []))
    match = re.search(r"--allowed-rules '?(\w+)'?", command)
    if not match:
        fail(f"Job {job['metadata']['name']} runs no rule job: {command[:200]}")
    return match.group(1)


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())["items"]
    pods = json.loads(Path(sys.argv[2]).read_text())["items"]
    expected = Counter({rule: n for rule, n in job_stats(Path(sys.argv[3]).read_text()).items() if rule not in LOCAL_RULES})
    killed = int(sys.argv[4])
    succeeded = Counter(rule_of(job) for job in jobs if job["status"].get("succeeded"))
    failed = Counter(rule_of(job) for job in jobs if job["status"].get("failed"))
    if succeeded != expected:
        fail(f"succeeded Jobs per rule {dict(succeeded)}, the local run's rule jobs {dict(expected)}")
    if sum(failed.values()) != killed or len(jobs) != sum(expected.values()) + killed:
        fail(f"{len(jobs)} Jobs, {dict(failed)} failed; expected {sum(expected.values())} + {killed} killed")
    by_job = Counter(pod["metadata"]["labels"].get("job-name") for pod in pods)
    if sorted(by_job) != sorted(job["metadata"]["name"] for job in jobs) or set(by_job.values()) != {1}:
        fail(f"not one pod per Job: {dict(by_job)}")
    phases = Counter(pod["status"]["phase"] for pod in pods)
    if phases != Counter({"Succeeded": len(jobs) - killed, **({"Failed": killed} if killed else {})}):
        fail(f"pod phases {dict(phases)}")
    # every pod ran on the cluster's node, with hostNetwork from the test's webhook; extraction pods with a GPU limit
    gpu_pods = 0
    for pod, job in ((pod, pod["metadata"]["labels"]["job-name"]) for pod in pods):
        spec = pod["spec"]
        if not spec.get("hostNetwork") or spec.get("nodeName") != "localhost":
            fail(f"pod {pod['metadata']['name']}: hostNetwork {spec.get('hostNetwork')}, node {spec.get('nodeName')}")
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        if limits.get("nvidia.com/gpu") == "1":
            gpu_pods += 1
    n_extract = expected["extract"] + expected.get("senses_extract", 0) + killed
    if gpu_pods != n_extract:
        fail(f"{gpu_pods} pods with limits nvidia.com/gpu: 1, {n_extract} extraction pods")
    print(f"ok: {len(jobs)} Kubernetes Jobs, one pod each ({dict(phases)}): one per rule job of the local run "
          f"({sum(expected.values())}: {dict(sorted(expected.items()))}) plus {killed} killed on purpose; "
          f"{gpu_pods} extraction pods with requests = limits nvidia.com/gpu: 1")


if __name__ == "__main__":
    main()
