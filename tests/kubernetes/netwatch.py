"""Every TCP connection of the test's processes stays on loopback: sampled with `ss -tnp` until killed.

python3 netwatch.py OUT PID...    records, in OUT, each connection of PID or a descendant whose local
                                  or peer address is outside 127.0.0.0/8 (one line each), and a last
                                  line "samples N connections M" when it is stopped (SIGTERM).
"""

import ipaddress
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def descendants(roots: set[int]) -> set[int]:
    """``roots`` and their descendants, and the containers' processes (containerd's shims re-parent to init)."""
    parents, shims = {}, set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text.rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
            if text.split("(", 1)[1].startswith("containerd-shim"):
                shims.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, grew = set(roots) | shims, True
    while grew:
        new = {pid for pid, parent in parents.items() if parent in found} - found
        found |= new
        grew = bool(new)
    return found


def host(address: str) -> ipaddress._BaseAddress:
    address = address.rsplit(":", 1)[0].strip("[]")
    return ipaddress.ip_address(address.removeprefix("::ffff:"))


def main() -> None:
    out, roots = Path(sys.argv[1]), {int(pid) for pid in sys.argv[2:]}
    samples, seen, bad = 0, set(), set()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        pids = descendants(roots)
        lines = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout.splitlines()
        for line in lines:
            owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
            if not owners & pids:
                continue
            parts = line.split()
            local, peer = parts[3], parts[4]
            seen.add((local, peer))
            if not all(host(a).is_loopback for a in (local, peer)):
                bad.add(line)
        samples += 1
        time.sleep(1)
    out.write_text("".join(f"{line}\n" for line in sorted(bad)) + f"samples {samples} connections {len(seen)}\n")


if __name__ == "__main__":
    main()
