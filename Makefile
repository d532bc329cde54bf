PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -q --durations=30
# make test: every test but those that need Ray or Spark or run long, plus one smoke test of each
FAST   := not (ray or spark or slow) or smoke

.PHONY: install warm demo test test-all bench constraints clean

# every extra at the versions of constraints.txt, then the kernels compiled into numba's cache
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	$(BIN)/rankcast warm
	touch $(STAMP)

install: $(STAMP)

warm: $(STAMP)
	$(BIN)/rankcast warm

demo: $(STAMP)
	$(BIN)/rankcast demo

test: $(STAMP)
	$(BIN)/python -m pyflakes rankcast tests
	$(PYTEST) -m "$(FAST)"

test-all: $(STAMP)
	$(BIN)/python -m pyflakes rankcast tests
	$(PYTEST)

bench: $(STAMP)
	$(BIN)/rankcast bench engine

# the newest releases within pyproject.toml's ranges, written to constraints.txt
constraints:
	rm -rf $(VENV)-lock
	$(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/python -m pip install --quiet --upgrade pip
	$(VENV)-lock/bin/python -m pip install --quiet '.[all]'
	{ sed -n '/^#/p' constraints.txt; $(VENV)-lock/bin/python -m pip freeze --exclude-editable | grep -v '^rankcast'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(VENV)-lock

clean:
	rm -rf $(VENV) out .pytest_cache
