"""What the benchmarks of this directory share: timing, peers that cannot run here, the goal table, JSON output.

Plain module, imported by the scripts here (``python bench/run.py`` puts bench/ first on sys.path):

- timing: ``repeat_runs`` (one warm-up run discarded, then best or median of R), ``latency_stats``, ``self_cpu`` and
  ``Measure`` (wall time and CPU seconds of this process and of another one over a timed region), ``best_by_rate`` and
  ``median_by_rate`` (the run that stands for several, by records/s);
- peers: ``Unavailable`` (a side cannot run here: its cells say n/a and why), ``need_module``, ``compat_lab`` and
  ``kafka_libs`` (tests/compat/lab.py, which starts Apache Kafka for the tests and the benchmarks alike),
  ``snapshot_kafkalog`` (the build a run measures, copied at its start);
- the goal table: ``row`` (one absolute measurement), ``Goal``, ``judge``, ``print_goals``, ``print_measurements``
  and their number formatting; ``progress``, ``write_json``.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import time

perf = time.perf_counter
MB = 1e6
MiB = 1 << 20
GB = 1e9
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def progress(msg: str):
    print("# " + msg, flush=True)


def write_json(path: str, doc: dict, indent: int = 1) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=indent, default=str)


# ------------------------------------------------------------------------------------------------ peers

class Unavailable(Exception):
    """A side of a comparison cannot run here (missing package, codec or broker): its cells say n/a and why."""


def need_module(name: str, what: str | None = None):
    """The module `name`, or Unavailable("<what> missing: ...") when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise Unavailable(f"{what or name} missing: {e}") from None


def snapshot_kafkalog(dest: str) -> str:
    """Copy the kafkalog package (the installed one when there is one, as in CI, else this checkout's: Python files
    and the built engine) to dest and return the directory to import it from: the run measures the build as it was
    when it started, and an in-place rebuild meanwhile (which rewrites the .so files under a running process and
    crashes it) cannot touch it. Unavailable when there is no kafkalog to copy."""
    spec = importlib.util.find_spec("kafkalog")
    src = os.path.dirname(spec.origin) if spec is not None and spec.origin else os.path.join(ROOT, "kafkalog")
    if not os.path.isdir(src):
        raise Unavailable(f"kafkalog not found (looked in {src})")
    shutil.copytree(src, os.path.join(dest, "kafkalog"),
                    ignore=shutil.ignore_patterns("*.c", "*.html", "__pycache__", "*.o"))
    return dest


_LAB = None


def compat_lab():
    """tests/compat/lab.py (Kafka's jars, the JVM, its tools, the one place that starts Apache Kafka), imported by
    path; Unavailable when it is missing."""
    global _LAB
    if _LAB is None:
        path = os.path.join(ROOT, "tests", "compat", "lab.py")
        if not os.path.isfile(path):
            raise Unavailable(f"Kafka not available: {path} is missing (the compatibility lab starts Kafka)")
        spec = importlib.util.spec_from_file_location("kafkalog_bench_compat_lab", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _LAB = mod
    return _LAB


def kafka_libs():
    """(lab module, folder of Kafka's jars): fetched by .ci/lab-kafka on first use (needs mvn and java)."""
    lab = compat_lab()
    try:
        return lab, lab.kafka_libs()
    except lab.LabError as e:
        raise Unavailable(f"Kafka not available: {e}") from None


# ------------------------------------------------------------------------------------------------ timing

def repeat_runs(run, n: int, agg: str, reps: int, warm_n: int):
    """Time run(n) -> seconds (run does its own setup and teardown outside its timed region): one warm-up run on
    warm_n, discarded, then `reps` runs aggregated by 'best' (min) or 'median'. (seconds, runs, method)."""
    gc.collect()
    run(warm_n)
    times = []
    for _ in range(reps):
        gc.collect()
        times.append(run(n))
    sec = min(times) if agg == "best" else statistics.median(times)
    method = (f"{agg} of {reps}" if reps > 1 else "1 run") + f" (warm-up of {warm_n:,} discarded)"
    return sec, times, method


def latency_stats(lat_s):
    lat = sorted(lat_s)
    k = len(lat)
    return {"p50_us": lat[k // 2] * 1e6, "p99_us": lat[min(k - 1, int(k * 0.99))] * 1e6,
            "mean_us": sum(lat) / k * 1e6, "samples": k}


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Measure:
    """Wall time and CPU seconds of this process and of `other` (anything with cpu(): a broker) over a timed
    region: ``seconds``, ``client_cpu``, ``broker_cpu``."""

    def __init__(self, other):
        self.broker = other

    def __enter__(self):
        self.cpu0, self.bcpu0, self.t0 = self_cpu(), self.broker.cpu(), perf()
        return self

    def __exit__(self, *exc):
        self.seconds = perf() - self.t0
        self.client_cpu = self_cpu() - self.cpu0
        self.broker_cpu = self.broker.cpu() - self.bcpu0
        return None


def best_by_rate(runs: list[dict]) -> dict:
    """The run with the highest msg_s (the one least disturbed by other work on the machine), with every run's."""
    return dict(max(runs, key=lambda r: r["msg_s"]), runs=[round(r["msg_s"]) for r in runs])


def median_by_rate(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["msg_s"])
    return dict(ordered[(len(ordered) - 1) // 2], runs=[round(r["msg_s"]) for r in runs])


# ------------------------------------------------------------------------------------------------ the goal table

def row(name, side, what, *, n=None, seconds=None, nbytes=None, method="", note="", **extra):
    """One absolute measurement. side: 'kafkalog', 'peer' or 'floor' (a physical limit)."""
    r = {"name": name, "side": side, "what": what, "n": n, "seconds": seconds,
         "rec_s": n / seconds if (n and seconds) else None,
         "mb_s": nbytes / seconds / MB if (nbytes and seconds) else None,
         "method": method, "note": note}
    r.update(extra)
    return r


class Goal:
    """ours/baseline measured on `metric`; cmp '>=' or '<=' against `target` (a ratio), or an absolute bar when
    baseline is None; 'within' takes target=(lo, hi)."""

    def __init__(self, case, check, ours, baseline, metric, cmp, target):
        self.case, self.check, self.ours, self.baseline = case, check, ours, baseline
        self.metric, self.cmp, self.target = metric, cmp, target

    def measurements(self):
        return [m for m in (self.ours, self.baseline) if m]


def fmt_metric(metric, v):
    if v is None:
        return "-"
    if metric == "rec_s":
        return f"{v / 1e6:.2f} M rec/s" if v >= 1e6 else f"{v / 1e3:.1f} k rec/s" if v >= 1e3 else f"{v:.0f} rec/s"
    if metric == "mb_s":
        return f"{v:,.0f} MB/s"
    if metric == "cyc_s":
        return f"{v:,.0f} cycles/s"
    if metric == "p50_us":
        return f"{v:.2f} us"
    if metric == "seconds":
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    if metric == "value":
        return f"{v / MiB:.1f} MiB"
    return f"{v:g}"


def judge(goal: Goal, results: dict, errors: dict) -> dict:
    out = {"case": goal.case, "check": goal.check, "metric": goal.metric, "cmp": goal.cmp, "target": goal.target,
           "ours_name": goal.ours, "baseline_name": goal.baseline, "ours": None, "baseline": None, "ratio": None}
    missing = [m for m in goal.measurements() if m not in results]
    if missing:
        out["result"] = "n/a"
        out["why"] = "; ".join(f"{m}: {errors.get(m, 'not run')}" for m in missing)
        return out
    ours = results[goal.ours][goal.metric]
    out["ours"] = ours
    if goal.baseline is None:
        ok = ours >= goal.target if goal.cmp == ">=" else ours <= goal.target
    else:
        base = results[goal.baseline][goal.metric]
        out["baseline"] = base
        ratio = ours / base
        out["ratio"] = ratio
        if goal.cmp == ">=":
            ok = ratio >= goal.target
        elif goal.cmp == "<=":
            ok = ratio <= goal.target
        else:
            ok = goal.target[0] <= ratio <= goal.target[1]
    out["result"] = "PASS" if ok else "MISS"
    return out


def fmt_target(g: dict) -> str:
    t = g["target"]
    if g["baseline_name"] is None:
        return ("≥ " if g["cmp"] == ">=" else "≤ ") + fmt_metric(g["metric"], t)
    if g["cmp"] == "within":
        return f"{t[0]:g}-{t[1]:g}x"
    return ("≥ " if g["cmp"] == ">=" else "≤ ") + f"{t:g}x"


GOAL_LINE = "{:<18} {:<54} {:>16} {:>16} {:>9} {:>11}  {}"
MEAS_LINE = "{:<40} {:<8} {:>11} {:>9} {:>13} {:>9} {:>10} {:>10}  {}"


def print_goals(goals):
    hdr = GOAL_LINE.format("goal", "check", "ours", "baseline", "ratio", "target", "result")
    print(hdr)
    print("-" * len(hdr))
    for g in goals:
        ratio = "-" if g["ratio"] is None else (f"{g['ratio']:.2f}x" if g["ratio"] < 100 else f"{g['ratio']:,.0f}x")
        base = fmt_metric(g["metric"], g["baseline"]) if g["baseline_name"] else "(absolute)"
        line = GOAL_LINE.format(
            g["case"], g["check"][:54], fmt_metric(g["metric"], g["ours"]), base, ratio, fmt_target(g), g["result"])
        if g["result"] == "n/a":
            line += "  (" + g["why"][:200] + ")"
        print(line)


def print_measurements(rows):
    hdr = MEAS_LINE.format(
        "measurement", "side", "n", "time s", "rec/s", "MB/s", "p50 us", "p99 us", "aggregation; notes")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        def f(v, spec):
            return "" if v is None else format(v, spec)
        extra = f"{r['value'] / MiB:.1f} MiB; " if r.get("value") is not None else ""
        print(MEAS_LINE.format(
            r["name"][:40], r["side"], f(r["n"], ",d"), f(r["seconds"], ".4f"), f(r["rec_s"], ",.0f"),
            f(r["mb_s"], ",.1f"), f(r.get("p50_us"), ".2f"), f(r.get("p99_us"), ".2f"),
            extra + r["method"] + ("; " + r["what"]) + ("; " + r["note"] if r["note"] else "")))
