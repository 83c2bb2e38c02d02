# make demo: the closed-loop GPU autoscaling demo on this machine. make test: the whole test suite.
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
# Left out of that run: tests of files and tools (chart, manifests, recording rules, image), not of dependencies,
# the minute-long demos, and the other end-to-end files (CI's 25 minutes on 2 cores no longer hold two whole
# suites). In: every unit test, one adapter and one exporter end-to-end file (test_adapter_e2e, test_exporter_e2e),
# and the Kubernetes client's (test_kube_cache, test_adapter_auth_e2e).
LOWEST_SKIPS := $(addprefix --ignore=tests/,test_demo.py test_image.py test_chart.py test_deploy_manifests.py \
	test_prometheus_rules.py test_loadtest_run.py test_exporter_web_config.py test_exporter_kube_e2e.py \
	test_value_age_e2e.py test_doctor.py test_adapter_discovery.py test_victoriametrics.py test_rules_reload.py \
	test_inference_presets.py test_resource_metrics_e2e.py test_stale_values_e2e.py test_resource_metrics_kubectl.py \
	test_shared_gpu_e2e.py test_adapter_external_e2e.py test_resource_metrics_chart_rules.py \
	test_eks_guide_rules_e2e.py test_resource_provider_upstream.py test_support_prometheus.py test_demo_zero.py)
IMAGE ?= ghcr.io/gpu-autoscaler/gpu-autoscaler:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: install tools test test-lowest demo lint bench image clean

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
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The suite's unit tests and one adapter and one exporter end-to-end test, with every direct dependency at the
# lowest version pyproject.toml allows: the floors are versions the code works with.
test-lowest: install tools
	PYTHON=$(PY) bash scripts/lowest-venv.sh $(LOWEST)
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider $(LOWEST_SKIPS) $(PYTEST_ARGS)

# The closed loop on this machine: Prometheus, exporter, adapter, inference replicas and an HPA loop.
demo: install tools
	$(PY) -m loadtest demo $(DEMO_ARGS)

lint: install
	$(PY) -m ruff check .

bench: install tools
	$(PY) bench/exporter_scrape.py
	$(PY) bench/adapter_load.py
	$(PY) bench/discovery.py
	$(PY) bench/e2e_reaction.py --runs 4

# The container image, built here with buildah (chroot isolation) from a Debian bookworm base made with
# mmdebstrap; IMAGE=name:tag to name it.
image:
	bash scripts/build-image.sh $(IMAGE)

clean:
	rm -rf .venv .venv-lowest .tools build *.egg-info .pytest_cache .ruff_cache
