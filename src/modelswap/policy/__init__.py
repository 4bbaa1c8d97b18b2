"""The Swap Policy Language ("spell"), llama-swap's rules for rewriting and refusing requests.

A program is a list of clauses, ``ACTION [when CONDITION]``, run top to bottom over a JSON
request body: ``default``/``set <path> to <value>``, ``remove <path>``, ``apply <policy>``,
``deny [status] "message"``. :func:`parse` reads one (:mod:`.parser` has the grammar),
:func:`check` and :func:`find_cycle` refuse what cannot be honoured, :func:`run` runs one
over a :class:`Request`. Pure: no I/O, no modelswap imports; config compiles the programs
(``config/policies.py``), the relay runs them (``http/relay/spl.py``).
"""

from modelswap.policy.evaluate import ABSENT, Denial, Request, read, run
from modelswap.policy.library import (
    POLICY_NAME_RE,
    PROTECTED,
    PolicySet,
    check,
    find_cycle,
)
from modelswap.policy.nodes import Program
from modelswap.policy.parser import parse
from modelswap.policy.program_errors import PolicyError, PolicyRuntimeError

__all__ = [
    "ABSENT",
    "POLICY_NAME_RE",
    "PROTECTED",
    "Denial",
    "PolicyError",
    "PolicyRuntimeError",
    "PolicySet",
    "Program",
    "Request",
    "check",
    "find_cycle",
    "parse",
    "read",
    "run",
]
