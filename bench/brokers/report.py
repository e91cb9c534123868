"""bench/broker.py's tables: the goals against Tansu (b1-b3), against Apache Kafka (k1-k4), acks=all against acks=1
(a1), and the measurements behind them."""

from __future__ import annotations

from .acks import ACKS_GOAL, ACKS_PRODUCERS
from .clients import VALUE_BYTES

KAFKA_GOAL = 1.0          # kafkalog / Kafka throughput (msg/s), each of the four rows
STARTUP_GOAL = 0.1        # kafkalog start-up / Kafka's
RSS_GOAL = 0.25           # kafkalog RSS / Kafka's, idle and after the throughput runs

def fmt_rate(r: dict | None) -> str:
    if r is None:
        return "n/a"
    return f"{r['msg_s'] / 1e3:7,.0f}k msg/s {r['mb_s']:6.1f} MB/s"


def fmt_mem(m: dict) -> str:
    split = f" (anon {m['rss_anon_mb']:.0f}, file {m['rss_file_mb']:.0f})" if "rss_anon_mb" in m else ""
    return f"{m['rss_mb']:.1f} MB{split}"



def print_report(report: dict) -> None:
    """The goals of issue 4 (b1 against Tansu, b2, b3)."""
    res = report["results"]
    print("\ngoal                        kafkalog                      tansu                         "
          "ratio  target    result")
    for direction in ("produce", "consume"):
        ours = res.get("confluent/kafkalog", {}).get(direction)
        peer = res.get("confluent/tansu", {}).get(direction)
        ratio = ours["msg_s"] / peer["msg_s"] if ours and peer else None
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= 1.0 else "MISS")
        print(f"{'b1.confluent.' + direction:<27} {fmt_rate(ours):<29} {fmt_rate(peer):<29} "
              f"{'' if ratio is None else f'{ratio:4.2f}x':>5}  >= 1.0x   {verdict}")
    for client in ("kafka-python", "aiokafka"):
        for direction in ("produce", "consume"):
            ours = res.get(f"{client}/kafkalog", {}).get(direction)
            name = f"b2.{client}.{direction}"
            if ours is None:
                print(f"{name:<27} n/a")
                continue
            share = ours["broker_cpu_s"] / ours["client_cpu_s"] if ours["client_cpu_s"] else float("inf")
            verdict = "PASS" if share < 1.0 else "MISS"
            peer = res.get(f"{client}/tansu", {}).get(direction)
            beside = "n/a" if peer is None else (f"broker {peer['broker_cpu_s']:5.2f} / client "
                                                 f"{peer['client_cpu_s']:5.2f} s")
            print(f"{name:<27} broker {ours['broker_cpu_s']:5.2f} / client {ours['client_cpu_s']:5.2f} s "
                  f"{beside:<29} {share:5.2f}  < 1.0     {verdict}")
    r = res.get("rss/kafkalog")
    if r is not None:
        verdict = "PASS" if r["rss_mb"] <= 300 and r["open_after_idle"] == r["connections"] else "MISS"
        peer = res.get("rss/tansu")
        print(f"{'b3.rss_100_idle':<27} {fmt_mem(r):<29} {fmt_mem(peer) if peer else 'n/a':<29} "
              f"{'':>5}  <= 300 MB {verdict}")
        print(f"{'':<27} (idle before: {fmt_mem(r['before'])}; {r['open_after_idle']}/{r['connections']} "
              "connections still open after 1 s)")
    if "after-load/kafkalog" in res:
        peer = res.get("after-load/tansu")
        print(f"{'info.rss_after_the_runs':<27} {fmt_mem(res['after-load/kafkalog']):<29} "
              f"{fmt_mem(peer) if peer else 'n/a':<29}")


def fmt_tool_rate(r: dict | None) -> str:
    if r is None:
        return "n/a"
    return f"{r['msg_s'] / 1e3:7,.0f}k rec/s {r['tool_mb_s']:6.1f} MB/s"


def fmt_startup(r: dict | None) -> str:
    if r is None:
        return "n/a"
    fmt = f" (+format {r['format_s']:.2f} s)" if r.get("format_s") else ""
    return f"{r['seconds']:.3f} s{fmt}"


def print_kafka_report(report: dict) -> None:
    """Issue 12, item 5: kafkalog beside Apache Kafka (and Tansu), the goals against Kafka."""
    res, p = report["results"], report["params"]
    kafka = report["facts"].get("kafka")
    print(f"\nkafkalog beside Apache Kafka {kafka} (and Tansu), one run, same machine — confluent-kafka "
          f"{report['records']:,} x {VALUE_BYTES} B and perf tools {report['perf_records']:,} x {VALUE_BYTES} B, best "
          f"of {report['repeat']}, brokers alternating; start-up best of {p['startup_runs']} "
          f"(Kafka {p['kafka_startup_runs']})")
    print(f"{'goal':<24} {'kafkalog':<27} {'kafka':<27} {'tansu':<27} {'k/kafka':>7} {'k/tansu':>7}  "
          f"{'target':<9} result")

    def row(name, ours, peer, other, fmt, value, target, op, goal):
        rk = value(ours) / value(peer) if ours is not None and peer is not None and value(peer) else None
        rt = value(ours) / value(other) if ours is not None and other is not None and value(other) else None
        verdict = "n/a" if rk is None else ("PASS" if op(rk, goal) else "MISS")
        print(f"{name:<24} {fmt(ours):<27} {fmt(peer):<27} {fmt(other):<27} "
              f"{'' if rk is None else f'{rk:6.2f}x':>7} {'' if rt is None else f'{rt:6.2f}x':>7}  "
              f"{target:<9} {verdict}")

    ge, le = (lambda a, b: a >= b), (lambda a, b: a <= b)
    for direction in ("produce", "consume"):
        row(f"k1.confluent.{direction}", *(res.get(f"confluent/{n}", {}).get(direction) for n in BROKERS_K),
            fmt_rate, lambda r: r["msg_s"], f">= {KAFKA_GOAL}x", ge, KAFKA_GOAL)
    for direction in ("produce", "consume"):
        row(f"k2.perf-test.{direction}", *(res.get(f"perf-test/{n}", {}).get(direction) for n in BROKERS_K),
            fmt_tool_rate, lambda r: r["msg_s"], f">= {KAFKA_GOAL}x", ge, KAFKA_GOAL)
    row("k3.startup", *(res.get(f"startup/{n}") for n in BROKERS_K), fmt_startup, lambda r: r["seconds"],
        f"<= {STARTUP_GOAL}x", le, STARTUP_GOAL)
    row("k4.rss.idle", *(res.get(f"rss-idle/{n}") for n in BROKERS_K), lambda m: "n/a" if m is None else fmt_mem(m),
        lambda m: m["rss_mb"], f"<= {RSS_GOAL}x", le, RSS_GOAL)
    row("k4.rss.after_the_runs", *(res.get(f"after-load/{n}") for n in BROKERS_K),
        lambda m: "n/a" if m is None else fmt_mem(m), lambda m: m["rss_mb"], f"<= {RSS_GOAL}x", le, RSS_GOAL)
    print("(k/kafka decides; k/tansu is information. Perf-tool MB = 2^20 bytes, as the tools print it; "
          "k2 consume is the tool's fetch rate, the group join left out)")


BROKERS_K = ("kafkalog", "kafka", "tansu")  # the column order of the Kafka table


def print_measurements(report: dict) -> None:
    res = report["results"]
    print("\nmeasurements (best of the runs for confluent-kafka; CPU = user+system seconds over the timed region)")
    print(f"{'client/broker':<22} {'phase':<8} {'records':>10} {'seconds':>8} {'msg/s':>10} {'MB/s':>6} "
          f"{'client CPU':>10} {'broker CPU':>10}  runs (msg/s)")
    for key, phases in res.items():
        if key.startswith(("rss/", "after-load/", "rss-idle/", "startup/", "perf-test/")):
            continue
        for phase, r in phases.items():
            runs = ", ".join(f"{x:,}" for x in r.get("runs", []))
            print(f"{key:<22} {phase:<8} {r['records']:>10,} {r['seconds']:>8.2f} {r['msg_s']:>10,.0f} "
                  f"{r['mb_s']:>6.1f} {r['client_cpu_s']:>10.2f} {r['broker_cpu_s']:>10.2f}  {runs}")
    perf_rows = [(k.split("/", 1)[1], phase, r) for k, phases in res.items() if k.startswith("perf-test/")
                 for phase, r in phases.items()]
    if perf_rows:
        print("\nkafka-producer-perf-test / kafka-consumer-perf-test (best of the runs by rec/s; MB = 2^20 bytes as "
              "the tools print it; broker CPU over the tool's whole run, its JVM start included)")
        print(f"{'broker':<10} {'phase':<8} {'records':>10} {'rec/s':>10} {'MB/s':>7} {'broker CPU':>10}  "
              f"{'details':<52} runs (rec/s)")
        for name, phase, r in perf_rows:
            if phase == "produce":
                detail = (f"latency avg {r['avg_ms']:.1f} ms, p50 {r['p50_ms']}, p99 {r['p99_ms']}, "
                          f"max {r['max_ms']:.0f} ms")
            else:
                detail = (f"whole run {r['overall_msg_s']:,.0f} rec/s (join {r['rebalance_ms']:.0f} ms, "
                          f"fetch {r['fetch_ms']:.0f} ms)")
            runs = ", ".join(f"{x:,}" for x in r["runs"])
            print(f"{name:<10} {phase:<8} {r['records']:>10,} {r['msg_s']:>10,.0f} {r['tool_mb_s']:>7.1f} "
                  f"{r['broker_cpu_s']:>10.2f}  {detail:<52} {runs}")
    starts = [(k.split("/", 1)[1], r) for k, r in res.items() if k.startswith("startup/")]
    if starts:
        print("\nstart-up: seconds from the spawn until a confluent-kafka producer's first record (to an "
              "auto-created topic) is acknowledged")
        for name, r in starts:
            fmt = f"; Kafka's storage format before each: {', '.join(map(str, r['format_runs']))} s" \
                if r.get("format_runs") else ""
            print(f"{name:<10} best {r['seconds']:.3f} s; runs {', '.join(f'{x:.3f}' for x in r['runs'])} s{fmt}")
    for note in report["notes"]:
        print("note: " + note)



def print_acks_report(report: dict) -> None:
    res, p = report["results"], report["params"]
    overrides = f"; serve --override {' '.join(p['overrides'])}" if p["overrides"] else ""
    print(f"\nacks=all vs acks=1 — kafkalog serve, confluent-kafka producers each in its own process, "
          f"{VALUE_BYTES}-byte values, {p['acks_partitions']} partition(s), {p['acks_seconds']:g} s window, median of "
          f"{p['repeat']} run(s){overrides}")
    print(f"{'goal':<18} {'producers':>9}  {'acks=1':<27} {'acks=all':<27} {'all/1':>6}  {'target':<8} result")
    for n in ACKS_PRODUCERS:
        one, full = res.get(f"acks/{n}/1"), res.get(f"acks/{n}/all")
        ratio = full["msg_s"] / one["msg_s"] if one and full else None
        goal = n >= 8
        verdict = "n/a" if ratio is None else ("info" if not goal else ("PASS" if ratio >= ACKS_GOAL else "MISS"))
        print(f"{('a1' if goal else 'info') + f'.producers.{n}':<18} {n:>9}  {fmt_rate(one):<27} {fmt_rate(full):<27} "
              f"{'' if ratio is None else f'{ratio:5.2f}x':>6}  {f'>= {ACKS_GOAL}x' if goal else 'info':<8} {verdict}")
    if "after-load/kafkalog" in res:
        print(f"{'info.rss_after_the_runs':<29}{fmt_mem(res['after-load/kafkalog'])}")

    print("\nmeasurements (median of the runs; records = acknowledged within the window, over all producers; broker "
          "CPU = user+system seconds over the window)")
    print(f"{'producers/acks':<16} {'records':>10} {'seconds':>8} {'msg/s':>10} {'MB/s':>6} {'broker CPU':>10}  "
          "runs (msg/s)")
    for n in ACKS_PRODUCERS:
        for acks in ("1", "all"):
            r = res.get(f"acks/{n}/{acks}")
            if r is not None:
                runs = ", ".join(f"{x:,}" for x in r["runs"])
                print(f"{f'{n}/acks={acks}':<16} {r['records']:>10,} {r['seconds']:>8.1f} {r['msg_s']:>10,.0f} "
                      f"{r['mb_s']:>6.1f} {r['broker_cpu_s']:>10.2f}  {runs}")
    for note in report["notes"]:
        print("note: " + note)
