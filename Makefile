# inswitch: `make demo` and `make test` work on a fresh Debian machine (they install what
# is missing first). Long experiments and benchmarks have their own targets.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-ok
CARGO_FLAGS := --release --locked

.PHONY: demo test test-all deps build test-rust test-python bench fuzz lint clean soak

demo: build
	$(PY) -m inswitch demo

# Every test but the ones marked `slow` (each a longer variant of a path a default test
# covers: README, "Tests"), so that CI stays under 25 minutes; `make test-all` runs them too.
test: build
	$(MAKE) test-rust
	$(PY) -m pytest -q -m "not slow" tests

test-all: build
	$(MAKE) test-rust
	$(PY) -m pytest -q tests

deps: $(STAMP)
$(STAMP): scripts/install-deps.sh pyproject.toml
	./scripts/install-deps.sh
	touch $(STAMP)

# pyext is built by maturin only (a plain cargo build of it uses another pyo3 configuration
# and each would rebuild after the other). The first build installs the package into .venv (editable); later ones only rebuild the
# extension module in place.
build: deps
	cargo build $(CARGO_FLAGS) --workspace --exclude pyext
	@if [ -f $(VENV)/.inswitch-installed ]; then \
	  VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --locked --skip-install -q; \
	else \
	  VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --locked -q >/dev/null && touch $(VENV)/.inswitch-installed; \
	fi

test-rust: deps
	cargo test --profile citest --locked --workspace --exclude pyext
	./scripts/fuzz-smoke.sh 4

test-python: build
	$(PY) -m pytest -q tests

bench: build
	$(PY) -m inswitch bench forward --json bench/forward.json

# Issue 22 §6: the four workloads together for 10 minutes under 1% loss, duplication and
# reordering, one switch restart in the middle (root; not part of `make test`).
soak: build
	$(PY) -m inswitch soak --minutes 10 --loss 0.01 --json bench/soak.json --png bench/soak.png

fuzz: deps
	./scripts/fuzz-smoke.sh 300

lint:
	cargo fmt --all -- --check
	cargo clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings

clean:
	cargo clean
	rm -rf $(VENV) python/inswitch/_native*.so
