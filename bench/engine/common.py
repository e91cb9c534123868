"""What bench/run.py's families share: the kafkalog a run measures, its sizes, its records and its scratch space.

kafkalog is imported from a snapshot of the checkout (``load_kafkalog``), at run time: the families use
``common.kafkalog``, ``common.LogStore`` and ``common.build_batch`` (None, with ``KAFKALOG_ERROR`` saying why, when it
cannot be imported: the peers still run and our rows say n/a).
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time

from harness import GB, MB, ROOT, MiB, Unavailable, perf, progress, repeat_runs

VALUE_BYTES = 100
REC_BYTES = 8 + VALUE_BYTES        # payload per record: 8-byte key + value
BATCH = 1000                       # records per batch in the batched cases (the 1000 x 100 B)
TOPIC = "bench"

kafkalog = LogStore = build_batch = None
KAFKALOG_ERROR = "kafkalog not loaded"


def load_kafkalog(path: str) -> None:
    """Import kafkalog from `path` (a snapshot, or the checkout itself with --in-place); on failure the harness
    still runs the peers and every goal row says why our side is missing."""
    global kafkalog, LogStore, build_batch, KAFKALOG_ERROR
    sys.path.insert(0, path)
    try:
        kafkalog = importlib.import_module("kafkalog")
        LogStore = kafkalog.LogStore
        build_batch = importlib.import_module("kafkalog._engine.batch").build_batch
        KAFKALOG_ERROR = None
    except Exception as e:
        kafkalog = LogStore = build_batch = None
        KAFKALOG_ERROR = f"kafkalog not importable ({type(e).__name__}: {e})"


def need_kafkalog():
    if KAFKALOG_ERROR:
        raise Unavailable(KAFKALOG_ERROR)


# ------------------------------------------------------------------------------------------------ parameters

class Params:
    """Sizes for one run. --quick keeps the same cases on smaller sizes (and fewer repetitions)."""

    def __init__(self, quick: bool):
        self.quick = quick
        self.n = 200_000 if quick else 1_000_000            # records in the bulk cases (a multiple of BATCH)
        self.reps = 3 if quick else 5                       # timed repetitions after the warm-up
        self.pq_n = 500 if quick else 3_000                 # persist-queue SQLiteQueue: one fsync per put
        self.deque_n = 10_000 if quick else 50_000          # diskcache.Deque: one SQLite transaction per append
        self.slow_reps = 1 if quick else 3
        self.raw_mib = 256 if quick else 1024               # raw sequential write size
        self.fsync_n = 1_000 if quick else 5_000            # g3: records per side
        self.seek_records = 1_000_000                       # g5: the 1 M records, in --quick too
        self.seek_queries = 20_000 if quick else 100_000
        self.delete_sizes = (int(0.5 * GB), int(4 * GB)) if quick else (int(1 * GB), int(8 * GB))
        self.delete_segment = 64 * MiB
        self.delete_steps = 5 if quick else 9
        self.unclean_bytes = int(1 * GB)
        self.unclean_reps = 3 if quick else 5
        self.rss_sizes = (int(50 * MB), int(500 * MB)) if quick else (int(100 * MB), int(1 * GB))
        self.queue_cycles = 50 if quick else 300            # g8: put_many(100) + 100 x (get + ack) cycles

    def as_dict(self):
        return dict(vars(self))


# ------------------------------------------------------------------------------------------------ data

KINDS = ("page_view", "click", "cart_add", "checkout", "login", "search", "refund", "share")
REGIONS = (b"eu-w", b"us-e", b"ap-s", b"sa-e", b"af-s", b"us-w", b"eu-c")
NOISE_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def make_records(n: int, seed: int = 20240917, ts0: int | None = None):
    """n distinct JSON-ish values of exactly VALUE_BYTES bytes, 8-byte big-endian keys 0..n-1 and timestamps
    increasing by 1 ms starting a day ago (inside retention.ms and message.timestamp.*.max.ms defaults).

    A value: {"id":"00000042","sid":"9f3a01c2","ev":"checkout","at":1731000000042,"qty":37,"geo":"ap-s","x":"..."}
    with random session ids, quantities, regions and padding; built column-wise with numpy (a Python-level
    f-string per record costs seconds per million)."""
    import numpy as np
    if n >= 10**8:
        raise ValueError("ids are 8 digits")
    if ts0 is None:
        ts0 = (time.time_ns() // 1_000_000 // 1000) * 1000 - 86_400_000
    rnd = np.random.default_rng(seed)
    out = np.empty((n, VALUE_BYTES), np.uint8)
    alphabet = np.frombuffer(NOISE_ALPHABET, np.uint8)
    idx = np.arange(n, dtype=np.int64)
    cols = {"I": (idx, 8, 10), "S": (rnd.integers(0, 1 << 32, n, dtype=np.int64), 8, 16),
            "T": (ts0 + idx, 13, 10), "Q": (rnd.integers(10, 100, n, dtype=np.int64), 2, 10)}
    geo = np.frombuffer(b"".join(REGIONS), np.uint8).reshape(len(REGIONS), 4)[rnd.integers(0, len(REGIONS), n)]
    hexdigits = np.frombuffer(b"0123456789abcdef", np.uint8)
    for k, kind in enumerate(KINDS):
        head = '{"id":"IIIIIIII","sid":"SSSSSSSS","ev":"' + kind + '","at":TTTTTTTTTTTTT,"qty":QQ,"geo":"GGGG","x":"'
        rows = out[k::len(KINDS)]
        rows[:, :len(head)] = np.frombuffer(head.encode(), np.uint8)
        rows[:, len(head):VALUE_BYTES - 2] = alphabet[
            rnd.integers(0, len(alphabet), (len(rows), VALUE_BYTES - 2 - len(head)), dtype=np.uint8)]
        rows[:, VALUE_BYTES - 2:] = np.frombuffer(b'"}', np.uint8)
        for ch, (arr, width, base) in cols.items():
            at = head.index(ch * width)
            powers = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
            rows[:, at:at + width] = hexdigits[(arr[k::len(KINDS), None] // powers) % base]
        at = head.index("GGGG")
        rows[:, at:at + 4] = geo[k::len(KINDS)]
    big = out.tobytes()
    del out
    values = [big[o:o + VALUE_BYTES] for o in range(0, n * VALUE_BYTES, VALUE_BYTES)]
    keys = [i.to_bytes(8, "big") for i in range(n)]
    ts = list(range(ts0, ts0 + n))
    return keys, values, ts


class Data:
    def __init__(self, n: int):
        t = perf()
        self.n = n
        self.keys, self.values, self.ts = make_records(n)
        assert all(len(v) == VALUE_BYTES for v in self.values[:1000])
        self.gen_s = perf() - t
        self._chunks = None

    def chunks(self, n: int):
        """[(values, keys, timestamps)] of BATCH records each, covering the first n records (sliced once, outside
        every timed region, and shared by every side)."""
        if self._chunks is None:
            self._chunks = [(self.values[s:s + BATCH], self.keys[s:s + BATCH], self.ts[s:s + BATCH])
                            for s in range(0, self.n - BATCH + 1, BATCH)]
        return self._chunks[: n // BATCH]


# ------------------------------------------------------------------------------------------------ a run

class Ctx:
    def __init__(self, args, params: Params, data_n: int):
        self.args = args
        self.p = params
        self.scratch = args.dir
        self.data_n = data_n
        self._data = None
        self._fixtures = {}
        self._closers = []
        self.code = ROOT  # where kafkalog is imported from (a snapshot unless --in-place)

    @property
    def data(self) -> Data:
        if self._data is None:
            self._data = Data(self.data_n)
            progress(f"data: {self.data_n:,} records generated in {self._data.gen_s:.1f}s")
        return self._data

    def tmpdir(self, name: str) -> str:
        return tempfile.mkdtemp(prefix=name + "-", dir=self.scratch)

    def fixture(self, name, make):
        if name not in self._fixtures:
            value, closer = make()
            self._fixtures[name] = value
            if closer is not None:
                self._closers.append(closer)
        return self._fixtures[name]

    def close(self):
        for c in reversed(self._closers):
            try:
                c()
            except Exception as e:  # a cleanup failure must not hide the results
                progress(f"cleanup failed: {type(e).__name__}: {e}")
        self._closers.clear()


def repeat(ctx, run, n, agg, *, reps=None, warm_n=None):
    """harness.repeat_runs with this run's defaults: ctx.p.reps runs after a warm-up on a tenth of n (whole
    batches)."""
    reps = reps or ctx.p.reps
    warm_n = warm_n if warm_n is not None else max(BATCH, (n // 10) // BATCH * BATCH)
    return repeat_runs(run, n, agg, reps, warm_n)


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)


def new_store(path, topic_config=None, **store_kw):
    store = LogStore(path, exclusive=True, **store_kw)
    store.create_topic(TOPIC, 1, topic_config)
    return store, store.log(TOPIC, 0)
