# The only entry points humans and CI use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DATA   ?= .data
HOST   ?= 127.0.0.1
PORT   ?= 8080
GRPC_PORT ?= 8085
PYTEST_ARGS ?=

.PHONY: venv console console-test browser run test dist test-fast lint fmt bench clean services-install services-up services-down services-status cluster-up cluster-down cluster-status authn-demo authn-demo-down

venv: $(VENV)/.installed

# the console is built with the venv, so that a fresh checkout's `make run` serves it (`run` and
# `test` build it again when its sources changed; the other targets leave it as it is)
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	$(MAKE) --no-print-directory console
	touch $@

# --- the web console (console/, docs/console.md) ----------------------------------------------
NPM ?= npm
CONSOLE_DIST := ams_app/console_dist
#: npm ci's stamp: inside node_modules, so that a removed node_modules installs again
CONSOLE_MODULES := console/node_modules/.ams-installed
CONSOLE_SOURCES = $(shell find console/src console/public -type f 2>/dev/null) console/index.html \
	console/vite.config.ts console/tsconfig.json console/package.json console/package-lock.json

## The web console, built with npm (TypeScript, Vite) into $(CONSOLE_DIST), which the package ships
## and `ams serve` serves at /console/; Node.js is needed for this build only (skipped while up to date)
console: $(CONSOLE_DIST)/index.html

$(CONSOLE_MODULES): console/package-lock.json console/package.json
	@command -v $(NPM) >/dev/null || { echo "make console: $(NPM) not found: install Node.js (20.19 or newer) and npm" >&2; exit 1; }
	cd console && $(NPM) ci --no-audit --no-fund || { echo "make console: npm ci refused console/package-lock.json:" \
		"it must match console/package.json (run npm install in console/ and commit the lock)" >&2; exit 1; }
	touch $@

$(CONSOLE_DIST)/index.html: $(CONSOLE_MODULES) $(CONSOLE_SOURCES)
	cd console && $(NPM) run build
	@test -f $@ || { echo "make console: npm run build wrote no $@ (console/vite.config.ts build.outDir)" >&2; exit 1; }

## The console's unit tests (vitest, in console/)
console-test: $(CONSOLE_MODULES)
	cd console && $(NPM) test

## Debian's chromium for the console's end-to-end tests (tools/browser.py; needs root the first time)
browser: venv
	$(BIN)/python -m tools.browser install

## Run the service on the embedded backend at http://$(HOST):$(PORT), and Google's Pub/Sub gRPC API
## at $(HOST):$(GRPC_PORT) in emulator mode: calls without credentials act as admin (docs/pubsub.md)
run: venv console
	$(BIN)/ams admin bootstrap --data-dir $(DATA) --host $(HOST) --port $(PORT)
	$(BIN)/ams serve --data-dir $(DATA) --host $(HOST) --port $(PORT) --grpc-port $(GRPC_PORT) --grpc-emulator-user admin

## Run the whole test suite on both backends: the console's unit tests, then Kafka, ZooKeeper and
## FerretDB (installed on first use) and chromium, then real servers over sockets, the official
## client over HTTPS, the console in a browser
test: venv console-test console browser services-up
	$(BIN)/pytest --durations=30 $(PYTEST_ARGS)

## The quick loop, in seconds and without servers: the service's rules in-process (the unit tests
## of ams_app and the API tests marked inprocess, through Flask's test client, tests/inprocess.py)
FAST_TESTS = tests/unit/ams_app tests/unit/test_push_units.py tests/unit/test_republish_routing.py tests/unit/test_inprocess_harness.py \
	$(shell grep -l '^pytestmark = pytest.mark.inprocess' tests/api/test_*.py)
test-fast: venv console-test
	AMS_TEST_BACKENDS=embedded $(BIN)/pytest $(FAST_TESTS) $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check ams_app spark tests benchmarks tools molecule
	$(BIN)/ruff format --check ams_app spark tests benchmarks tools molecule
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format ams_app spark tests benchmarks tools molecule
	$(BIN)/ruff check --fix ams_app spark tests benchmarks tools molecule

## Publish and pull throughput on this machine (numbers: docs/benchmarks.md; the others:
## .venv/bin/python -m benchmarks.NAME from here)
bench: venv
	$(BIN)/python -m benchmarks.api_throughput

## AuthN on one machine: AMS on 127.0.0.2:443 and `ams authn` on :8443 with a demo CA; argo-ams-library
## gets a token with a client certificate (needs root for port 443; docs/authn.md)
authn-demo: venv
	$(BIN)/python -m tools.authn_demo up

authn-demo-down: venv
	$(BIN)/python -m tools.authn_demo down

## Kafka (ZooKeeper mode), ZooKeeper and FerretDB (MongoDB protocol) on loopback (docs/services.md)
services-install: venv
	$(BIN)/python -m tools.services install

services-up: venv
	$(BIN)/python -m tools.services up

## Stop the cluster (it runs on them), then them; `make services-down PURGE=1` also deletes their data
services-down: venv cluster-down
	$(BIN)/python -m tools.services down $(if $(PURGE),--purge)

services-status: venv
	$(BIN)/python -m tools.services status

## NODES ams nodes (default 3) behind haproxy on https://127.0.0.1:8443 (tools/cluster.py), starting the
## services first, with one owner per pull subscription (consume_owner) as in production;
## CLUSTER_BACKEND=embedded without Kafka
NODES ?= 3
CLUSTER_BACKEND ?= kafka
cluster-up: venv
	$(BIN)/python -m tools.cluster up --nodes $(NODES) --backend $(CLUSTER_BACKEND)

cluster-down: venv
	$(BIN)/python -m tools.cluster down

cluster-status: venv
	$(BIN)/python -m tools.cluster status

.PHONY: spark-jars spark-up spark-down spark-status
## The Kafka connector of Spark and its dependencies (Maven) into .cache/spark/jars (skipped while up to date)
spark-jars: venv
	$(BIN)/python -m tools.spark_cluster jars

## A Spark standalone master (spark://127.0.0.1:17077, UI :17080) and one worker on loopback, from the pyspark wheel
spark-up: venv spark-jars
	$(BIN)/python -m tools.spark_cluster up

spark-down: venv
	$(BIN)/python -m tools.spark_cluster down

spark-status: venv
	$(BIN)/python -m tools.spark_cluster status

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .mypy_cache .ruff_cache *.egg-info console/node_modules $(CONSOLE_DIST)

# --- Ansible (docs/ansible.md) --------------------------------------------------------------
.PHONY: image image-check artifacts molecule molecule-all lint-ansible test-static deploy
# Molecule and ansible-lint run ansible-config, ansible-playbook and pytest from PATH.
ANSIBLE_PATH := PATH="$(CURDIR)/$(BIN):$$PATH"
MOLECULE_SCENARIOS := $(sort $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
S ?=

## The systemd image the Molecule scenarios run on: podman, runc, debootstrap and containers.conf,
## then debootstrap + podman import (skipped while up to date)
image: venv
	$(BIN)/python -m tools.image setup
	$(BIN)/python -m tools.image build

## Boot the image once and wait for systemd to reach "running"
image-check: image
	$(BIN)/python -m tools.image check

## The release: the ams-app wheel (with the console, built first) and sdist at pyproject.toml's
## version, and SHA256SUMS, under dist/ (tools/dist.py; docs/production.md, "Releases")
dist: venv
	$(BIN)/python -m tools.dist --out dist

## What the roles install from the controller, built here under .cache/artifacts (tools/artifacts.py):
## the Kafka archive, the FerretDB binary, the AMS wheelhouse, the pyspark wheels, a test CA
artifacts: venv
	$(BIN)/python -m tools.artifacts all

## Molecule (create, converge, idempotence, verify, destroy): `make molecule S=ams` for one scenario
## (or S="kafka spark"), without S every scenario under molecule/, MOLECULE_JOBS at a time
## (tools/molecule_run.py; logs in .cache/molecule/)
MOLECULE_JOBS ?= 2
molecule: image artifacts
	$(ANSIBLE_PATH) $(BIN)/python -m tools.molecule_run --jobs $(MOLECULE_JOBS) $(S)

molecule-all:
	$(MAKE) molecule S=

## yamllint and ansible-lint (production profile) over the repository
lint-ansible: venv
	$(BIN)/yamllint -s .
	$(ANSIBLE_PATH) $(BIN)/ansible-lint

## The fast repository-wide checks: argument specs = defaults, linters clean
test-static: venv
	$(BIN)/pytest -q tests/static

## Deploy the appliance to your hosts: `make deploy INVENTORY=inventories/production ANSIBLE_ARGS=--ask-vault-pass`
## (first builds what the production roles copy from the controller: DEPLOY_ARTIFACTS, needing Maven
## for the Kafka archive; README "Deploying")
INVENTORY ?= inventories/production
PLAYBOOK ?= playbooks/site.yml
ANSIBLE_ARGS ?=
DEPLOY_ARTIFACTS ?= kafka wheels spark spark-jobs
deploy: venv
	$(BIN)/python -m tools.artifacts $(DEPLOY_ARTIFACTS)
	$(ANSIBLE_PATH) $(BIN)/ansible-playbook -i $(INVENTORY) $(PLAYBOOK) $(ANSIBLE_ARGS)
