#!/usr/bin/env bash
# Run every cargo-fuzz target, and the Python RESP parser's fuzz loop, for a short time
# (default 10 s each; first argument overrides).
# Needs a nightly toolchain for libFuzzer's instrumentation; installs cargo-fuzz if missing.
# Without nightly it says so and exits 0: the proptests in `cargo test` still check that
# arbitrary bytes never panic the parsers and the switch.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-10}
# The RESP parser is Python: its fuzz loop needs no nightly (fuzz/python/resp_fuzz.py).
py=${PYTHON:-../.venv/bin/python}
[ -x "$py" ] || py=python3
echo "fuzz: resp (python) for ${secs}s"
PYTHONPATH=../python "$py" python/resp_fuzz.py "$secs"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain, skipping libFuzzer runs (proptests cover arbitrary input)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install -q cargo-fuzz --locked
fi
targets=$(cargo +nightly fuzz list)   # its own line, so a broken manifest fails the run
for t in $targets; do
  echo "fuzz: $t for ${secs}s"
  rm -rf "artifacts/$t"   # a crash is reported below and left here to replay
  # No sanitizer: the fuzzed crates forbid unsafe code, so AddressSanitizer would only slow
  # the search (a hundredfold on the switch target); panics and assertions still abort.
  cargo +nightly fuzz run -O -s none "$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | grep -E '^(stat::number_of_executed_units|==[0-9]+== ERROR|SUMMARY)' || true
  if [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    echo "fuzz: $t found a crash: $(ls "artifacts/$t")" >&2
    exit 1
  fi
done
