"""The benchmark harness runs end to end and prints a goal row.

Benchmarks are not tests (DESIGN.md rule 10): this only checks that bench/run.py drives both sides of one cheap
comparison and reports it. It never looks at a time or at PASS versus MISS.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_quick_single_case_prints_its_row(tmp_path):
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only", r"^g2\.single_append$",
         "--dir", str(tmp_path / "scratch"), "--json", str(out_json)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("g2.single_append ")]
    assert len(rows) == 1, proc.stdout
    assert rows[0][-1] in ("PASS", "MISS"), rows[0]  # both sides were measured (n/a would mean one was not)
    report = json.loads(out_json.read_text())
    assert [g["case"] for g in report["goals"]] == ["g2.single_append"]
    names = {m["name"] for m in report["measurements"]}
    assert {"kafkalog.append", "file.write_loop"} <= names
    assert not list((tmp_path / "scratch").iterdir())  # the run cleaned up after itself


def test_bench_compaction_quick_cleans_and_reports(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "compaction.py"), "--quick", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("cleaner round 1 ") for line in lines), proc.stdout
    assert any(line.startswith("check: ") and "-> OK" in line for line in lines), proc.stdout
    assert not list(tmp_path.iterdir())  # the run cleaned up after itself
