"""Bench only: ``python -m modelswap`` under uvloop, to measure what the event loop costs.

    PYTHONPATH=build/bench-uvloop .venv/bin/python bench/uvloop_modelswap.py serve --config …

uvloop is installed by ``make bench`` into ``build/bench-uvloop`` (not into the project's venv);
this launcher sets its event loop policy, then runs modelswap's own CLI unchanged.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

from modelswap.cli import main

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.exit(main())
