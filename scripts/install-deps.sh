#!/usr/bin/env bash
# Install what inswitch needs on a fresh Debian machine: system packages (iproute2, ping,
# ethtool, tshark for captures, chromium for the web view's browser test), a Rust toolchain
# check, and a Python virtualenv in .venv with the package's Python dependencies.
# Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pair in ip:iproute2 ping:iputils-ping ethtool:ethtool tshark:tshark tcpdump:tcpdump iperf3:iperf3 chromium:chromium openssl:openssl redis-server:redis-server redis-benchmark:redis-tools; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    rustup default stable
  else
    echo "error: no Rust toolchain (cargo) found; install rustup (https://rustup.rs) and rerun" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip >/dev/null
# One list of Python dependencies: pyproject.toml's (runtime, test extras, build backend).
mapfile -t reqs < <(.venv/bin/python - <<'PYEOF'
import tomllib
d = tomllib.load(open("pyproject.toml", "rb"))
for r in d["build-system"]["requires"] + d["project"]["dependencies"] + d["project"]["optional-dependencies"]["test"] + d["project"]["optional-dependencies"]["ml"]:
    print(r)
PYEOF
)
# The p4runtime package's `p4` stubs (protobuf 3 format) would shadow ours (python/p4) in a
# venv made before they were ours.
.venv/bin/pip uninstall -q -y p4runtime >/dev/null 2>&1 || true
.venv/bin/pip install -q "${reqs[@]}"
# Packages whose declared dependencies we do not want (see [tool.inswitch] in pyproject.toml).
mapfile -t nodeps < <(.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb")).get("tool", {}).get("inswitch", {}).get("install-no-deps", [])))')
if [ -n "${nodeps[*]}" ]; then
  .venv/bin/pip install -q --no-deps "${nodeps[@]}"
fi
echo "dependencies ready"
