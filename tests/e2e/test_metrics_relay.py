"""``metrics.scrapeBackends`` with real llama.cpp, checked by Prometheus' own ``promtool``
(Debian's ``prometheus`` package; skipped, saying so, without it): the backends' families keep
their ``HELP``/``TYPE`` lines and names, merged once per family across models (issue 18)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

import pytest
from tests.e2e.conftest import HANG, Gateway, chat, llamacpp_cmd, request

pytestmark = pytest.mark.e2e

PROMTOOL = shutil.which("promtool")
# promtool's lints about llama.cpp's own names, kept as it writes them so that its dashboards
# and queries work: the ':' in every name, and `llamacpp:n_tokens_max`, a counter llama.cpp
# names without `_total`. The only findings allowed in the relayed part.
COLON_LINT = re.compile(
    r"^llamacpp:\S+ metric names should not contain ':'$"
    r'|^llamacpp:n_tokens_max counter metrics should have "_total" suffix$'
)


def promtool_findings(text: str) -> tuple[int, list[str]]:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=HANG,
        check=False,
    )
    out = (done.stdout + done.stderr).decode()
    return done.returncode, [line for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install prometheus")
def test_relayed_backend_metrics_pass_promtool_with_names_help_and_type_kept(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(
        f"  one:\n    cmd: {llamacpp_cmd(2048, '--metrics')}\n"
        f"  two:\n    cmd: {llamacpp_cmd(2048, '--metrics')}\n",
        # Both running at once, so one scrape holds both models' families.
        extra_top=(
            "metrics:\n  scrapeBackends: true\n"
            "groups:\n  both:\n    swap: false\n    members: [one, two]\n"
        ),
    )
    for model in ("one", "two"):
        assert chat(gw, model, max_tokens=2).status == 200
    text = request(gw, "GET", "/metrics").body.decode()
    own, relayed = text.split("# HELP llamacpp:", 1)
    relayed = "# HELP llamacpp:" + relayed

    rc, findings = promtool_findings(own)
    assert (rc, findings) == (0, []), findings  # the gateway's own exposition: clean
    rc, findings = promtool_findings(relayed)
    assert findings, "expected promtool's lint about ':'"
    assert all(COLON_LINT.match(line) for line in findings), findings
    rc, findings = promtool_findings(text)  # the whole scrape: the same and nothing more
    assert all(COLON_LINT.match(line) for line in findings), findings

    # llama.cpp's own names and metadata, once per family, a sample per model.
    assert text.count("# TYPE llamacpp:n_tokens_max ") == 1
    assert "llamacpp:n_tokens_max_total" not in text
    for model in ("one", "two"):
        assert re.search(rf'^llamacpp:n_tokens_max\{{model="{model}"\}} ', text, re.M), text
        assert re.search(rf'^llamacpp:prompt_tokens_total\{{model="{model}"\}} ', text, re.M)
    assert text.count("# HELP llamacpp:prompt_tokens_total ") == 1
