# make demo: the closed-loop GPU autoscaling demo on this machine. make test: the whole test suite.
# Both install what they need on a fresh Debian machine.
PYTHON ?= python3
TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(TOOLS_BIN):$(PATH)
STAMP := .tools/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install tools test demo lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@mkdir -p .tools && rm -f .tools/.installed-* && touch $@

install: $(STAMP)

tools:
	bash scripts/install-tools.sh

test: install tools
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)

# The closed loop on this machine: Prometheus, exporter, adapter, inference replicas and an HPA loop.
demo: install tools
	$(PYTHON) -m loadtest demo $(DEMO_ARGS)

lint: install
	$(PYTHON) -m ruff check .

bench: install tools
	$(PYTHON) bench/exporter_scrape.py
	$(PYTHON) bench/adapter_load.py
	$(PYTHON) bench/discovery.py
	$(PYTHON) bench/e2e_reaction.py --runs 4

clean:
	rm -rf .tools build *.egg-info .pytest_cache .ruff_cache
