"""What every job shares: its log (logging and stderr, tqdm's bars), the one-line end of an expected error, a
workflow script's start and files (``script_job``, ``job_files``), the package's place on the jobs' PYTHONPATH, and
pausing the garbage collector over allocation-heavy work."""

from __future__ import annotations

import gc
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from contextuality.core.archive import unpacked


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


def terminal_width() -> int | None:
    """The columns of the terminal watching the run (``COLUMNS``, else the run's stderr's own), or None where its
    output is a file or a pipe (a CI log, the tests): there a line stays one line."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(sys.__stderr__.fileno()).columns if sys.__stderr__.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


def for_terminal(line: str) -> str:
    """``line`` broken at spaces into lines no wider than the terminal (``terminal_width``), the later ones indented,
    so no line of the project's runs over its width."""
    width = terminal_width()
    if not width or len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


# A local run's file of the jobs' lines for its terminal, which its main process shows through Snakemake's logger
# (contextuality.workflow.terminal): set by common.smk, inherited by the jobs
TERMINAL_LINES_ENV = "CONTEXTUALITY_TERMINAL_LINES"


def to_terminal(line: str) -> None:
    """``line`` for the person watching the run. Written to the terminal by a job, it would land inside the rich
    logger's progress display, which erases it at its next refresh: a local run's jobs append it to the run's file
    (``TERMINAL_LINES_ENV``) instead, and elsewhere (a cluster's job, no run) it goes to stderr."""
    relay = os.environ.get(TERMINAL_LINES_ENV)
    if relay:
        try:
            with open(relay, "a", encoding="utf-8") as lines:  # one short append: whole, beside the other jobs'
                lines.write(line + "\n")
            return
        except OSError:
            pass
    print(for_terminal(line), file=sys.__stderr__, flush=True)


def tell_terminal(line: str) -> None:
    """One line for the person watching the run (``to_terminal``, no wider than its terminal), and to the log."""
    logging.getLogger("contextuality").info("%s", line)
    if sys.stderr is not sys.__stderr__:  # stderr is the log (setup_job_logging), which has it already
        to_terminal(line)


@contextmanager
def expected_errors(*kinds: type[BaseException]):
    """End the job on an expected error (bad input, settings that cannot work) with its one line first.

    A traceback would put the message last, under ten lines of frames. Instead the line goes to the
    job's log and to the terminal's stderr, where Snakemake's report of the failed job follows it, and
    the job exits with status 1. Any other exception keeps its traceback (in the log).
    """
    try:
        yield
    except kinds as err:
        logging.getLogger("contextuality").error("%s", err)
        if sys.stderr is not sys.__stderr__:  # stderr is the log (setup_job_logging): tell the terminal too
            to_terminal(str(err))
        raise SystemExit(1) from None


@contextmanager
def script_job(job, *expected: type[BaseException]):
    """A workflow script's job (``job``: its ``snakemake`` object): its log set up (``setup_job_logging`` of the rule's
    log, stderr where it has none) and each ``expected`` error ended as its one line (``expected_errors``).
    Yields the job's logger."""
    log = setup_job_logging(job.log[0] if job.log else None)
    with expected_errors(*expected):
        yield log


def job_files(job, inputs: Sequence[str] = (), outputs: Sequence[str] = ()) -> dict[str, Path]:
    """A workflow script's files (``job``: its ``snakemake`` object) named as the job's entry point takes them:
    input ``x`` as ``x_path`` (but input ``model``, the model folder's tar, unpacked as ``model_dir``), output ``x`` as
    ``out_x``."""
    files = {f"{name}_path": Path(getattr(job.input, name)) for name in inputs if name != "model"}
    if "model" in inputs:
        files["model_dir"] = unpacked(job.input.model)
    return files | {f"out_{name}": Path(getattr(job.output, name)) for name in outputs}


def prepend_python_path(folder: str | Path) -> None:
    """Put ``folder`` first on the PYTHONPATH every job inherits (the conda environments do not install
    the project, so its jobs import it from ``src/``)."""
    current = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), current]))


@contextmanager
def collection_paused():
    """No garbage collection inside. For stretches that allocate many short-lived acyclic objects (the
    tokenizer's output, a layer's measurement) in a process holding many long-lived ones (a loaded model,
    a units table): a full collection they set off walks every one of those to free nothing (0.1-0.4 s)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
