# The two commands of the README: `make demo` (the main job) and `make test` (the whole test suite).
# Both create the virtual environment in .venv on first use (the suite itself installed in it, editable: the
# `vllm-stress` command and `locust -f locustfiles/...` from anywhere) and reinstall only when a requirements file
# or pyproject.toml changes. `make test-fast` runs the fast tier only.
# `make test` also installs what its heavier tiers need: a CPU build of vLLM with a tiny model in
# ~/.cache/vllm-stress (the real-vLLM tier, deploy/real-vllm.sh, installed in the background while the venv is made
# and the tests run), Debian's chromium (the web UI browser test), Debian's prometheus (the Prometheus scrape test)
# and Debian's nginx (the router of the fleet test). `make test QUICK=1` skips the real-vLLM tier for quick local
# runs. Without one of those (or root, for the network namespaces) its tests are skipped, and the run ends with a
# line per reason; with CI=true they fail instead, naming the make target.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium
PROMETHEUS ?= /usr/bin/prometheus
NGINX ?= /usr/sbin/nginx
export CHROMIUM PROMETHEUS NGINX  # where the tests look for them
# Python writes the bytecode of what it compiles: the suite's ~600 processes (Locust, simulators, pytest's workers)
# import the same modules, and with PYTHONDONTWRITEBYTECODE set each compiled them again (pytest's collection 8.6
# CPU-seconds in each worker against 4.0, benchmarks/tests.md)
unexport PYTHONDONTWRITEBYTECODE
# a program that cannot be installed here: its tests are skipped, or with CI=true the run stops
NOT_INSTALLED = { echo "$(1) is not installed: run 'make $(2)' as root (Debian's apt-get); its tests $(if \
  $(filter true,$(CI)),fail with CI=true,will be skipped)"; $(if $(filter true,$(CI)),exit 1,true); }

.PHONY: venv demo test test-fast lint real-vllm browser prometheus nginx

# no --compile-bytecode: of the venv's 9,500 modules a collection and a Locust start compile 2,900, and the first
# process to import one writes its bytecode (make test's collection before the run: 12.0 CPU-s against 8.8, for a venv
# made in 6.4 CPU-s against 25.5, benchmarks/tests.md)
$(STAMP): requirements.txt requirements-dev.txt requirements-uv.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-uv.txt
	$(VENV)/bin/uv pip install -q --python $(PY) -r requirements.txt -r requirements-dev.txt
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m scenarios run --scenario demo --out results/demo --overwrite

# the gate: lint, the formatter's check and the type checker (strict on the core and the analysis: pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# vLLM's CPU build in its own venv and the tiny model (idempotent; a few minutes the first time)
real-vllm:
	bash deploy/real-vllm.sh install
	bash deploy/real-vllm.sh model

# chromium from Debian's packages when we may install it (the browser test)
browser:
	@test -x $(CHROMIUM) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  $(call NOT_INSTALLED,chromium,browser)

# the Prometheus server from Debian's packages when we may install it (the scrape test)
prometheus:
	@test -x $(PROMETHEUS) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	  >/dev/null; } || $(call NOT_INSTALLED,prometheus,prometheus)

# nginx from Debian's packages when we may install it (the router in front of the fleet test's replicas)
nginx:
	@test -x $(NGINX) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx \
	  >/dev/null; } || $(call NOT_INSTALLED,nginx,nginx)

# the developers' loop: the gate and the fast tier (tests/conftest.py marks it: no server, Locust, vLLM, browser or
# namespace fixture, and fails if it starts one anyway), on two processes: its tests compute (pandas, matplotlib,
# the simulator's virtual time), so one per core (87 s against 161 s on one, benchmarks/tests.md)
test-fast: $(STAMP) lint
	$(PY) -m pytest -m fast -q -n 2 $(PYTEST_ARGS)

# the whole suite on TEST_PROCESSES processes, a test file to each in turn (pytest-xdist), the real-vLLM files first
# and then the longest, as tests/conftest.py orders them (--no-loadscope-reorder: pytest-xdist would
# start the files with the most tests first, and the few long ones last), its 25 slowest tests listed;
# eight on two cores: the tests mostly wait on the servers and Locust processes they start; at six the cores were
# 10-55 % idle once the real vLLMs had stopped, at eight about 3 % over the run (601 s against 635 s in all from a
# clean clone, benchmarks/tests.md)
TEST_PROCESSES ?= 8
PARALLEL := -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder --durations=25
# QUICK=1 leaves the real-vLLM tier out. Without it, vLLM's CPU build and the tiny model are installed when missing
# (deploy/real-vllm.sh model) in the background from the start, beside the venv, the collection and the first tests
# (about 25 s and 24 CPU-seconds alone; the venv leaves a core idle, benchmarks/tests.md); the real-vLLM tests' fixtures
# wait for it (the script's install lock) and try again themselves, naming the error, if it failed
SUITE := $(PY) -m pytest $(if $(QUICK),-m "not realvllm") $(PARALLEL) $(PYTEST_ARGS)
REAL_VLLM_BESIDE = log=$$(mktemp -t real-vllm-install.XXXXXX); bash deploy/real-vllm.sh model >$$log 2>&1 && rm $$log \
  || echo "the background install of vLLM failed (the real-vLLM tests try again): $$log"
# the gate runs beside the tests at the lowest priority (nice 19), not before them: its 20 CPU-seconds (mypy, from no
# cache) go where the tests leave a core idle, mostly in the run's last minutes; the run fails when either fails.
# One collection first writes the bytecode of the tests (pytest's assertion rewriting) and of the package, which the
# test processes would otherwise each write at once: a collection takes 8.8 CPU-s cold and 4.2 warm
# (benchmarks/tests.md); its errors show in the run that follows
COLLECT := $(PY) -m pytest --collect-only -q -p no:cacheprovider
test: browser prometheus nginx
	@$(if $(QUICK),,{ $(REAL_VLLM_BESIDE); } & install=$$!;) \
	$(MAKE) --no-print-directory venv && { nice -n 19 $(MAKE) --no-print-directory lint & gate=$$!; \
	$(COLLECT) >/dev/null 2>&1; echo '$(SUITE)'; $(SUITE); tests=$$?; \
	wait $$gate || { echo "make lint failed"; tests=1; }; }; \
	status=$${tests:-1}; $(if $(QUICK),,wait $$install;) exit $$status
