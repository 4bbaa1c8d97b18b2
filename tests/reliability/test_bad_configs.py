"""Scenario 7: bad configs. A corpus of broken configurations — YAML syntax, wrong types,
unknown keys, macro loops, port collisions, missing executables, duplicate aliases, budgets that
cannot fit — each broken in exactly one way. ``modelswap check`` and ``modelswap serve`` must
each exit with code 2, print exactly one problem naming the key path, and start nothing (every
valid model's command would create a marker file, and one model is preloaded).

A missing executable is the exception for ``check``: a config is often checked on another machine
than the one that serves it, so ``check`` exits 0 with a note naming the key path; ``serve``,
which would run it here, refuses it with exit code 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import HANG, REPO, free_port
from tests.reliability.conftest import Report, Tracker

from modelswap import cli

pytestmark = pytest.mark.reliability


@dataclass(frozen=True)
class Case:
    name: str
    text: str  # the config; {ok_cmd} is a valid command, {port} a free port
    path: str  # the key path the one problem must start with ("": a YAML-level problem)
    mention: str = ""  # text the problem must contain as well
    bug: str = ""  # a known bug (xfail, strict: the test fails once it is fixed)
    serve_only: bool = False  # a missing program: `check` notes it, `serve` refuses it


OK = "  ok:\n    cmd: {ok_cmd}\n"


def cfg(top: str = "", models: str = "", start: str = "{port}", preload: str = "ok") -> str:
    """A config that would be valid but for what ``top`` / ``models`` break."""
    hooks = f"hooks: {{{{onStartup: {{{{preload: [{preload}]}}}}}}}}\n"
    return f"startPort: {start}\n{hooks}{top}models:\n{OK}{models}"


def model(name: str, extra: str = "", cmd: str = "{ok_cmd}") -> str:
    return f"  {name}:\n    cmd: {cmd}\n" + "".join(f"    {line}\n" for line in extra.splitlines())


def quoted(text: str) -> str:
    """A single-quoted YAML scalar: the valid command, then ``text``."""
    return f"'{{ok_raw}} {text}'"


CORPUS = [
    # ---- YAML syntax -------------------------------------------------------------------------
    Case("yaml-tab-indent", "startPort: {port}\nmodels:\n\tok:\n\t\tcmd: x\n", "", "line 3"),
    Case("yaml-unclosed-flow", "startPort: {port}\nmodels: {{ok: {{cmd: [a, b}}\n", "", "line"),
    Case(
        "yaml-bad-indent",
        "startPort: {port}\nmodels:\n  ok:\n    cmd: x\n   ttl: 3\n",
        "",
        "line 5",
    ),
    Case("yaml-duplicate-model", cfg(models=OK), "", "duplicate key 'ok'"),
    Case("yaml-duplicate-top-key", "startPort: 5\n" + cfg(), "", "duplicate key 'startPort'"),
    Case("yaml-top-level-list", "- startPort: 1\n- models: {{}}\n", ""),
    Case("yaml-empty-file", "", "", "models"),
    Case("yaml-unterminated-quote", "startPort: {port}\nmodels:\n  ok:\n    cmd: 'x\n", "", "line"),
    # ---- wrong types and values -------------------------------------------------------------
    Case("type-startport-text", cfg(start="abc"), "startPort"),
    Case("value-startport-range", cfg(start="70000"), "startPort"),
    Case("type-ttl-text", cfg(models=model("m", "ttl: soon")), "models.m.ttl"),
    Case("type-cmd-mapping", cfg(models=model("m", cmd="{{a: 1}}")), "models.m.cmd"),
    Case("type-aliases-mapping", cfg(models=model("m", "aliases: {{a: 1}}")), "models.m.aliases"),
    Case("type-env-number", cfg(models=model("m", "env: 5")), "models.m.env"),
    Case("value-loglevel", cfg("logLevel: loud\n"), "logLevel"),
    Case("value-listen", cfg("listen: nohost\n"), "listen"),
    Case(
        "value-timeout-negative",
        cfg(models=model("m", "timeouts: {{connect: -1}}")),
        "models.m.timeouts.connect",
    ),
    Case("value-queuelimit-negative", cfg("queueLimit: -5\n"), "queueLimit"),
    Case("type-models-list", "startPort: {port}\nmodels:\n  - ok\n", "models"),
    Case("type-body-limit-text", cfg("maxRequestBodyBytes: big\n"), "maxRequestBodyBytes"),
    Case("type-unlisted-text", cfg(models=model("m", "unlisted: maybe")), "models.m.unlisted"),
    Case("value-resource-size", cfg("resources: {{ram: lots}}\n"), "resources.ram"),
    Case("value-proxy-not-url", cfg(models=model("m", "proxy: 'not a url'")), "models.m.proxy"),
    Case("type-priority-float", cfg(models=model("m", "priority: 1.5")), "models.m.priority"),
    # ---- unknown keys -----------------------------------------------------------------------
    Case("unknown-top-key", cfg("modles: {{}}\n"), "modles", "did you mean models"),
    Case("unknown-model-key", cfg(models=model("m", "ttll: 5")), "models.m.ttll", "ttl"),
    Case(
        "unknown-timeouts-key",
        cfg(models=model("m", "timeouts: {{firstbyte: 3}}")),
        "models.m.timeouts.firstbyte",
    ),
    Case(
        "unknown-group-key",
        cfg("groups: {{g: {{members: [ok], swapp: false}}}}\n"),
        "groups.g.swapp",
    ),
    Case("unknown-hooks-key", cfg().replace("preload:", "preloads:"), "hooks.onStartup.preloads"),
    # ---- macros -----------------------------------------------------------------------------
    Case(
        "macro-loop",
        cfg("macros: {{a: '${{b}}', b: '${{a}}'}}\n", model("m", cmd=quoted("${{a}}"))),
        "models.m.cmd",
        "macro cycle: ${a} -> ${b} -> ${a}",
    ),
    Case(
        "macro-self",
        cfg("macros: {{a: 'x${{a}}'}}\n", model("m", cmd=quoted("${{a}}"))),
        "models.m.cmd",
        "macro cycle",
    ),
    Case(
        "macro-model-loop",
        cfg(models=model("m", "macros: {{p: '${{q}}', q: '-${{p}}'}}", cmd=quoted("${{p}}"))),
        "models.m.cmd",
        "macro cycle",
    ),
    Case("macro-unknown", cfg(models=model("m", cmd=quoted("${{PORTT}}"))), "models.m.cmd", "PORT"),
    Case("macro-unterminated", cfg(models=model("m", cmd=quoted("${{nosuch"))), "models.m.cmd"),
    Case(
        "macro-env-unset",
        cfg(models=model("m", cmd=quoted("${{env.MODELSWAP_TEST_UNSET_VAR}}"))),
        "models.m.cmd",
        "MODELSWAP_TEST_UNSET_VAR",
    ),
    Case("macro-bad-name", cfg("macros: {{'bad name': 1}}\n"), 'macros["bad name"]'),
    # ---- ports ------------------------------------------------------------------------------
    Case("port-listen-collision", cfg("listen: '127.0.0.1:{port}'\n"), "startPort", "listen"),
    Case(
        "port-range-exhausted",
        cfg(models=model("m"), start="65535"),
        "startPort",
    ),
    Case("port-no-port-no-proxy", cfg(models=model("m", cmd="'{ok_raw_noport}'")), "models.m.cmd"),
    Case(
        "port-fixed-collision",
        cfg(models=model("m", "proxy: 'http://127.0.0.1:{port}'", "'{ok_raw_noport} {port}'")),
        "models.m.proxy",
        "'ok'",
    ),
    Case(
        "port-fixed-is-listen-port",
        cfg(
            "listen: '127.0.0.1:{port2}'\n",
            model("m", "proxy: 'http://127.0.0.1:{port2}'", "'{ok_raw_noport}'"),
        ),
        "models.m.proxy",
        "listen port",
    ),
    # ---- missing executables ----------------------------------------------------------------
    Case(
        "exe-missing-absolute",
        cfg(models=model("m", cmd="'/nonexistent/llama-server --port ${{PORT}}'")),
        "models.m.cmd",
        "does not exist",
        serve_only=True,
    ),
    Case(
        "exe-missing-on-path",
        cfg(models=model("m", cmd="'no-such-binary-modelswap --port ${{PORT}}'")),
        "models.m.cmd",
        "not found on PATH",
        serve_only=True,
    ),
    Case(
        "exe-not-executable",
        cfg(models=model("m", cmd="'{marker_dir}/plain.txt --port ${{PORT}}'")),
        "models.m.cmd",
        "not executable",
        serve_only=True,
    ),
    Case(
        "exe-cmdstop-missing",
        cfg(models=model("m", "cmdStop: 'no-such-stopper ${{PID}}'")),
        "models.m.cmdStop",
        serve_only=True,
    ),
    # ---- duplicate names --------------------------------------------------------------------
    Case(
        "alias-duplicate",
        cfg(models=model("m", "aliases: [x]") + model("n", "aliases: [x]")),
        "models.n.aliases[0]",
    ),
    Case("alias-is-model-id", cfg(models=model("m", "aliases: [ok]")), "models.m.aliases[0]"),
    # ---- scheduling and budgets -------------------------------------------------------------
    Case(
        "budget-cannot-fit",
        cfg("resources: {{ram: 2GiB}}\n", model("m", "uses: {{ram: 4GiB}}")),
        "models.m.uses.ram",
    ),
    Case(
        "budget-unknown-resource",
        cfg("resources: {{ram: 2GiB}}\n", model("m", "uses: {{gpu9: 1GiB}}")),
        "models.m.uses.gpu9",
    ),
    Case(
        "group-unknown-member",
        cfg("groups: {{g: {{members: [ok, ghost]}}}}\n"),
        "groups.g.members[1]",
    ),
    Case("preload-unknown", cfg(preload="ghost"), "hooks.onStartup.preload[0]"),
    Case("default-model-unknown", cfg("defaultModel: ghost\n"), "defaultModel"),
    Case(
        "apikey-bad-scope",
        cfg("apiKeys: [{{name: a, key: 'sk-0123456789abcdef', scopes: [root]}}]\n"),
        "apiKeys[0].scopes[0]",
    ),
]


def render(case: Case, tmp_path: Path, port: int) -> Path:
    """Write the case's config; every command it holds would touch the case's marker file."""
    marker = tmp_path / f"{case.name}.started"
    script = f"touch {shlex.quote(str(marker))}; sleep 30"
    ok_raw = f"bash -c {shlex.quote(script)} x --port ${{PORT}}"
    noport = f"bash -c {shlex.quote(script)} x"
    (tmp_path / "plain.txt").write_text("not a program\n")
    text = case.text.format(
        port=port,
        port2=free_port(),
        ok_cmd=json.dumps(ok_raw),
        ok_raw=ok_raw.replace("'", "''"),
        ok_raw_noport=noport.replace("'", "''"),
        marker_dir=tmp_path,
    )
    config = tmp_path / f"{case.name}.yaml"
    config.write_text(text)
    return config


def started_a_backend(marker: Path) -> bool:
    """Whether a command of the case's config ran, now that modelswap has exited: one that ran
    either touched ``marker`` or is still about to (its ``bash -c`` has the marker's path on its
    command line until it has touched it and goes on to sleep 30 s). Processes are looked at
    first, the marker after, so a touch in between is seen too; no waiting on a clock."""
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(marker) in " ".join(proc.info["cmdline"] or ()):
                return True
    return marker.exists()


def run(tracker: Tracker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MODELSWAP_TEST_UNSET_VAR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "modelswap", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=env,
    )
    tracker.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        tracker.adopt_tree(proc.pid)
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def problems(stderr: str) -> list[str]:
    """The problem lines under ``modelswap: invalid configuration in FILE:``."""
    lines = stderr.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[0].startswith("modelswap: invalid configuration in "), stderr
    return [line.strip() for line in lines[1:]]


def test_the_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 40
    assert len({case.name for case in CORPUS}) == len(CORPUS)


PARAMS = [
    pytest.param(case, id=case.name, marks=[pytest.mark.xfail(reason=case.bug)] if case.bug else [])
    for case in CORPUS
]


@pytest.mark.parametrize("case", PARAMS)
def test_check_gives_one_error_naming_the_key_and_exit_2(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast tier, in this process (the same code as the command): ``check``, or for a
    missing program ``serve`` (which refuses it before it starts anything)."""
    monkeypatch.delenv("MODELSWAP_TEST_UNSET_VAR", raising=False)
    config = render(case, tmp_path, free_port())
    if case.serve_only:
        assert cli.main(["check", str(config)]) == 0
        out, err = capsys.readouterr()
        assert f"modelswap: note: {case.path}: " in err, err
        args = ["serve", "--config", str(config), "--listen", f"127.0.0.1:{free_port()}"]
    else:
        args = ["check", str(config)]
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == ""
    found = problems(err)
    assert len(found) == 1, found
    assert_names_the_key(case, found[0])
    assert not (tmp_path / f"{case.name}.started").exists(), "a backend was started"


def assert_names_the_key(case: Case, problem: str) -> None:
    if case.path:
        assert problem.startswith(case.path), problem
        assert ": " in problem, problem
    assert case.mention in problem, problem


@pytest.mark.reliability_long
@pytest.mark.parametrize("case", PARAMS)
def test_check_and_serve_exit_2_with_one_error_and_start_nothing(
    case: Case, tmp_path: Path, tracker: Tracker, report: Report
) -> None:
    """``python -m modelswap check FILE`` and ``serve --config FILE`` as real processes."""
    config = render(case, tmp_path, free_port())
    if case.serve_only:
        result = run(tracker, "check", str(config))
        assert result.returncode == 0, result.stderr
        assert f"modelswap: note: {case.path}: " in result.stderr
    for command in (["check", str(config)], ["serve", "--config", str(config)]):
        if case.serve_only and command[0] == "check":
            continue
        result = run(tracker, *command)
        assert result.returncode == 2, (command[0], result.returncode, result.stderr)
        assert result.stdout == "", result.stdout
        found = problems(result.stderr)
        assert len(found) == 1, (command[0], found)
        assert_names_the_key(case, found[0])
    assert not started_a_backend(tmp_path / f"{case.name}.started"), "a backend was started"
    report(exit_code=result.returncode, problem=found[0][:160])
