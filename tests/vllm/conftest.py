"""The slow vLLM tier uses the e2e ``gateway`` factory (modelswap as a subprocess)."""

from __future__ import annotations

from tests.e2e.conftest import gateway

__all__ = ["gateway"]
