# The two set-up commands (see README.md): `make demo` and `make test`. Both work on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint unit image bench-replay bench-shapes bench-live load-test record-captures clean-build

# The install compiles the per-event code (setup.py: mypyc, and the native engine in Rust): a change to it
# installs again.
COMPILED := watcher/model.py watcher/sources/audit.py watcher/sources/capture.py watcher/sources/envelopes.py $(wildcard watcher/detection/*.py) \
	native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)

# The dev venv also has the checkout on its import path (a .pth file in its site-packages, as scripts/runtime-venv.sh
# writes one): the scripts import the harness package (harness/) with a plain import, as the tests do. Only this venv
# has it; the wheel ships watcher alone. ($(CHECKOUT_PTH) writes it into a venv built before it was.)
CHECKOUT_PTH := $(VENV)/.checkout-pth
WRITE_CHECKOUT_PTH = $(BIN)/python -c 'import pathlib, sys, sysconfig; \
	pathlib.Path(sysconfig.get_paths()["purelib"], "fightwatch-checkout.pth").write_text(sys.argv[1] + "\n")' $(CURDIR)

# Both compiled parts are optional to the install (it goes on in pure Python or with the Python engine), and pip
# shows no build output: scripts/check-build.sh prints a warning box, with the reasons from the build's log, when
# either is missing. `make test` requires the native engine (FIGHTWATCH_REQUIRE_NATIVE, read by scripts/native.sh
# and setup.py): there a crate that does not download, or a native build that fails, stops the run. The previous
# build's modules are removed first, so that one that failed to build this time is not imported in its place
# (mypyc compiles them all again anyway).
$(BIN)/fightwatch: pyproject.toml setup.py $(COMPILED) scripts/native.sh scripts/check-build.sh
	scripts/native.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	rm -f watcher__mypyc.*.so
	find watcher -name '*.so' -delete
	@echo "$(BIN)/pip install -v -e '.[test]' >$(VENV)/install.log"
	@$(BIN)/pip install -v -e '.[test]' >$(VENV)/install.log 2>&1 \
		|| { tail -n 40 $(VENV)/install.log; echo "make: pip install failed: see $(VENV)/install.log" >&2; exit 1; }
	scripts/check-build.sh $(BIN)/python $(VENV)/install.log
	$(WRITE_CHECKOUT_PTH)
	$(BIN)/fightwatch --version
	touch $@

$(CHECKOUT_PTH): $(BIN)/fightwatch
	$(WRITE_CHECKOUT_PTH)
	touch $@

## Replay the capture bundled in the package: no cluster needed.
demo: $(BIN)/fightwatch
	$(BIN)/fightwatch demo

## Everything CI runs: static checks, unit tests, integration tests against a real etcd + kube-apiserver of the
## current Kubernetes release (and the live-detection and audit-scenario tests on the oldest supported one too),
## end-to-end tests with a real Prometheus (promtool) and Alertmanager, and the image and the chart on a real node
## (tests/node: as root; the node's binaries, the image and Prometheus 3 are built here first, once, then cached).
test: export FIGHTWATCH_REQUIRE_NATIVE = 1
test: $(BIN)/fightwatch lint
	scripts/control-plane.sh current >/dev/null
	scripts/control-plane.sh oldest >/dev/null
	scripts/control-plane.sh current node >/dev/null
	scripts/node.sh >/dev/null
	scripts/image.sh >/dev/null
	scripts/helm.sh >/dev/null
	$(BIN)/python -c 'from harness.programs import binary; binary("prometheus")' >/dev/null
	scripts/monitoring.sh >/dev/null
	scripts/browser.sh >/dev/null
	$(BIN)/pytest --ignore=tests/node --ignore=tests/unit
	@# The node's tests mostly wait on pods and the unit tests only compute: they run side by side (the node's output
	@# follows the unit tests'), and either failing fails the run.
	@echo "$(BIN)/pytest tests/node (beside the unit tests, output in $(VENV)/node-tests.log) & $(BIN)/pytest tests/unit"
	@$(BIN)/pytest tests/node >$(VENV)/node-tests.log 2>&1 & node=$$!; \
		$(BIN)/pytest tests/unit; unit=$$?; wait $$node; nodes=$$?; \
		cat $(VENV)/node-tests.log; test $$unit -eq 0 && test $$nodes -eq 0

## Static checks; and the Rust-only logic's unit tests (cargo test without the extension-module feature, so that
## its test binary links libpython). Their cargo builds are kept in the cache, so that a fresh clone's are warm.
LINT_TARGET ?= $(or $(FIGHTWATCH_CACHE),$(HOME)/.cache/fightwatch)/cargo-lint
lint: $(CHECKOUT_PTH)
	$(BIN)/ruff check watcher tests scripts harness setup.py
	$(BIN)/ruff format --check watcher tests scripts harness setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports
	cd native && cargo fmt --check && CARGO_TARGET_DIR=$(LINT_TARGET) cargo clippy --release --locked --quiet --all-targets -- -D warnings
	cd native && CARGO_TARGET_DIR=$(LINT_TARGET) PYO3_PYTHON=$(abspath $(BIN)/python) cargo test --locked --quiet --no-default-features

unit: $(BIN)/fightwatch
	$(BIN)/pytest tests/unit

## The container image, built for real with buildah (scripts/image.sh: local base images, no registry needed); prints
## its name, its archive for `ctr images import`, its size and buildah's storage (docs/image.md).
image:
	scripts/image.sh

## The detection engine on a seeded synthetic stream of 200,000 events over 20,000 objects: throughput against the
## decode floor, memory per object, recall (results in bench-results/replay.json).
bench-replay: $(CHECKOUT_PTH)
	$(BIN)/python scripts/bench_replay.py

## The replay and the audit analysis on every shape of data (harness/bench/shapes/: synthetic, metadata-only, the
## real recordings replicated, large objects; conflicts, reads, RequestResponse bodies), each against its decode
## floor, BUILDS side by side in turns (default: this checkout; e.g. BUILDS="before=../before after=."). Streams are
## kept in build/shapes; results in bench-results/shapes-replay.json and shapes-audit.json.
RUNS ?= 5
bench-shapes: $(CHECKOUT_PTH)
	$(BIN)/python scripts/bench_replay.py --shapes all --runs $(RUNS) $(foreach b,$(BUILDS),--build $(b))
	$(BIN)/python scripts/bench_audit.py --shapes all --runs $(RUNS) $(foreach b,$(BUILDS),--build $(b))

## The live watcher under write load on a real API server, against kubernetes-asyncio's Watch().stream() and a
## client-go metadata informer (scripts/informer: needs Go, as the control plane's build does).
bench-live: $(CHECKOUT_PTH)
	scripts/control-plane.sh >/dev/null
	$(BIN)/python scripts/bench_live.py

## Record the scenario captures again from a real API server (tests/fixtures/captures).
record-captures: $(CHECKOUT_PTH)
	$(BIN)/python scripts/record_captures.py

## Scale and HA under load on a real API server: 20,000 objects, 300 writes/s for 5 minutes, one shard with a
## leader killed halfway, then two shards (about 16 minutes; results in bench-results/load.json).
load-test: $(CHECKOUT_PTH)
	scripts/control-plane.sh >/dev/null
	$(BIN)/python scripts/load_test.py

## Remove the compiled modules (and mypyc's C sources), e.g. before testing a pure-Python build:
## `make clean-build && FIGHTWATCH_PURE_PYTHON=1 make test`.
clean-build:
	rm -rf build watcher__mypyc.*.so
	find watcher -name '*.so' -delete
	rm -f $(BIN)/fightwatch
