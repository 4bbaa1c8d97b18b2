"""Suite-wide settings."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import settings

# Property tests have no per-example deadline unless they set one: the default (200 ms) is a
# time budget that a loaded machine breaks, and time is never what a test asserts.
# In `make test` they are derandomized: the same examples on every run, so a run fails only on a
# bug (issue 38). `make test-property` (MODELSWAP_PROPERTY_RANDOM=1) draws new examples, ten
# times as many (tests/property.py), and prints how to reproduce what it finds.
settings.register_profile("modelswap", deadline=None, derandomize=True, database=None)
settings.register_profile(
    "modelswap-random", deadline=None, derandomize=False, database=None, print_blob=True
)
settings.load_profile(
    "modelswap-random" if os.environ.get("MODELSWAP_PROPERTY_RANDOM") == "1" else "modelswap"
)

# Every modelswap the tests start (in-process or as a subprocess, which inherits this) keeps
# its state — measured start times, the activity log — in a throwaway directory, never in the
# user's ~/.local/state.
_STATE = tempfile.mkdtemp(prefix="modelswap-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE
atexit.register(shutil.rmtree, _STATE, True)
