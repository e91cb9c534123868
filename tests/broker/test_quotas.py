"""KIP-13 client quotas: the windowed rate, the delay formula, defaults and overrides, the empty client id, muting
(KIP-219) and the admin path (Describe/AlterClientQuotas) — at unit level with a controlled clock, then over the
wire."""

from __future__ import annotations

import time

import pytest

from kafkalog.broker import Broker
from kafkalog.broker.quotas import FETCH, PRODUCE, ClientQuotas, Rate, parse_overrides, parse_rate
from kafkalog.config import Config
from kafkalog.errors import InvalidConfigError

from .wire import Wire, batch

MB = 1024 * 1024


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def _quotas(clock, **keys):
    return ClientQuotas(Config(keys), None, clock=clock)


def test_the_seeds_example_delays_two_seconds():
    # "a quota of 5MBps with a 10 second window. A client producing at exactly 5MBps ... suddenly produces a 15MB
    # batch in the next second ... 5*9 + 15 = 60MB ... Delay Time = (60 - 50)/5 = 2 second delay."
    clock = Clock(0.0)
    q = _quotas(clock, **{"quota.producer.default": "5M", "quota.window.num": "11"})
    for second in range(1, 10):
        clock.t = float(second)
        assert q.record_produce("c", 5 * MB) == 0
    clock.t = 10.0
    assert q.record_produce("c", 15 * MB) == 2000


def test_rate_window_is_at_least_samples_minus_one_windows():
    r = Rate(11, 1.0, 0.0)
    r.record(100.0, 0.0)
    assert r.window_size(0.001) == pytest.approx(10.001)  # a first burst is spread over 10 s
    assert r.measure(0.001) == pytest.approx(100.0 / 10.001)
    for t in range(1, 30):
        r.record(100.0, float(t))
    # steady state: 11 samples of 1 s, the oldest started 10 s ago
    assert r.window_size(29.5) == pytest.approx(10.5)
    assert r.measure(29.5) == pytest.approx(1100.0 / 10.5)
    # long silence: every sample is obsolete and reset
    assert r.measure(100.0) == 0.0


def test_overrides_defaults_and_the_empty_client_id():
    clock = Clock()
    q = _quotas(clock, **{"quota.producer.default": "1M", "quota.producer.override": "fast:10M,:2M",
                          "quota.consumer.override": "reader:500K"})
    assert q.quota(PRODUCE, "fast") == 10 * MB
    assert q.quota(PRODUCE, "other") == MB
    assert q.quota(PRODUCE, None) == 2 * MB and q.quota(PRODUCE, "") == 2 * MB
    assert q.quota(FETCH, "reader") == 500 * 1024 and q.quota(FETCH, "x") is None
    # clients without an id share one rate
    q.record_produce(None, 15 * MB)
    assert q.byte_rate(PRODUCE, "") == pytest.approx(15 * MB / 10.0)
    assert q.record_produce("", 10 * MB) > 0
    assert q.record_produce("fast", 10 * MB) == 0  # another client id is not affected


def test_fetch_over_quota_is_taken_back():
    clock = Clock()
    q = _quotas(clock, **{"quota.consumer.default": "1M"})
    assert q.record_fetch("c", 5 * MB) == 0
    ms = q.record_fetch("c", 20 * MB)
    assert ms > 0
    # the refused fetch's bytes do not count: the rate is what was sent
    assert q.byte_rate(FETCH, "c") == pytest.approx(5 * MB / 10.0)
    st = q.stats[(FETCH, "c")]
    assert st.throttled_requests == 1 and st.throttle_total_ms == ms


def test_held_rate_converges_to_the_quota():
    # a client that always waits out its throttle time is held at its quota over a long run
    clock = Clock(0.0)
    q = _quotas(clock, **{"quota.producer.default": "1M"})
    sent = 0
    while clock.t < 60.0:
        sent += 256 * 1024
        delay = q.record_produce("c", 256 * 1024)
        clock.t += 0.01 + delay / 1000.0
    assert sent / clock.t == pytest.approx(MB, rel=0.15)


@pytest.mark.parametrize("text,value", [("1048576", MB), ("500K", 500 * 1024), ("2M", 2 * MB), ("1g", 1024 * MB),
                                        ("3MB", 3 * MB)])
def test_parse_rate(text, value):
    assert parse_rate(text, "k") == value


@pytest.mark.parametrize("bad", ["", "fast", "-1", "0", "1X", "nan"])
def test_parse_rate_refuses_nonsense(bad):
    with pytest.raises(InvalidConfigError):
        parse_rate(bad, "quota.producer.default")


def test_parse_overrides_names_the_bad_part():
    assert parse_overrides('"a:1M,b:2M"', "k") == {"a": MB, "b": 2 * MB}
    with pytest.raises(InvalidConfigError, match="not client:rate"):
        parse_overrides("a:1M,b", "quota.producer.override")


# ---------------------------------------------------------------------------------------------------- over the wire

def test_throttled_produce_is_answered_then_muted(tmp_path):
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"quota.producer.default": "25K"}) as b:
        with Wire(b.port, client_id="slow") as w, Wire(b.port, client_id="free") as other:
            w.create_topic("q")
            big = batch([b"x" * 1000] * 300)  # ~300 KB = 12 s of the quota: 2 s more than the 10 s window allows
            r = w.call(0, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
                {"name": "q", "partition_data": [{"index": 0, "records": big}]}]})
            # appended at once, answered at once, with the delay the rate calls for
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
            throttle = r["throttle_time_ms"]
            assert 1500 < throttle < 3000
            # the connection is muted: the next request is only answered after the delay
            t0 = time.monotonic()
            w.call(18, 0, {})
            waited = time.monotonic() - t0
            assert waited >= throttle / 1000.0 * 0.9
            # while another client id was not affected meanwhile (answered at once, no throttle)
            r2 = other.call(0, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
                {"name": "q", "partition_data": [{"index": 0, "records": batch([b"y"])}]}]})
            assert r2["throttle_time_ms"] == 0 and r2["responses"][0]["partition_responses"][0]["base_offset"] == 300


def test_throttled_fetch_is_empty_and_reads_nothing(tmp_path):
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"quota.consumer.override": "greedy:10K"}) as b:
        with Wire(b.port, client_id="greedy") as w:
            w.create_topic("q")
            w.produce("q", 0, batch([b"z" * 100] * 300))
            first = w.call(1, 11, _fetch_body("q"))
            # ~33 KB: within the 10 s x 10 KB/s a new client may take at once
            assert first["throttle_time_ms"] == 0 and first["responses"]
            w.produce("q", 0, batch([b"z" * 1000] * 300))
            second = w.call(1, 11, _fetch_body("q", 300))
            assert second["throttle_time_ms"] > 0 and second["responses"] == []
            rate = b.services.quotas.byte_rate(FETCH, "greedy")
            assert rate < 5 * 1024  # the refused 300 KB were not counted


def _fetch_body(topic, offset=0):
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}


def test_alter_and_describe_client_quotas_survive_a_restart(tmp_path):
    b = Broker(tmp_path / "d", listen="127.0.0.1:0").start()
    port = b.port
    try:
        with Wire(port) as w:
            r = w.call(49, 0, {"entries": [
                {"entity": [{"entity_type": "client-id", "entity_name": "app"}],
                 "ops": [{"key": "producer_byte_rate", "value": 2048.0, "remove": False}]},
                {"entity": [{"entity_type": "client-id", "entity_name": None}],
                 "ops": [{"key": "consumer_byte_rate", "value": 4096.0, "remove": False}]},
                {"entity": [{"entity_type": "user", "entity_name": "bob"}],
                 "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]},
                {"entity": [{"entity_type": "client-id", "entity_name": "x"}],
                 "ops": [{"key": "request_percentage", "value": 1.0, "remove": False}]}], "validate_only": False})
            assert [e["error_code"] for e in r["entries"]] == [0, 0, 42, 42]
    finally:
        b.stop()
    with Broker(tmp_path / "d", listen=f"127.0.0.1:{port}") as b, Wire(b.port) as w:
        d = w.call(48, 0, {"components": [], "strict": False})
        got = {(e["entity"][0]["entity_name"], v["key"]): v["value"] for e in d["entries"] for v in e["values"]}
        assert got == {("app", "producer_byte_rate"): 2048.0, (None, "consumer_byte_rate"): 4096.0}
        d = w.call(48, 0, {"components": [{"entity_type": "client-id", "match_type": 0, "match": "app"}],
                           "strict": False})
        assert [e["entity"][0]["entity_name"] for e in d["entries"]] == ["app"]
        assert b.services.quotas.quota(PRODUCE, "app") == 2048.0


def test_kafkalog_quotas_cli_changes_a_running_broker(tmp_path, child_env):
    import json
    import subprocess
    import sys
    with Broker(tmp_path / "d", listen="127.0.0.1:0") as b:
        def cli(*args):
            return subprocess.run([sys.executable, "-m", "kafkalog", "quotas", "--bootstrap-server",
                                   b.bootstrap_servers, *args], capture_output=True, text=True, timeout=60,
                                  env=child_env)
        r = cli("--client-id", "etl", "--producer-byte-rate", "2M")
        assert r.returncode == 0, r.stderr
        assert b.services.quotas.quota(PRODUCE, "etl") == 2 * MB
        r = cli("--default", "--consumer-byte-rate", "500K")
        assert r.returncode == 0, r.stderr
        r = cli("--json")
        got = {(x["client_id"], x["key"]): x["value"] for x in json.loads(r.stdout)}
        assert got == {("etl", "producer_byte_rate"): 2.0 * MB, (None, "consumer_byte_rate"): 500.0 * 1024}
        r = cli("--client-id", "etl", "--producer-byte-rate", "none")
        assert r.returncode == 0 and b.services.quotas.quota(PRODUCE, "etl") is None
        r = cli("--producer-byte-rate", "1M")
        assert r.returncode == 2 and "--client-id" in r.stderr
        r = cli("--client-id", "x", "--producer-byte-rate", "fast")
        assert r.returncode == 1 and "bytes per second" in r.stderr


# ---------------------------------------------------------------------------------------------------- static vs dynamic

def _alter(port, cid, key, value):
    with Wire(port) as w:
        r = w.call(49, 0, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": cid}], "ops": [
            {"key": key, "value": 0.0 if value is None else float(value), "remove": value is None}]}],
            "validate_only": False})
        assert [e["error_code"] for e in r["entries"]] == [0]


def test_a_dynamic_quota_does_not_freeze_the_static_config(tmp_path):
    # static default X, one dynamic override for "app", restart with the static default changed to Y: the default
    # in force is Y (server.properties is read again), and the dynamic override still applies
    b = Broker(tmp_path / "d", listen="127.0.0.1:0", config={"quota.producer.default": "1M",
                                                             "quota.consumer.override": "reader:3M"}).start()
    try:
        _alter(b.port, "app", PRODUCE, 2048)
        assert b.services.quotas.quota(PRODUCE, "other") == MB
    finally:
        b.stop()
    with Broker(tmp_path / "d", listen="127.0.0.1:0", config={"quota.producer.default": "5M",
                                                              "quota.consumer.override": "reader:7M"}) as b:
        q = b.services.quotas
        assert q.quota(PRODUCE, "other") == 5 * MB
        assert q.quota(PRODUCE, "app") == 2048.0
        assert q.quota(FETCH, "reader") == 7 * MB  # a static per-client override is not frozen either
    # and with the static default removed from server.properties: no default quota at all
    with Broker(tmp_path / "d", listen="127.0.0.1:0") as b:
        q = b.services.quotas
        assert q.quota(PRODUCE, "other") is None and q.quota(FETCH, "reader") is None
        assert q.quota(PRODUCE, "app") == 2048.0


def test_a_dynamic_default_wins_over_the_static_one_until_removed(tmp_path):
    state = tmp_path / "quotas.json"
    static = Config({"quota.producer.default": "1M", "quota.producer.override": "fast:10M"})
    q = ClientQuotas(static, state, clock=Clock())
    q.set_quota(PRODUCE, None, 4096.0)  # the <default> client id, dynamically
    assert q.quota(PRODUCE, "x") == 4096.0
    assert q.quota(PRODUCE, "fast") == 10 * MB  # a client's own quota is more specific than any default
    q.set_quota(PRODUCE, "fast", 512.0)
    assert q.quota(PRODUCE, "fast") == 512.0  # a dynamic client quota wins over the static one
    q = ClientQuotas(static, state, clock=Clock())  # restart
    assert q.quota(PRODUCE, "x") == 4096.0 and q.quota(PRODUCE, "fast") == 512.0
    q.set_quota(PRODUCE, None, None)  # removing the dynamic default falls back to the static one
    q.set_quota(PRODUCE, "fast", None)
    assert q.quota(PRODUCE, "x") == MB and q.quota(PRODUCE, "fast") == 10 * MB
    q = ClientQuotas(Config({"quota.producer.default": "2M"}), state, clock=Clock())  # restart, static changed
    assert q.quota(PRODUCE, "x") == 2 * MB and q.quota(PRODUCE, "fast") == 2 * MB
    assert q.describe() == [(None, PRODUCE, 2 * MB)]


def test_an_old_quotas_file_keeps_only_what_differs_from_the_static_config(tmp_path):
    # files written before dynamic and static were kept apart hold both: a value equal to server.properties' is
    # taken for static (server.properties rules it from now on), one that differs is kept as a dynamic override
    import json
    state = tmp_path / "quotas.json"
    state.write_text(json.dumps({
        PRODUCE: {"default": float(MB), "clients": {"fast": 10.0 * MB, "app": 2048.0}},
        FETCH: {"default": None, "clients": {}}}))
    static = Config({"quota.producer.default": "1M", "quota.producer.override": "fast:10M"})
    ClientQuotas(static, state, clock=Clock())
    q = ClientQuotas(Config({"quota.producer.default": "3M"}), state, clock=Clock())
    assert q.quota(PRODUCE, "x") == 3 * MB and q.quota(PRODUCE, "fast") == 3 * MB
    assert q.quota(PRODUCE, "app") == 2048.0


# ---------------------------------------------------------------------------------------------------- sensor expiry

def test_idle_client_sensors_expire(tmp_path):
    clock = Clock(0.0)
    q = ClientQuotas(Config({"quota.producer.default": "1M", "quota.consumer.default": "1M"}), None, clock=clock,
                     expire_s=30.0)
    for i in range(10_000):  # short-lived client ids, one request each
        q.record_produce(f"client-{i}", 100)
        q.record_fetch(f"client-{i}", 100)
    assert len(q.stats) == 20_000
    clock.t = 20.0
    q.record_produce("steady", 100)
    assert len(q.stats) == 20_001  # not idle for long enough yet
    clock.t = 61.0  # idle for twice the expiry: swept lazily by the next request, whoever sends it
    q.record_produce("steady", 100)
    assert set(q.stats) == {(PRODUCE, "steady")}
    assert q.byte_rate(PRODUCE, "client-1") == 0.0


def test_a_throttled_client_is_not_forgotten_while_its_delay_runs():
    clock = Clock(0.0)
    q = ClientQuotas(Config({"quota.producer.default": "1K"}), None, clock=clock, expire_s=1.0)
    ms = q.record_produce("slow", 1000 * 1024)  # ~1000 s worth of quota: a delay far longer than the expiry
    assert ms > 100_000
    for t in (20.0, 40.0, 80.0):
        clock.t = t
        q.record_produce("other", 10)
        assert (PRODUCE, "slow") in q.stats
    clock.t = ms / 1000.0 + 30.0
    q.record_produce("other", 10)
    assert (PRODUCE, "slow") not in q.stats


def test_expired_clients_leave_the_metrics(tmp_path):
    import urllib.request
    with Broker(tmp_path / "d", listen="127.0.0.1:0", metrics="127.0.0.1:0",
                config={"quota.producer.default": "1M"}) as b:
        q = b.services.quotas
        clock = Clock(time.monotonic())
        q.clock = clock
        with Wire(b.port, client_id="gone") as w:
            w.create_topic("m")
            w.produce("m", 0, batch([b"a"]))

        def series():
            text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
            return [ln for ln in text.splitlines() if ln.startswith("kafkalog_quota_") and 'client_id="gone"' in ln]

        assert series()
        clock.t += q.expire_s * 3  # nothing recorded since: the scrape itself drops the idle client
        assert series() == []
        assert q.stats == {}
