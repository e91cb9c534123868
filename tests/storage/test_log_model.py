"""Property tests: random appends, rolls, delete-before, retention and reopens against a simple in-memory model."""

import bisect

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafkalog

T0 = 1_700_000_000_000

op = st.one_of(
    st.tuples(st.just("batch"), st.integers(1, 30), st.integers(0, 50), st.sampled_from(["none", "lz4", "zstd"])),
    st.tuples(st.just("one"), st.integers(0, 50)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("delete"), st.floats(0, 1)),
    st.tuples(st.just("retention"), st.integers(0, 3000)),
    st.tuples(st.just("reopen"), st.booleans()),
    st.tuples(st.just("flush")),
)


class Model:
    def __init__(self):
        self.records = []  # (offset, ts, value)
        self.lso = 0

    @property
    def leo(self):
        return len(self.records)

    def live(self):
        return self.records[self.lso:]

    def seek(self, target):
        """First offset >= lso with ts >= target (timestamps are non-decreasing in this model)."""
        ts = [r[1] for r in self.records]
        i = max(bisect.bisect_left(ts, target), self.lso)
        return None if i >= len(ts) else (i, ts[i])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25), probes=st.lists(st.integers(-10, 4000), min_size=3, max_size=6))
def test_log_matches_model(tmp_path_factory, ops, probes):
    path = tmp_path_factory.mktemp("model")
    cfg = {"segment.bytes": 1500, "index.interval.bytes": 200, "file.delete.delay.ms": 0}
    store = kafkalog.LogStore(path, cfg, exclusive=True, maintenance=False)
    store.create_topic("t", 1, {"retention.ms": 1000})
    log = store.log("t", 0)
    m = Model()
    clock = 0
    try:
        for o in ops:
            kind = o[0]
            if kind == "batch":
                _, n, step, codec = o
                vals, tss = [], []
                for _ in range(n):
                    clock += step
                    vals.append(b"v%d" % (m.leo + len(vals)))
                    tss.append(T0 + clock)
                base = log.append_batch(vals, timestamps=tss, compression=codec)
                assert base == m.leo
                m.records += [(base + i, tss[i], vals[i]) for i in range(n)]
            elif kind == "one":
                clock += o[1]
                v = b"v%d" % m.leo
                assert log.append(v, timestamp=T0 + clock) == m.leo
                m.records.append((m.leo, T0 + clock, v))
            elif kind == "roll":
                log.roll()
            elif kind == "delete":
                target = m.lso + int(o[1] * (m.leo - m.lso))
                assert log.delete_records_before(target) == max(m.lso, target)
                m.lso = max(m.lso, target)
            elif kind == "retention":
                now = T0 + clock + o[1]
                log.run_retention(now_ms=now)
                # retention removes whole segments whose newest record is older than 1 s: check the invariant
                assert log.log_start_offset >= m.lso
                for _, ts, _ in m.records[m.lso:log.log_start_offset]:
                    assert now - ts > 1000
                m.lso = log.log_start_offset
            elif kind == "reopen":
                store.close()
                store = kafkalog.LogStore(path, cfg, exclusive=True, maintenance=False)
                log = store.log("t", 0)
            elif kind == "flush":
                log.flush()
            assert (log.log_start_offset, log.log_end_offset) == (m.lso, m.leo)
        assert [(r.offset, r.timestamp, r.value) for r in log.records()] == m.live()
        for p in probes:
            found = log.offset_for_time(T0 + p)
            want = m.seek(T0 + p)
            assert (None if found is None else (found.offset, found.timestamp)) == want, p
        cols = log.read_columns()
        assert cols["offset"].tolist() == [r[0] for r in m.live()]
    finally:
        store.close()
