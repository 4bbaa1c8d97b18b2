"""The fake backend, holding a known amount of resident memory (for memory-measurement tests).

    python tests/fakes/memory_backend.py --alloc-mib 64 --port 8081 [openai_backend flags...]

Allocates ``--alloc-mib`` MiB, writes to every page so it is resident, then runs the normal fake
(``openai_backend.py``) in this same process, with every other argument, keeping the memory
for as long as it serves.
"""

from __future__ import annotations

import sys
from pathlib import Path

PAGE = 4096


def allocate(mib: int) -> bytearray:
    buf = bytearray(mib * 1024 * 1024)
    for i in range(0, len(buf), PAGE):
        buf[i] = 1
    return buf


def main(argv: list[str]) -> int:
    mib = 0
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--alloc-mib":
            mib = int(next(args))
        elif arg.startswith("--alloc-mib="):
            mib = int(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    held = allocate(mib)
    print(f"memory_backend: holding {mib} MiB", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import openai_backend

    try:
        return openai_backend.main(rest)
    finally:
        del held


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
