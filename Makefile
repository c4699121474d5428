# Every target creates and owns .venv, so a machine with only Python 3.11 is enough.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up compile test typecheck unit test-programs test-programs-debian bench clean wheels docs

$(STAMP): pyproject.toml setup.py clients/python/pyproject.toml clients/python/nsqclient/version.py \
	clients/spark/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e 'clients/python[snappy]' -e clients/spark
	NSQ_PY_COMPILE=0 $(BIN)/pip install --quiet -e '.[dev,fast,pipeline]' 'setuptools>=68'
	touch $(STAMP)

## the modules every message passes through, compiled with mypyc (setup.py) beside their sources, where Python
## imports them first; rebuilt when a source changes. The compiled modules and the stamp take the time the build
## started: a source saved meanwhile is newer, and a module whose C came out the same is up to date. Without a C
## compiler or Python's headers nothing is compiled; COMPILE=0 (make test COMPILE=0): pure Python, compiled
## modules removed
COMPILE ?= 1
COMPILED := $(VENV)/.compiled
COMPILED_MODULES = find shared services apps -name '*.cpython-*.so'
$(COMPILED): $(STAMP) setup.py $(wildcard shared/*.py shared/*/*.py services/*/*.py services/*/*/*.py \
	clients/python/nsqclient/*.py clients/python/nsqclient/*/*.py)
	touch $(VENV)/compile.started
	$(COMPILED_MODULES) -delete; rm -rf build  # what setup.py no longer lists would stay in the way
	if $(BIN)/python -c 'from shared import compiled; raise SystemExit(not compiled.can_compile())'; then \
	  NSQ_PY_COMPILE=1 $(BIN)/python setup.py --quiet build_ext --inplace >$(VENV)/compile.log 2>&1 \
	    || { cat $(VENV)/compile.log; exit 1; }; \
	else echo "no C compiler or no Python headers here: nothing compiled"; fi
	$(COMPILED_MODULES) -exec touch -r $(VENV)/compile.started {} +
	$(BIN)/python -c 'from shared import compiled; print(compiled.describe())'
	touch -r $(VENV)/compile.started $@

ifeq ($(COMPILE),0)
compile:
	rm -rf $(COMPILED) build; $(COMPILED_MODULES) -delete
else
compile: $(COMPILED)
endif

## start the cluster in the foreground: nsqlookupd on 4160/4161, nsqd on 4150/4151 and 4250/4251 (Ctrl-C stops it)
up: $(STAMP) compile
	$(BIN)/python deploy/run_local.py $(if $(DATA_PATH),--data-path=$(DATA_PATH)) $(ARGS)

## run every test: type checks, unit tests, functional tests against real processes, in TEST_WORKERS processes
## (4 on 2 cores: most of a test's time is spent waiting on the processes it drives; TEST_WORKERS=0: in this one);
## each worker is handed one test at a time, the Docker cluster's first (tests/conftest.py); the slowest are listed at the end
## Then (unless PYTEST_ARGS picks tests) the wire, transport, delivery, hostile-client, replication and crash-point
## suites again, every nsqd they start with --workers=2 (NSQD_TEST_WORKERS): its clients held by worker processes
TEST_WORKERS ?= 4
WORKER_SUITES = $(addprefix tests/functional/test_,protocol_v2.py transport.py pynsq.py consumer.py \
	waiting_commands.py hostile_clients.py auth.py unix_sockets.py dead_letters.py message_ttl.py peek.py \
	durability.py client_producer.py client_errors.py blocking_producer.py hardening.py topology.py \
	replication.py replication_adoption.py replication_in_sync.py replication_kill_points.py crash_points.py)
test: $(STAMP) compile typecheck test-programs
	$(BIN)/pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 --durations=15 $(PYTEST_ARGS)
	$(if $(PYTEST_ARGS),,NSQD_TEST_WORKERS=2 $(BIN)/pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 $(WORKER_SUITES))

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) compile
	$(BIN)/pytest -q tests/unit

## Debian's packages some tests drive: chromium for the admin's browser tests (Playwright drives it and never
## downloads a browser), strace to kill nsqd at a chosen system call, iproute2 and iptables for network partitions,
## etcd-server for replication, curl for HTTP over a unix socket, graphite-carbon and graphite-web (with Etsy's
## statsd from the npm registry, under the venv) for the admin's Graphite graphs;
## without root, passwordless sudo or apt-get those tests are skipped rather than failed
TEST_PROGRAMS := /usr/bin/chromium /usr/bin/strace /usr/sbin/ip /usr/sbin/iptables /usr/bin/etcd /usr/bin/curl \
	/usr/bin/carbon-cache /usr/bin/graphite-manage
TEST_PACKAGES := chromium strace iproute2 iptables etcd-server curl graphite-carbon graphite-web
STATSD := $(VENV)/npm/node_modules/statsd/stats.js
test-programs: test-programs-debian $(STATSD)
$(STATSD): | $(STAMP) test-programs-debian
	@if ! command -v npm >/dev/null && command -v apt-get >/dev/null && [ "$$(id -u)" -eq 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 npm; fi; \
	if command -v npm >/dev/null; then npm install --prefix $(VENV)/npm --omit=optional --no-audit --no-fund \
	  --no-save --loglevel=error statsd@0.9.0; else echo "no npm: the Graphite tests will be skipped"; fi
test-programs-debian:
	@for program in $(TEST_PROGRAMS); do test -x $$program || missing=1; done; test -z "$$missing" || { \
	  if ! command -v apt-get >/dev/null; then echo "no apt-get: tests needing $(TEST_PACKAGES) will be skipped"; exit 0; fi; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	  elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	  else echo "no root or passwordless sudo: tests needing $(TEST_PACKAGES) will be skipped"; exit 0; fi; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -qq && apt-get install -y -qq -o Dpkg::Use-Pty=0 $(TEST_PACKAGES)'; }

## wheels for the Docker images (deploy/wheels): every dependency, built here so that an image build needs no
## package index (OFFLINE=1); the pipeline's (PySpark, pyarrow) apart, so the services image does not carry them;
## what the image's build of the package needs (setuptools, mypy for mypyc) apart too
## The client's and the connector's wheels are left out: the images build them from clients/ (ones of the same version
## here could be older)
wheels: $(STAMP)
	rm -rf deploy/wheels/services deploy/wheels/pipeline deploy/wheels/build
	$(BIN)/pip wheel --quiet --wheel-dir deploy/wheels/build 'setuptools>=68' 'mypy>=1.10'
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir deploy/wheels/services 'clients/python'
	NSQ_PY_COMPILE=0 $(BIN)/pip wheel --quiet --wheel-dir deploy/wheels/services --find-links deploy/wheels/services '.[fast]' 'setuptools>=68'
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir deploy/wheels/pipeline 'clients/spark'
	NSQ_PY_COMPILE=0 $(BIN)/pip wheel --quiet --wheel-dir deploy/wheels/pipeline --find-links deploy/wheels/services --find-links deploy/wheels/pipeline '.[fast,pipeline]'
	cd deploy/wheels/pipeline && for wheel in *.whl; do if [ -e "../services/$$wheel" ]; then rm "$$wheel"; fi; done
	rm deploy/wheels/services/nsqclient-*.whl deploy/wheels/pipeline/nsqspark-*.whl

## the API reference of the client (nsqclient) and the Spark connector (nsqspark), generated from their docstrings
## into $(DOCS_DIR) (nsqclient.html, nsqspark.html, nsqspark/options.html: the data source's options)
DOCS_DIR ?= build/api
docs: $(STAMP)
	$(BIN)/pdoc --docformat restructuredtext --output-directory $(DOCS_DIR) nsqclient nsqspark nsqspark.options

## throughput benchmark (see bench/README.md)
bench: $(STAMP) compile
	$(BIN)/python -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache build; $(COMPILED_MODULES) -delete
