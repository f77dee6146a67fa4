# The two commands of the README. Both create the environment when it is missing.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test env
env: $(VENV)/.installed

$(VENV)/.installed: $(wildcard requirements/*.txt) pyproject.toml scripts/setup.sh
	scripts/setup.sh

demo: env
	$(PY) -m apps

test: env
	$(VENV)/bin/ruff check --quiet .
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q
