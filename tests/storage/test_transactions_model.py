"""The transaction coordinator against a model (Hypothesis' rule-based state machine): Empty, Ongoing,
PrepareCommit/PrepareAbort, CompleteCommit/CompleteAbort, with fencing by a second InitProducerId, timeouts and a
crash at every step of the end of a transaction.

A crash is a failpoint that raises inside EndTxn (after PrepareX is durable, after a marker, before CompleteX), after
which the coordinator is dropped and a new one is made over the same store: what a restarted process does (the
files are what kill -9 leaves: the page cache). The model says what read_committed must show: every record of a
transaction whose commit returned (or whose PrepareCommit was written before the crash), nothing of one aborted,
fenced, timed out or never ended; and the coordinator's state must be one of the states Kafka allows after it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import kafkalog
from kafkalog._engine.batch import build_batch
from kafkalog.errors import ConcurrentTransactionsError, KafkaError, ProducerFencedError
from kafkalog.storage import failpoints
from kafkalog.storage.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    TransactionCoordinator,
)
from kafkalog.structs import TopicPartition

TXN_IDS = ("a", "b")
PARTS = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0))
CRASH_POINTS = ("txn:after-prepare", "txn:after-marker", "txn:before-complete")


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="txn-model-")
        self.store = kafkalog.LogStore(self.dir, maintenance=False)
        self.store.create_topic("t", 2)
        self.store.create_topic("u", 1)
        self.coord = TransactionCoordinator(self.store)
        self.handles = {}  # txn id -> (pid, epoch) of the current producer instance
        self.seq = {}  # (pid, epoch, tp) -> next sequence
        self.pending = {t: [] for t in TXN_IDS}  # records of the open transaction (tp, value)
        self.visible = []  # (tp, value) read_committed must show
        self.hidden = []  # values it must never show
        self.counter = 0

    def teardown(self):
        failpoints.disable()
        if hasattr(self, "store"):
            self.store.close()

    def _restart(self):
        self.coord = TransactionCoordinator(self.store)  # loads __transaction_state, completes any PrepareX

    def _init(self, txn):
        for _ in range(3):
            try:
                pid, epoch = self.coord.init_producer_id(txn, 60000)
                break
            except ConcurrentTransactionsError:
                continue  # an open transaction was aborted first (fencing): the retry gets the next epoch
        else:
            raise AssertionError(f"InitProducerId({txn}) kept answering CONCURRENT_TRANSACTIONS")
        self.hidden += [v for _, v in self.pending[txn]]
        self.pending[txn] = []
        self.handles[txn] = (pid, epoch)

    def _ended(self, txn, commit):
        if commit:
            self.visible.extend(self.pending[txn])
        else:
            self.hidden.extend(v for _, v in self.pending[txn])
        self.pending[txn] = []

    @rule(txn=st.sampled_from(TXN_IDS))
    def init(self, txn):
        old = self.handles.get(txn)
        self._init(txn)
        if old is not None:  # the old instance is fenced everywhere
            with pytest.raises((ProducerFencedError, KafkaError)):
                self.coord.add_partitions(txn, old[0], old[1], [PARTS[0]])

    @rule(txn=st.sampled_from(TXN_IDS), tp=st.sampled_from(PARTS))
    def send(self, txn, tp):
        if txn not in self.handles:
            self._init(txn)
        pid, epoch = self.handles[txn]
        self.coord.add_partitions(txn, pid, epoch, [tp])
        self.coord.check_produce(txn, pid, epoch, tp)
        self.counter += 1
        value = b"%s-%d" % (txn.encode(), self.counter)
        key = (pid, epoch, tp)
        seq = self.seq.get(key, 0)
        self.seq[key] = seq + 1
        self.store.log(tp.topic, tp.partition).append_records(
            build_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True))
        self.pending[txn].append((tp, value))

    @rule(txn=st.sampled_from(TXN_IDS), commit=st.booleans())
    def end(self, txn, commit):
        if not self.pending[txn]:
            return
        pid, epoch = self.handles[txn]
        self.coord.end_txn(txn, pid, epoch, commit)
        self._ended(txn, commit)
        assert self.coord.describe(txn).state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT)

    @rule(txn=st.sampled_from(TXN_IDS), commit=st.booleans(), point=st.sampled_from(CRASH_POINTS))
    def end_and_crash(self, txn, commit, point):
        if not self.pending[txn]:
            return
        pid, epoch = self.handles[txn]
        failpoints.enable(point, "raise")
        try:
            with pytest.raises(OSError):
                self.coord.end_txn(txn, pid, epoch, commit)
        finally:
            failpoints.disable(point)
        self._restart()  # PrepareX was durable in every case: the new coordinator completes it
        self._ended(txn, commit)
        assert self.coord.describe(txn).state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        # the producer retries its EndTxn, as clients do after a lost answer: the same result is answered NONE
        self.coord.end_txn(txn, pid, epoch, commit)

    @rule(txn=st.sampled_from(TXN_IDS))
    def time_out(self, txn):
        if not self.pending[txn]:
            return
        meta = self.coord.describe(txn)
        assert self.coord.expire(now_ms=meta.start_ms + meta.timeout_ms + 1) >= 1
        self.hidden += [v for _, v in self.pending[txn]]
        self.pending[txn] = []
        pid, epoch = self.handles[txn]
        with pytest.raises(ProducerFencedError):  # the abort bumped the epoch
            self.coord.end_txn(txn, pid, epoch, True)
        del self.handles[txn]

    @rule()
    def restart(self):
        self._restart()

    @invariant()
    def read_committed_shows_exactly_the_committed_records(self):
        if not hasattr(self, "store"):
            return
        for tp in PARTS:
            log = self.store.log(tp.topic, tp.partition)
            got = [bytes(r.value) for r in log.records(isolation_level="read_committed")]
            want = [v for p, v in self.visible if p == tp]
            assert sorted(got) == sorted(want), (tp, got, want)
            assert not set(got) & set(self.hidden)
            open_firsts = log.open_transactions()
            assert bool(open_firsts) == any(p == tp for t in TXN_IDS for p, _ in self.pending[t])
            if not open_firsts:
                assert log.last_stable_offset == log.log_end_offset

    @invariant()
    def states_are_kafkas(self):
        if not hasattr(self, "coord"):
            return
        for txn in TXN_IDS:
            meta = self.coord.describe(txn)
            if meta is None:
                continue
            expected = {ONGOING} if self.pending[txn] else {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, ONGOING}
            assert meta.state in expected, (txn, meta.state_name)


TestCoordinatorModel = CoordinatorMachine.TestCase
TestCoordinatorModel.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
