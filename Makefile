# make demo: the closed-loop GPU autoscaling demo on this machine. make test: the whole test suite (make
# test-quick: its unit tests; make test-lowest: at the dependencies' floors).
# Both set up what they need on a fresh Debian machine, inside this checkout: a virtual environment in .venv
# (the Python that runs make is only used to create it, never installed into) and helm/kubectl in .tools/bin;
# Debian's prometheus package is installed system-wide when missing (root only).
PYTHON ?= python3
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(VENV)/bin:$(TOOLS_BIN):$(PATH)
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# The lowest allowed version of every direct dependency (uv's lowest-direct resolution), for `make test-lowest`.
LOWEST := $(CURDIR)/.venv-lowest

# Test lanes. Every test module declares what it needs with pytest markers (pyproject.toml lists them;
# tests/test_markers.py checks that each module has one):
#   unit    no servers, processes or tools          e2e    starts Prometheus, the exporter, the adapter, ...
#   tools   helm, kubectl, promtool, buildah, ...   demo   the minute-long demo     image   builds the image
#   lowest  end-to-end tests that exercise a dependency (kubernetes client, aiohttp, uvicorn, grpcio)
# make test: ruff, mypy (the packages' types: [tool.mypy] in pyproject.toml) and everything; make test-quick: the
# unit tests; make test-lowest: the unit tests and those marked lowest, at every direct dependency's floor (tests of
# files and tools, the demo and the other end-to-end tests are not about dependency versions, and CI's 25 minutes
# on 2 cores do not hold two whole suites).
# Tests run in parallel workers, a file per worker at a time (module-scoped servers are started once), in the order
# tests/conftest.py gives them (the image build and the demo first; xdist would otherwise start the files with the
# most tests first and leave those two minutes-long files to the end). Most of a test's time is spent waiting for
# servers, so more workers than the 2 CI cores pay. PYTEST_WORKERS=0: serial.
PYTEST_WORKERS ?= 4
PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
QUICK_TESTS := not (e2e or tools or demo or image)
LOWEST_TESTS := lowest or not (e2e or tools or demo or image)
IMAGE ?= ghcr.io/gpu-autoscaler/gpu-autoscaler:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: install tools test test-quick test-lowest demo lint bench image clean

$(PY):
	PYTHON=$(PYTHON) bash scripts/make-venv.sh $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

tools: install
	PYTHON=$(PY) bash scripts/install-tools.sh

test: install tools
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q $(PARALLEL) --durations=30 $(PYTEST_ARGS)

# The unit tests alone: no servers, processes or tools (well under a minute on 2 cores; no tools needed).
test-quick: install
	$(PY) -m pytest -q $(PARALLEL) -m "$(QUICK_TESTS)" --durations=10 $(PYTEST_ARGS)

# The unit tests and the end-to-end tests marked lowest, with every direct dependency at the lowest version
# pyproject.toml allows: the floors are versions the code works with.
test-lowest: install tools
	PYTHON=$(PY) bash scripts/lowest-venv.sh $(LOWEST)
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider $(PARALLEL) -m "$(LOWEST_TESTS)" --durations=10 \
		$(PYTEST_ARGS)

# The closed loop on this machine: Prometheus, exporter, adapter, inference replicas and an HPA loop.
demo: install tools
	$(PY) -m loadtest demo $(DEMO_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: install tools
	$(PY) bench/fleet.py
	$(PY) bench/exporter_scrape.py
	$(PY) bench/adapter_load.py
	$(PY) bench/discovery.py
	$(PY) bench/keda_scaler.py
	$(PY) bench/lifecycle.py
	$(PY) bench/kube_exec_plugin.py
	$(PY) bench/e2e_reaction.py --runs 4

# The container image, built here with buildah (chroot isolation) from a Debian bookworm base made with
# mmdebstrap; IMAGE=name:tag to name it.
image:
	bash scripts/build-image.sh $(IMAGE)

clean:
	rm -rf .venv .venv-lowest .tools build *.egg-info .pytest_cache .ruff_cache .mypy_cache
