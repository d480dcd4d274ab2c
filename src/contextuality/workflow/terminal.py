"""The jobs' lines for the person watching a local run, shown by Snakemake's own logger.

A job's line written straight to the terminal lands inside the rich logger's progress display (profiles/default),
which erases it at its next refresh. So a local run names a file in ``TERMINAL_LINES_ENV``; its jobs append their
lines there (``contextuality.core.runtime.to_terminal``), and the run's main process hands each complete line to
Snakemake's logger, which prints it above the display (or, with the plain logger, as a line of its own).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from contextuality.core.runtime import TERMINAL_LINES_ENV, for_terminal


class TerminalRelay:
    """Every complete line appended to ``path``, passed to ``emit`` (no wider than the terminal) every
    ``interval_s`` seconds by a daemon thread, and once more at ``close``."""

    def __init__(self, path: Path, emit: Callable[[str], None], interval_s: float = 0.2):
        self.path, self.emit, self.interval_s = Path(path).absolute(), emit, interval_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._offset = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="contextuality-terminal", daemon=True)

    def start(self) -> TerminalRelay:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.relay()

    def relay(self) -> None:
        """Emit the complete lines written since the last call (a line still being written waits for its end)."""
        with self._lock:
            try:
                with open(self.path, "rb") as lines:
                    lines.seek(self._offset)
                    written = lines.read()
            except FileNotFoundError:
                return
            end = written.rfind(b"\n") + 1
            self._offset += end
            for line in written[:end].decode("utf-8", "replace").splitlines():
                self.emit(for_terminal(line))

    def close(self) -> None:
        """The last lines, then the file goes."""
        self._stopped.set()
        self.relay()
        self.path.unlink(missing_ok=True)


def start_relay(emit: Callable[[str], None] | None = None, folder: Path | str = ".snakemake") -> TerminalRelay:
    """A local run's relay, started: its file in ``folder`` (one per run's process), named to the jobs in
    ``TERMINAL_LINES_ENV``; ``emit`` is Snakemake's logger's ``info`` unless given."""
    if emit is None:
        from snakemake.logging import logger

        emit = logger.info
    relay = TerminalRelay(Path(folder) / f"terminal-lines-{os.getpid()}.txt", emit).start()
    os.environ[TERMINAL_LINES_ENV] = str(relay.path)
    return relay
