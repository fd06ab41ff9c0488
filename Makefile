# `make run`  - the main job: distributed MPO (local_mp) on dm_control cartpole:swingup.
# `make test` - the default test suite.
# `make lint` - ruff and the import contract (pyproject.toml); CI runs it.
# `make test-tooling` - tests of the bench/ and studies/ scripts; CI runs it.
# `make image` - build the Dockerfile's image without a Docker daemon or registry and run it (root; scripts/build_image_rootless.sh).
# `make venv-cloud` - .venv-cloud, the Vertex AI client for launch/cloud/submit.py (requirements-cloud.lock); `make test` builds it.
# `make venv-imitation` - .venv-imitation, the imitation library for studies/imitation_gail.py (studies/imitation-requirements.txt).
# Both build .venv from requirements.lock with CPython 3.10 first (found by scripts/find_python310.sh).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# pytest-xdist workers of `make test` (whole-program tests stay on one; 0:
# the suite in one process).
TEST_WORKERS ?= 2
STAMP := $(VENV)/.installed
LINT_STAMP := $(VENV)/.lint-installed
CLOUD_VENV := .venv-cloud
CLOUD_PY := $(CLOUD_VENV)/bin/python
CLOUD_STAMP := $(CLOUD_VENV)/.installed
IMITATION_VENV := .venv-imitation
IMITATION_STAMP := $(IMITATION_VENV)/.installed

.PHONY: run test test-slow test-tooling lint venv venv-cloud venv-imitation bench image clean-venv

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@# A .venv of CPython 3.10 with pip is kept (whichever 3.10 made it); only
	@# a missing or unusable one needs the finder. A failed `-m venv` (Debian's
	@# python3.10 without python3.10-venv) leaves no half-made .venv behind.
	@set -e; \
	if [ ! -x $(PY) ] || ! $(PY) -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null \
	    || ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  py=$$(scripts/find_python310.sh); \
	  echo "creating $(VENV) with $$py"; rm -rf $(VENV); \
	  $$py -m venv $(VENV) || { rm -rf $(VENV); echo "error: $$py -m venv $(VENV) failed;" \
	    "on Debian/Ubuntu install python3.10-venv (apt install python3.10-venv)" >&2; exit 1; }; fi
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade "pip==24.3.1" "setuptools==75.6.0" "wheel==0.45.1"
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv-cloud: $(CLOUD_STAMP)

# Its own environment: google-cloud-aiplatform needs protobuf >= 3.20 and .venv
# pins 3.19 (TensorFlow 2.8, Reverb 0.7). Made afresh whenever the lock changes,
# so it holds exactly the lock; pip, setuptools and wheel as in .venv.
$(CLOUD_STAMP): requirements-cloud.lock
	@set -e; py=$$(scripts/find_python310.sh); \
	echo "creating $(CLOUD_VENV) with $$py"; rm -rf $(CLOUD_VENV); \
	$$py -m venv $(CLOUD_VENV) || { rm -rf $(CLOUD_VENV); echo "error: $$py -m venv $(CLOUD_VENV) failed;" \
	  "on Debian/Ubuntu install python3.10-venv (apt install python3.10-venv)" >&2; exit 1; }
	$(CLOUD_PY) -m pip install --quiet --disable-pip-version-check --upgrade "pip==24.3.1" "setuptools==75.6.0" "wheel==0.45.1"
	$(CLOUD_PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-cloud.lock
	@touch $(CLOUD_STAMP)

venv-imitation: $(IMITATION_STAMP)

# The imitation library (PyTorch, stable-baselines3, gymnasium 0.29) shares
# nothing with .venv; any CPython 3.9-3.11 `python3` makes it. PyTorch 2.13.0
# is the CPU build where pip finds that file, else PyPI's (a CUDA build).
$(IMITATION_STAMP): studies/imitation-requirements.txt
	@set -e; echo "creating $(IMITATION_VENV) with $$(command -v python3)"; rm -rf $(IMITATION_VENV); \
	python3 -m venv $(IMITATION_VENV) || { rm -rf $(IMITATION_VENV); echo "error: python3 -m venv failed" >&2; exit 1; }
	$(IMITATION_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r studies/imitation-requirements.txt
	@touch $(IMITATION_STAMP)

run: venv
	$(VENV)/bin/tandem train --config configs/mpo.py:make_run --launch local_mp --num_actors 2 \
	  --name make_run_$$(date +%Y%m%d_%H%M%S)

# The tests run in a network namespace of their own (scripts/private_network.sh):
# the Reverb and Courier servers they start bind every interface.
PRIVATE := scripts/private_network.sh $(PY)

# The slowest tests are listed at the end of a run, so a CI log says where
# the default run's time goes.
test: venv venv-cloud
	$(PRIVATE) $(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadgroup tests

test-slow: venv
	$(PRIVATE) $(PY) -m pytest -q -m slow tests

test-tooling: venv
	$(PRIVATE) $(PY) -m pytest -q -m tooling tests

# The lint tools join .venv (requirements-lint.lock adds packages, changes no
# pin): the import contract needs the installed `tandem` to find its modules.
$(LINT_STAMP): $(STAMP) requirements-lint.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-lint.lock
	@touch $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check --no-cache agents launch configs tests bench studies
	$(VENV)/bin/lint-imports --no-cache

bench: venv
	$(PY) bench/learner.py && $(PY) bench/learner_parts.py && $(PY) bench/duals.py && $(PY) bench/actor.py && $(PY) bench/program.py

image:
	scripts/build_image_rootless.sh

clean-venv:
	rm -rf $(VENV)
