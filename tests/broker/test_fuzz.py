"""The broker facade under the protocol fuzzer (tests/broker/fuzz.py): a real ``kafkalog serve`` is sent valid,
semantically odd and mutated frames of every advertised API and version over several connections, while a canary
produces and fetches on its own topic and the broker's memory is sampled. It must log no internal error and no
traceback, keep its memory and the canary's latency bounded, leave the precious topic's segments byte-identical
(and readable), still answer ApiVersions, and stop cleanly on SIGTERM.

The default test is seeded and small (a few thousand frames); the slow one sends FUZZ_FRAMES (default 1,000,000)
over FUZZ_CONNECTIONS connections and prints a figures line. Findings (deduplicated, with the frame that caused
each one) are in the failure message; ``python tests/broker/fuzz.py run ...`` runs the same thing by hand.
"""

from __future__ import annotations

import os

import pytest

from . import fuzz

RSS_BOUND_MB = fuzz.RSS_BOUND_MB  # 512: a decompression bomb or a lying size prefix must not cost more
CANARY_P99_BOUND_S = fuzz.CANARY_P99_BOUND_S  # 2 s: a liveness bound, not a performance test
DEFAULT_FRAMES = 4000
DEFAULT_CONNECTIONS = 8
DEFAULT_SEED = 20251125


def _report(res: dict) -> str:
    return fuzz.figures(res) + "\n\n" + fuzz.findings_markdown([res], "findings")


def check(res: dict) -> None:
    """Every property the fuzz run must keep; the message names all that failed, with the findings."""
    problems = list(res["failures"])
    if res["internal_error_lines"]:
        problems.append(f"{res['internal_error_lines']} internal errors in the broker log")
    if res["traceback_lines"]:
        problems.append(f"{res['traceback_lines']} tracebacks in the broker log")
    if res["rss_peak_mb"] > RSS_BOUND_MB:
        problems.append(f"peak RSS {res['rss_peak_mb']} MiB > {RSS_BOUND_MB} MiB")
    if not res["canary_p99_s"] <= CANARY_P99_BOUND_S:
        problems.append(f"canary p99 {res['canary_p99_s']:.3f} s > {CANARY_P99_BOUND_S} s")
    if res["canary_error_count"]:
        problems.append(f"{res['canary_error_count']} canary errors: {res['canary_errors'][:3]}")
    bad = [f for f in res["findings"] if f["category"] in ("crash", "internal-error", "close-on-valid-frame",
                                                           "bad-response", "log-error", "shutdown", "memory")]
    if bad:
        problems.append(f"{len(bad)} findings: " + "; ".join(f"[{f['category']}] {f['title'][:160]}" for f in bad))
    stalls = [f for f in res["findings"] if f["category"] == "stall"]
    if stalls:
        problems.append(f"{len(stalls)} stalls: " + "; ".join(f["title"][:160] for f in stalls))
    assert not problems, "\n".join(problems) + "\n\n" + _report(res)


def test_fuzz_default():
    """A few thousand seeded frames over 8 connections (under a minute on 2 cores)."""
    res = fuzz.run(frames=DEFAULT_FRAMES, connections=DEFAULT_CONNECTIONS, seed=DEFAULT_SEED, per_version=6,
                   precious_records=1500)
    print(fuzz.figures(res))
    check(res)
    assert res["frames"] == DEFAULT_FRAMES
    assert res["precious_records"] == 1500


@pytest.mark.slow
def test_fuzz_million_frames():
    """FUZZ_FRAMES (default 1,000,000) frames over FUZZ_CONNECTIONS (default 32) connections."""
    frames = int(os.environ.get("FUZZ_FRAMES", "1000000"))
    connections = int(os.environ.get("FUZZ_CONNECTIONS", "32"))
    seed = int(os.environ.get("FUZZ_SEED", "1"))
    res = fuzz.run(frames=frames, connections=connections, seed=seed, per_version=20, precious_records=20000,
                   decode_responses=0.25)
    print("\n" + fuzz.figures(res))
    check(res)
    assert res["frames"] == frames


# -- the checks can fail: each property above, broken on purpose ------------------------------------------------------

def _result(**over) -> dict:
    res = {"failures": [], "internal_error_lines": 0, "traceback_lines": 0, "rss_peak_mb": 100,
           "canary_p99_s": 0.01, "canary_error_count": 0, "canary_errors": [], "findings": [], "frames": 1,
           "connections": 1, "connections_opened": 1, "fuzz_seconds": 1, "frames_per_s": 1, "canary_p50_s": 0.001,
           "canary_max_s": 0.02, "canary_rounds": 1, "fds_peak": 1, "stats": {}}
    res.update(over)
    return res


@pytest.mark.parametrize("over, words", [
    ({"internal_error_lines": 1}, "internal errors"),
    ({"traceback_lines": 2}, "tracebacks"),
    ({"rss_peak_mb": RSS_BOUND_MB + 1}, "peak RSS"),
    ({"canary_p99_s": CANARY_P99_BOUND_S + 0.5}, "canary p99"),
    ({"canary_p99_s": float("nan")}, "canary p99"),
    ({"failures": ["precious segment x: the first 10 bytes changed"]}, "precious"),
    ({"findings": [{"category": "internal-error", "title": "TypeError at x.py:1", "count": 1, "key": "k"}]},
     "TypeError"),
    ({"findings": [{"category": "stall", "title": "Fetch v11 valid: no answer", "count": 1, "key": "k"}]}, "stalls"),
])
def test_check_fails(over, words):
    check(_result())
    with pytest.raises(AssertionError, match=words):
        check(_result(**over))


INJECTED_BUG = """
# injected by test_fuzz.py: the broker bug the fuzzer must catch (loaded by the broker process only)
from kafkalog.broker import api, protocol

_offset_commit = api.API_HANDLERS[8]


def _buggy_offset_commit(s, ctx, header, frame, offset):
    req = protocol.decode_request(header.api_key, header.api_version, frame, offset)
    for t in req["topics"]:
        for p in t["partitions"]:
            if p["committed_offset"] < 0:
                raise TypeError("injected: negative committed offset")
    return _offset_commit(s, ctx, header, frame, offset)


api.API_HANDLERS[8] = _buggy_offset_commit
"""


def test_fuzz_catches_an_injected_bug(tmp_path):
    """The fuzzer finds a bug put into the broker (an OffsetCommit with a negative offset raises), names the
    exception and where it was raised, keeps the frame, and the checks fail."""
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(INJECTED_BUG)
    res = fuzz.run(frames=1500, connections=4, seed=3, per_version=4, precious_records=100, bombs=False,
                   broker_pythonpath=str(tmp_path / "inject"))
    found = [f for f in res["findings"] if f["category"] == "internal-error"]
    assert found, fuzz.figures(res)
    f = found[0]
    assert "TypeError" in f["title"] and "sitecustomize.py" in f["title"], f
    assert "injected: negative committed offset" in f["reason"]
    assert "Traceback" in f["traceback"]
    assert f["example"]["api_key"] == 8 and f["example"]["hex"]
    assert res["internal_error_lines"] > 0
    with pytest.raises(AssertionError, match="internal error"):
        check(res)


def test_frames_cover_every_advertised_version():
    """The corpus holds valid frames of every advertised (API, version) but the SASL ones (no SASL listener), each
    one as encode_request writes it; the stream of one seed is the same twice."""
    corpus = fuzz.Corpus(7, per_version=2, with_bombs=False)
    have = {(e.key, e.version) for e in corpus.valid}
    want = {(k, v) for k, (lo, hi) in fuzz.ADVERTISED.items() if k not in (17, 36) for v in range(lo, hi + 1)}
    assert have == want
    a = [(f.data, f.kind) for f in fuzz.frame_stream(corpus, 7, 1, 4, 3000)]
    b = [(f.data, f.kind) for f in fuzz.frame_stream(corpus, 7, 1, 4, 3000)]
    assert a == b
    kinds = {k.split(":")[0] for _, k in a}
    assert {"valid", "semantic", "mutated", "lying", "split", "pipeline", "session", "dance"} <= kinds
    assert not any(name in data for data, _ in a for name in fuzz.RESERVED)


def test_bad_batches_are_crc_valid():
    """The 'CRC-valid but wrong inside' batches really carry a right CRC (else they test only the CRC check)."""
    from kafkalog._engine.batch import crc32c
    pool = fuzz.RecordsPool(fuzz.random.Random(1), big=False)
    checked = 0
    for label, data in pool.bad:
        if data is None or len(data) < 61 or label in ("crc-wrong",) or label.startswith(("batch-length",
                                                                                             "truncated", "good-then",
                                                                                             "trailing", "magic")):
            continue
        length = int.from_bytes(data[8:12], "big", signed=True)
        assert int.from_bytes(data[17:21], "big") == crc32c(data[21:12 + length]), label
        checked += 1
    assert checked > 40


def test_a_topic_name_ending_in_a_newline_is_refused_and_splits_no_checkpoint(tmp_path):
    """Issue 21, item 3: a mutated CreateTopics named "fz-r3\\n" (``$`` matched before the final newline) made a
    topic; a DeleteRecords on it wrote the line "fz-r3\\n 0 1", read back as two lines, and every maintenance round
    after it failed ("malformed checkpoint ... expected 3, got 1"). CreateTopics and Metadata auto-create refuse the
    name now (INVALID_TOPIC_EXCEPTION), and the checkpoints the broker writes read back strictly."""
    b = fuzz.BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    try:
        c = fuzz.Client(b.port)
        try:
            assert c.create_topic("fz-ok", 1) == 0
            assert c.produce("fz-ok", 0, bytes(fuzz.build_batch([b"a", b"b"])))["error_code"] == 0
            for name in ("fz-r3\n", "fz-nl\n", "\n"):
                assert c.create_topic(name, 1) == 17, name
                r = c.call(3, 4, {"topics": [{"name": name}], "allow_auto_topic_creation": True})
                assert r["topics"][0]["error_code"] == 17, name
                r = c.call(21, 1, {"topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 1}]}],
                                   "timeout_ms": 1000})
                assert r["topics"][0]["partitions"][0]["error_code"] == 3, name  # UNKNOWN_TOPIC_OR_PARTITION
            r = c.call(21, 1, {"topics": [{"name": "fz-ok", "partitions": [{"partition_index": 0, "offset": 1}]}],
                               "timeout_ms": 1000})
            assert r["topics"][0]["partitions"][0]["error_code"] == 0
        finally:
            c.close()
        assert fuzz.checkpoint_problems(tmp_path / "data") == []
        assert "fz-ok 0 1\n" in (tmp_path / "data" / "log-start-offset-checkpoint").read_text()
    finally:
        code, _ = b.terminate()
    assert code == 0
    assert "malformed" not in (tmp_path / "broker.log").read_text()


def test_list_groups_lists_the_data_dirs_groups_once(tmp_path, monkeypatch):
    """Found by the 1,000,000-frame run: ListGroups listed the data dir's groups (reading every long id's file)
    again for each joined group, quadratic in the groups; with the ~900 groups the fuzzer's JoinGroups leave the
    broker spent most of its CPU there and its throughput fell from ~600 to ~80 frames/s. One listing per ListGroups."""
    from types import SimpleNamespace

    import kafkalog
    from kafkalog.broker import admin
    from kafkalog.client import group

    calls = []
    real = admin.known_groups
    monkeypatch.setattr(admin, "known_groups", lambda path: calls.append(path) or real(path))
    with kafkalog.LogStore(tmp_path / "data", exclusive=True, maintenance=False) as store:
        ids = [f"g{i}" for i in range(40)] + ["x" * 300 + str(i) for i in range(40)]  # short and long (h-) ids
        for gid in ids:
            group._make_group_dir(group.group_dir(store.path, gid), gid)
        s = SimpleNamespace(store=store, groups=SimpleNamespace(groups={}, classic=SimpleNamespace(groups={}),
                                                                consumer=SimpleNamespace(groups={}), hosts={}))
        listed = admin._listed_groups(s, ids, set())
    assert sorted(g["group_id"] for g in listed) == sorted(ids)
    assert {g["group_state"] for g in listed} == {"Empty"}
    assert len(calls) == 1, f"known_groups listed {len(calls)} times for one ListGroups of {len(ids)} groups"
