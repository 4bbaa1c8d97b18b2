"""What a model's command line asks for (the promise), parsed from the resolved argv.

Shown apart from what the backend reports (the receipt) and never mixed into it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

from modelswap.backends.metadata import positive_int
from modelswap.backends.registry import limit_flags

# Every adapter's flags (vLLM's --max-model-len, SGLang's --context-length, llama.cpp's -c …).
_FLAGS = limit_flags()


@dataclass(frozen=True, slots=True)
class ConfiguredLimits:
    max_model_len: int | None = None
    ctx_size: int | None = None
    max_num_seqs: int | None = None
    parallel: int | None = None

    @property
    def context(self) -> int | None:
        """Tokens one request was promised: vLLM's max_model_len, else llama.cpp's -c divided
        among -np slots (with -np unset, llama-server lets each slot use the whole -c)."""
        if self.max_model_len is not None:
            return self.max_model_len
        if self.ctx_size is not None:
            return self.ctx_size // (self.parallel or 1)
        return None

    def as_dict(self) -> dict[str, int]:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if self.context is not None:
            out["context"] = self.context
        return out


def _int(text: str) -> int | None:
    try:
        return positive_int(int(text))
    except ValueError:
        return None


def _scan(argv: Sequence[str], flags: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """``(key, text)`` for every ``--flag V`` or ``--flag=V`` of ``flags``, in order."""
    for index, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        key = flags.get(flag)
        if key is None:
            continue
        yield key, inline if eq else (argv[index + 1] if index + 1 < len(argv) else "")


def parse_configured(argv: Sequence[str]) -> ConfiguredLimits:
    """Flags as ``--flag N`` or ``--flag=N``; the last occurrence wins; junk is ignored."""
    found: dict[str, int] = {}
    for key, text in _scan(argv, _FLAGS):
        value = _int(text)
        if value is not None:
            found[key] = value
    return ConfiguredLimits(**found)


def flag_values(argv: Sequence[str], flags: Mapping[str, str]) -> dict[str, str]:
    """The text after each flag of ``flags`` (mapped to its key), the last occurrence winning;
    for callers that need more than the integer limits (the fit planner)."""
    return dict(_scan(argv, flags))
