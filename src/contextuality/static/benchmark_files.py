"""Which bundled benchmark files each of Table 1's tasks reads: one home for the loaders and the workflow.

The loaders (``contextuality.static.benchmarks``) open these paths, and the scoring rules declare them
as inputs (``benchmark_files``), so an edited file reruns exactly the scoring that reads it. No pandas
here: the Snakefile imports this module at every start.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from contextuality.paper import TABLE1_TASKS

# Each file a loader reads, relative to the benchmark folder (static.benchmark_dir).
SIMLEX999 = "wordsim/simlex999/SimLex-999.txt"
MEN = {"lemma": "wordsim/men/MEN_dataset_lemma_form_full", "natural": "wordsim/men/MEN_dataset_natural_form_full"}
WS353 = "wordsim/ws353/combined.csv"
RW = "wordsim/faruqui/EN-RW-STANFORD.txt"
RG65 = "wordsim/faruqui/EN-RG-65.txt"
MTURK287 = "wordsim/faruqui/EN-MTurk-287.txt"
WS353_RELATEDNESS = "wordsim/faruqui/EN-WS-353-REL.txt"
WS353_SIMILARITY = "wordsim/faruqui/EN-WS-353-SIM.txt"
GOOGLE = "analogy/google/questions-words.txt"
MSR = "analogy/msr/msr.csv"
SEMEVAL2012_2 = "analogy/semeval2012_task2"
SEMEVAL_SPLITS = {"train": ("Training",), "test": ("Testing",), "all": ("Training", "Testing")}
BLESS = "categorization/bless.csv"
AP = "categorization/ap.csv"
BATTIG = "categorization/battig.csv"
ESSLI_2C = "categorization/essli-2008.csv"


def semeval_files(benchmark_root: str | os.PathLike, which: str = "all") -> list[tuple[str, str, Path, Path]]:
    """SemEval-2012 Task 2's subcategories: (category, split folder, gold ratings file, Phase 1 question file)."""
    root = Path(benchmark_root) / SEMEVAL2012_2
    return [
        (cat, split, gold, root / split / "Phase1Questions" / f"Phase1Questions-{cat}.txt")
        for split in SEMEVAL_SPLITS[which]
        for gold in sorted((root / "GoldRatings" / split).glob("GoldRatings-*.txt"))
        for cat in [gold.stem.removeprefix("GoldRatings-")]
    ]


class Task(NamedTuple):
    """One word benchmark as the scoring knows it (``contextuality.static.scoring`` adds its loader and scorer)."""

    metric: str  # what its score is
    files: tuple[str, ...]  # the files its loader reads, as its loader is called there (SemEval's: semeval_files)


# Every task the scoring knows: Table 1's (contextuality.paper.TABLE1_TASKS) first, then the fork's others.
TASKS: dict[str, Task] = {
    "SimLex999": Task("spearman", (SIMLEX999,)), "MEN": Task("spearman", (MEN["lemma"],)),
    "WS353": Task("spearman", (WS353,)), "RW": Task("spearman", (RW,)), "Google": Task("accuracy", (GOOGLE,)),
    "MSR": Task("accuracy", (MSR,)), "SemEval2012_2": Task("spearman", ()), "BLESS": Task("purity", (BLESS,)),
    "AP": Task("purity", (AP,)), "RG65": Task("spearman", (RG65,)), "MTurk": Task("spearman", (MTURK287,)),
    "WS353R": Task("spearman", (WS353_RELATEDNESS,)), "WS353S": Task("spearman", (WS353_SIMILARITY,)),
    "Battig": Task("purity", (BATTIG,)), "ESSLI_2c": Task("purity", (ESSLI_2C,)),
}  # fmt: skip


def benchmark_files(benchmark_root: str | os.PathLike, tasks: Sequence[str] = TABLE1_TASKS) -> list[str]:
    """Every file the scoring of ``tasks`` reads under ``benchmark_root`` (the scoring rules' inputs), sorted."""
    root = Path(benchmark_root)
    files = {str(root / name) for task in tasks for name in (TASKS[task].files if task in TASKS else ())}
    if "SemEval2012_2" in tasks:
        files |= {str(path) for _, _, gold, question in semeval_files(root) for path in (gold, question)}
    return sorted(files)
