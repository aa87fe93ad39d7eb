# The commands the README names. `make test` and `make demo` work on a fresh
# machine: they create .venv, install hopmem with everything its tests need,
# and build the kernel.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hopmem-installed
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: all install build test typecheck demo serve bench bench-smoke asv asv-smoke clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first, pinned: the CPU build of 2.13.0 lies on this machine's disk, and an
# unpinned torch would pull a multi-GB CUDA build. The build tools go in before the
# editable install, which runs without build isolation: Cython and NumPy for our
# kernel, pybind11 for hnswlib (a peer in the benchmarks), which PyPI ships only as
# source for this Python.
$(STAMP): $(BIN)/python pyproject.toml setup.py
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q setuptools wheel "Cython>=3.0" "numpy>=1.26" "scipy>=1.11" "pybind11>=2.10"
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test,text,server,bench,notebooks]"
	touch $(STAMP)

install: $(STAMP)

# Rebuild the extension in place when kernels/ or the .pyx changed (cheap no-op otherwise).
build: $(STAMP)
	@$(BIN)/python setup.py -q build_ext --inplace 2>&1 | grep -v -i "warning" || true

test: build
	$(BIN)/python -m pytest -q

# The package ships py.typed; its annotations are checked (config in pyproject.toml).
typecheck: build
	$(BIN)/python -m mypy

demo: build
	$(BIN)/python -m hopmem.demo

serve: build
	$(BIN)/python -m hopmem.cli serve --data-dir .hopmem-data --dimension 384

bench: build
	$(BIN)/python -m benchmarks.compare

bench-smoke: build
	$(BIN)/python -m benchmarks.compare --smoke

# asv measures the working tree in this venv (environment_type "existing").
asv: build
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --quick --python=same --show-stderr

# Every asv benchmark once, nothing saved: CI runs this so the suite never rots.
asv-smoke: build
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --quick --dry-run --python=same --show-stderr

clean:
	rm -rf build hopmem/_kernel.c hopmem/*.so .hypothesis .pytest_cache .mypy_cache
