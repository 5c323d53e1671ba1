# inswitch: `make demo` and `make test` work on a fresh Debian machine (they install what
# is missing first). Long experiments and benchmarks have their own targets.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-ok
CARGO_FLAGS := --release --locked

.PHONY: demo test deps build test-rust test-python bench fuzz lint clean

demo: build
	$(PY) -m inswitch demo

test: build
	$(MAKE) test-rust test-python

deps: $(STAMP)
$(STAMP): scripts/install-deps.sh pyproject.toml
	./scripts/install-deps.sh
	touch $(STAMP)

build: deps
	cargo build $(CARGO_FLAGS) --workspace
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --locked -q

test-rust: deps
	cargo test $(CARGO_FLAGS) --workspace
	./scripts/fuzz-smoke.sh

test-python: build
	$(PY) -m pytest -q tests

bench: build
	$(PY) -m inswitch bench forward --json bench/forward.json

fuzz: deps
	./scripts/fuzz-smoke.sh 300

lint:
	cargo fmt --all -- --check
	cargo clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings

clean:
	cargo clean
	rm -rf $(VENV) python/inswitch/_native*.so
