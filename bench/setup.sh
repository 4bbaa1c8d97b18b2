#!/bin/sh
# What `make bench` needs beyond .venv, each into its own place — never into .venv:
#   nginx and wrk from Debian (apt-get, when root), LiteLLM's proxy and py-spy in
#   build/bench-venv.
# Idempotent, and it never fails: a piece that cannot be installed makes the suite skip that
# target (or use its aiohttp client instead of wrk), with a line saying so.
set -u
PYTHON=${PYTHON:-python3}
VENV=build/bench-venv
LITELLM_VERSION=1.106.12  # the last release whose [proxy] extra installs from PyPI alone
PYSPY_VERSION=0.4.3

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] || ! command -v wrk >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bench: installing nginx and wrk (apt-get)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null; } \
            || echo "bench: apt-get could not install nginx/wrk: the nginx target is skipped, the aiohttp client replaces wrk"
    else
        echo "bench: nginx/wrk missing and apt-get is not usable here (root needed): the nginx target is skipped, the aiohttp client replaces wrk"
    fi
fi

STAMP=$VENV/.installed-litellm-$LITELLM_VERSION
if [ ! -f "$STAMP" ]; then
    echo "bench: installing litellm[proxy]==$LITELLM_VERSION and py-spy into $VENV (once)"
    if { [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"; } \
        && "$VENV/bin/python" -m pip install --quiet --upgrade pip \
        && "$VENV/bin/python" -m pip install --quiet "litellm[proxy]==$LITELLM_VERSION" "py-spy==$PYSPY_VERSION"; then
        touch "$STAMP"
    else
        echo "bench: LiteLLM could not be installed: the litellm target is skipped"
    fi
fi

exit 0
