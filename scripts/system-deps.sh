#!/usr/bin/env bash
# System packages the tests need beyond Python: gcc (the C compile verifier) and
# chromium (the HTML report test renders the report headless). Installs only what
# is missing, with apt on Debian/Ubuntu; elsewhere it names what to install.
set -euo pipefail
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v openscad >/dev/null 2>&1 || missing+=(openscad)  # the CAD verifier (rewards/cad.py)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "posttrain tests need: ${missing[*]} (install them with your system's package manager)" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
