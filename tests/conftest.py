"""Suite-wide settings."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import settings

# Property tests have no per-example deadline unless they set one: the default (200 ms) is a
# time budget that a loaded machine breaks, and time is never what a test asserts.
settings.register_profile("modelswap", deadline=None)
settings.load_profile("modelswap")

# Every modelswap the tests start (in-process or as a subprocess, which inherits this) keeps
# its state — measured start times, the activity log — in a throwaway directory, never in the
# user's ~/.local/state.
_STATE = tempfile.mkdtemp(prefix="modelswap-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE
atexit.register(shutil.rmtree, _STATE, True)
