"""What every Snakemake script does first: send logging and stderr (tqdm bars) to the job's log."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def setup_job_logging(log_path: str | Path | None) -> logging.Logger:
    """Log to ``log_path`` (and keep stderr, tqdm's stream, in that file too)."""
    handlers: list[logging.Handler] = []
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        stream = open(log_path, "w", buffering=1, encoding="utf-8")
        sys.stderr = stream
        handlers.append(logging.StreamHandler(stream))
    else:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers, force=True
    )
    return logging.getLogger("contextuality")
