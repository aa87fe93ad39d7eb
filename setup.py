"""Build the one compiled extension: hopmem.engine._kernel (Cython over kernels/*.c).

The environment variable HOPMEM_BUILD picks the flavour of the build:

- ``release`` (the default): optimised, portable, what users get;
- ``debug``: ``-O0 -g3``, for stepping through the kernel in gdb;
- ``asan``: AddressSanitizer and UndefinedBehaviorSanitizer (``-O1 -g``);
- ``tsan``: ThreadSanitizer (``-O1 -g``), the flags tests/test_threads.py uses
  for its C harnesses;
- ``portable``: the release build with every x86 path compiled out (``HM_PORTABLE``:
  no AVX2 clones, no F16C, no AMX), the code a non-x86 machine (aarch64) runs, so
  that it is tested on x86 too (``make test-portable``).

A sanitized extension loads only into a process that has the sanitizer's
runtime first: ``make test-asan`` / ``make test-tsan`` set LD_PRELOAD for
pytest (see CONTRIBUTING.md).
"""

import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

BUILD = os.environ.get("HOPMEM_BUILD", "").strip().lower() or "release"

# Reproducible and portable: no -march=native, no -ffast-math. -ffp-contract=off
# keeps the AVX2 and default clones of the kernel bit-identical (no fused FMA), in
# every flavour, so a debug or sanitized build computes the same bits.
COMMON = ["-std=gnu99", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Wno-psabi"]
FLAVOURS: dict[str, tuple[list[str], list[str]]] = {  # name: (compile args, link args)
    "release": (["-O3"], []),
    "debug": (["-O0", "-g3"], []),
    "asan": (["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"],
             ["-fsanitize=address,undefined"]),
    "tsan": (["-O1", "-g", "-fsanitize=thread"], ["-fsanitize=thread"]),
    "portable": (["-O3", "-DHM_PORTABLE"], []),
}
if BUILD not in FLAVOURS:
    sys.exit(f"HOPMEM_BUILD: expected one of {', '.join(FLAVOURS)}, got {BUILD!r}")

if sys.platform == "win32":
    compile_args: list[str] = []
    link_args: list[str] = []
else:
    flavour_compile, flavour_link = FLAVOURS[BUILD]
    compile_args = [*flavour_compile, *COMMON]
    link_args = ["-pthread", *flavour_link]

extensions = [
    Extension(
        "hopmem.engine._kernel",
        sources=["hopmem/engine/_kernel.pyx", "kernels/hopmem_kernel.c", "kernels/hopmem_threads.c",
                 "kernels/amx_batch.c"],
        include_dirs=["kernels", np.get_include()],
        depends=["kernels/hopmem_kernel.h", "kernels/hopmem_threads.h", "kernels/dots16_template.h",
                 "kernels/rows_dot_template.h", "kernels/stream_template.h",
                 "kernels/amx_batch.h"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
