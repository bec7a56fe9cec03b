"""The compiled part of the engine (``replicator/native``): Cython modules built by
``pip install`` (``make install``), pinned in pyproject.toml's build requirements. Project
metadata lives in pyproject.toml; this file only lists the extension modules."""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = ["binlog_rows", "pgoutput_rows", "text_rows"]

setup(
    ext_modules=cythonize(
        [
            # optional: a failed build leaves the pure-Python paths (the engine logs it;
            # under CI a test insists on the compiled modules)
            Extension(f"replicator.native.{name}", [f"replicator/native/{name}.pyx"],
                      extra_compile_args=["-O2"], optional=True)
            for name in NATIVE
        ],
        compiler_directives={"language_level": "3"},
    )
)
