"""Which bundled benchmark files each of Table 1's tasks reads: one home for the loaders and the workflow.

The loaders (``contextuality.static.benchmarks``) open these paths, and the scoring rules declare them
as inputs (``benchmark_files``), so an edited file reruns exactly the scoring that reads it. No pandas
here: the Snakefile imports this module at every start.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

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


# Task name (contextuality.static.scoring) -> the files its loader reads, as its loader is called there.
_FIXED_FILES = {
    "SimLex999": [SIMLEX999], "MEN": [MEN["lemma"]], "WS353": [WS353], "RW": [RW], "Google": [GOOGLE], "MSR": [MSR],
    "BLESS": [BLESS], "AP": [AP], "RG65": [RG65], "MTurk": [MTURK287], "WS353R": [WS353_RELATEDNESS],
    "WS353S": [WS353_SIMILARITY], "Battig": [BATTIG], "ESSLI_2c": [ESSLI_2C],
}


def benchmark_files(benchmark_root: str | os.PathLike, tasks: Sequence[str] = TABLE1_TASKS) -> list[str]:
    """Every file the scoring of ``tasks`` reads under ``benchmark_root`` (the scoring rules' inputs), sorted."""
    root = Path(benchmark_root)
    files = {str(root / name) for task in tasks for name in _FIXED_FILES.get(task, [])}
    if "SemEval2012_2" in tasks:
        files |= {str(path) for _, _, gold, question in semeval_files(root) for path in (gold, question)}
    return sorted(files)
