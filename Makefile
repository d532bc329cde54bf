PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rankcast demo

test: $(STAMP)
	$(BIN)/python -m pyflakes rankcast tests
	$(BIN)/python -m pytest -q --durations=30

bench: $(STAMP)
	$(BIN)/rankcast bench engine

clean:
	rm -rf $(VENV) out .pytest_cache
