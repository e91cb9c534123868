"""Build of kafkalog's compiled engine.

KAFKALOG_DEBUG=1 turns on Cython bounds/wraparound checks, line tracing and the C-level KL_CHECK asserts.
KAFKALOG_ONLY=batch,index builds a subset in place while developing one module (the list below is the product).
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("KAFKALOG_DEBUG", "") not in ("", "0")

EXTENSIONS = [
    # (module, sources)
    ("kafkalog._engine.framing", ["kafkalog/_engine/framing.pyx"]),
    ("kafkalog._engine.codecs", ["kafkalog/_engine/codecs.pyx"]),
    ("kafkalog._engine.batch", ["kafkalog/_engine/batch.pyx"]),
    ("kafkalog._engine.accumulator", ["kafkalog/_engine/accumulator.pyx"]),
    ("kafkalog._engine.delivery", ["kafkalog/_engine/delivery.pyx"]),
    ("kafkalog._engine.columns", ["kafkalog/_engine/columns.pyx"]),
    ("kafkalog._engine.compaction", ["kafkalog/_engine/compaction.pyx"]),
    ("kafkalog._engine.index", ["kafkalog/_engine/index.pyx"]),
    ("kafkalog._engine.segment", ["kafkalog/_engine/segment.pyx"]),
    ("kafkalog.broker._wire", ["kafkalog/broker/_wire.pyx"]),
]

only = {m.strip() for m in os.environ.get("KAFKALOG_ONLY", "").split(",") if m.strip()}

extensions = [
    Extension(
        name,
        sources,
        include_dirs=["include", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
        + ([("KAFKALOG_DEBUG", "1"), ("CYTHON_TRACE_NOGIL", "1")] if DEBUG else []),
        extra_compile_args=["-O0", "-g"] if DEBUG else ["-O2"],
    )
    for name, sources in EXTENSIONS
    if not only or name.rsplit(".", 1)[1] in only
]

directives = {
    "language_level": "3",
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "linetrace": DEBUG,
    "embedsignature": True,
}

setup(ext_modules=cythonize(extensions, compiler_directives=directives, include_path=["kafkalog/_engine"]))
