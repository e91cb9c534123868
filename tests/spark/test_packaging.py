"""Packaging of the Spark extra: kafkalog.spark imports without pyspark (and says which extra is missing), and
Spark's own lookup finds the top-level module pyspark_kafkalog."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import PKG_ROOT


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(PKG_ROOT), "PYTHONSAFEPATH": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_imports_without_pyspark_and_names_the_extra(tmp_path):
    r = _python("""
        import sys

        class NoSpark:  # as if the spark extra were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pyspark", "pyarrow"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NoSpark())
        import kafkalog.spark
        from kafkalog.spark import options, offsets
        options.parse_read_options({"path": "/d", "subscribe": "t"})
        try:
            kafkalog.spark.register(None)
        except ImportError as e:
            print("ImportError:", e)
        try:
            kafkalog.spark.KafkaLogDataSource
        except ImportError as e:
            print("ImportError:", e)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert all(line.startswith("ImportError: kafkalog.spark needs pyspark>=4.2 and pyarrow: "
                                "pip install 'kafkalog[spark]'") for line in lines), lines


def test_sparks_lookup_finds_pyspark_kafkalog(tmp_path):
    """Spark's own lookup worker code (pyspark.sql.worker.lookup_data_sources), run on the same import path the
    tests give Spark's Python workers."""
    pytest.importorskip("pyspark")
    r = _python("""
        import io
        from pyspark.serializers import read_int, UTF8Deserializer
        from pyspark.sql.worker.lookup_data_sources import _main
        from pyspark.worker_util import pickleSer

        out = io.BytesIO()
        _main(io.BytesIO(), out)
        out.seek(0)
        for _ in range(read_int(out)):
            name = UTF8Deserializer().loads(out)
            cls = pickleSer._read_with_length(out)
            print(name, cls.__module__, cls.__name__)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "kafkalog kafkalog.spark.source KafkaLogDataSource" in r.stdout.splitlines()


def test_format_kafkalog_works_before_any_registration_call(auto_registration):
    assert "error" not in auto_registration, auto_registration.get("error")
    assert [bytes(r.value) for r in auto_registration["rows"]] == [b"found"]
