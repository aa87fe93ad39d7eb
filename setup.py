"""Build the one compiled extension: hopmem._kernel (Cython over kernels/*.c)."""

import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# Reproducible and portable: no -march=native, no -ffast-math. -ffp-contract=off
# keeps the AVX2 and default clones of the kernel bit-identical (no fused FMA).
compile_args = [] if sys.platform == "win32" else [
    "-O3", "-std=gnu99", "-ffp-contract=off", "-fno-math-errno", "-Wall",
    "-Wno-unused-function", "-Wno-psabi",
]

extensions = [
    Extension(
        "hopmem._kernel",
        sources=["hopmem/_kernel.pyx", "kernels/hopmem_kernel.c", "kernels/hopmem_threads.c"],
        include_dirs=["kernels", np.get_include()],
        depends=["kernels/hopmem_kernel.h", "kernels/hopmem_threads.h", "kernels/dots16_template.h",
                 "kernels/rows_dot_template.h", "kernels/stream_template.h"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
        extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
    )
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
