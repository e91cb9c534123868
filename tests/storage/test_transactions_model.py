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
from kafkalog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)
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
        self.hidden += [v for _, v, _ in self.pending[txn]]
        self.pending[txn] = []
        self.handles[txn] = (pid, epoch)

    def _add(self, txn, pid, epoch, tp):
        # the broker's form (AddPartitionsToTxn requests taken together: one append, one fsync), alone here
        err, = self.coord.add_many([(txn, pid, epoch, [tp], 0)])
        if err is not None:
            raise err

    def _ended(self, txn, commit):
        if commit:
            self.visible.extend(self.pending[txn])
        else:
            self.hidden.extend(v for _, v, _ in self.pending[txn])
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
        self._add(txn, pid, epoch, tp)
        self.coord.check_produce(txn, pid, epoch, tp)
        self.counter += 1
        value = b"%s-%d" % (txn.encode(), self.counter)
        key = (pid, epoch, tp)
        seq = self.seq.get(key, 0)
        self.seq[key] = seq + 1
        offset, _ = self.store.log(tp.topic, tp.partition).append_records(
            build_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True))
        self.pending[txn].append((tp, value, offset))

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
            if point == "txn:before-complete":
                # behind the answer: EndTxn returns once its markers are appended, the crash hits the background
                # step (markers fsynced, CompleteX not written)
                self.coord.end_txn(txn, pid, epoch, commit)
                self.coord.wait_behind()
            else:
                with pytest.raises(OSError):
                    self.coord.end_txn(txn, pid, epoch, commit)
        finally:
            failpoints.disable(point)
        self._restart()  # PrepareX was durable in every case: the new coordinator completes it
        self._ended(txn, commit)
        assert self.coord.describe(txn).state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        # the producer retries its EndTxn, as clients do after a lost answer: the same result is answered NONE
        self.coord.end_txn(txn, pid, epoch, commit)

    client_tv = 0

    def _end_many_checked(self, txn, pid, epoch, touched, got):
        assert got == (pid, epoch), (txn, got)

    def _both(self):
        return [t for t in TXN_IDS if self.pending[t]]

    @rule(commits=st.tuples(st.booleans(), st.booleans()))
    def end_together(self, commits):
        """The broker's step: several EndTxns decided by one fsync, their markers and CompleteX written together."""
        txns = self._both()
        if not txns:
            return
        commit = dict(zip(TXN_IDS, commits))
        before = {t: (self.handles[t], {tp for tp, _, _ in self.pending[t]}) for t in txns}
        got = self.coord.end_many([(t, *self.handles[t], commit[t], self.client_tv) for t in txns])
        for t, g in zip(txns, got):
            self._ended(t, commit[t])
            assert self.coord.describe(t).state == (COMPLETE_COMMIT if commit[t] else COMPLETE_ABORT)
            (pid, epoch), touched = before[t]
            self._end_many_checked(t, pid, epoch, touched, g)

    @rule(commits=st.tuples(st.booleans(), st.booleans()), point=st.sampled_from(CRASH_POINTS))
    def end_together_and_crash(self, commits, point):
        txns = self._both()
        if not txns:
            return
        commit = dict(zip(TXN_IDS, commits))
        before = {t: (self.handles[t], {tp for tp, _, _ in self.pending[t]}) for t in txns}
        failpoints.enable(point, "raise")
        try:
            ends = [(t, *self.handles[t], commit[t], self.client_tv) for t in txns]
            if point == "txn:before-complete":  # behind the answers (see end_and_crash)
                self.coord.end_many(ends)
                self.coord.wait_behind()
            else:
                with pytest.raises(OSError):
                    self.coord.end_many(ends)
        finally:
            failpoints.disable(point)
        self._restart()  # every PrepareX of the step was durable: the new coordinator completes them all
        for t in txns:
            self._ended(t, commit[t])
            assert self.coord.describe(t).state == (COMPLETE_COMMIT if commit[t] else COMPLETE_ABORT)
            (pid, epoch), touched = before[t]
            # the producer retries its EndTxn (the answer was lost): a retry, answered as the first end
            self._end_many_checked(t, pid, epoch, touched,
                                   self.coord.end_txn(t, pid, epoch, commit[t], self.client_tv))

    @rule(txn=st.sampled_from(TXN_IDS))
    def time_out(self, txn):
        if not self.pending[txn]:
            return
        meta = self.coord.describe(txn)
        now = meta.start_ms + meta.timeout_ms + 1
        # every transaction open at least as long times out with it
        expired = [t for t in TXN_IDS if self.pending[t]
                   and self.coord.describe(t).start_ms + self.coord.describe(t).timeout_ms < now]
        assert self.coord.expire(now_ms=now) == len(expired)
        for t in expired:
            self.hidden += [v for _, v, _ in self.pending[t]]
            self.pending[t] = []
            pid, epoch = self.handles.pop(t)
            with pytest.raises(ProducerFencedError):  # the abort bumped the epoch
                self.coord.end_txn(t, pid, epoch, True)

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
            open_firsts = log.open_transactions()
            pending_here = [o for t in TXN_IDS for p, _, o in self.pending[t] if p == tp]
            assert bool(open_firsts) == bool(pending_here)
            # read_committed ends at the last stable offset: the first offset of the earliest open transaction
            lso = log.last_stable_offset
            assert lso == (min(open_firsts.values()) if open_firsts else log.log_end_offset)
            if pending_here:
                assert lso == min(pending_here)
            want = [v for p, v, o in self.visible if p == tp and o < lso]
            assert sorted(got) == sorted(want), (tp, got, want)
            assert not set(got) & set(self.hidden)

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
TestCoordinatorModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])


class CoordinatorV2Machine(CoordinatorMachine):
    """The same model for transactions v2 clients (KIP-890 part 2: Produce v12's implicit add, EndTxn v5): every end
    of a transaction bumps the producer's epoch by one, the markers carry the bumped epoch (so every partition of the
    transaction refuses the old one at once), the producer goes on with what EndTxn answered, and a retried EndTxn
    (the answer lost to a crash) is recognised by its epoch one below and answered with the current one."""

    def _add(self, txn, pid, epoch, tp):
        self.coord.add_partitions(txn, pid, epoch, [tp], client_tv=2)

    client_tv = 2

    def _end_many_checked(self, txn, pid, epoch, touched, got):
        self._ended_v2(txn, pid, epoch, touched, got)

    def _end(self, txn, pid, epoch, commit):
        return self.coord.end_txn(txn, pid, epoch, commit, client_tv=2)

    def _ended_v2(self, txn, pid, epoch, touched, got):
        assert got == (pid, epoch + 1), (got, pid, epoch)  # one bump per transaction
        self.handles[txn] = got
        for tp in touched:
            # the marker carries the bumped epoch: the partition itself refuses the old one from now on
            with pytest.raises(InvalidProducerEpochError):
                self.store.log(tp.topic, tp.partition).append_records(build_batch(
                    [b"zombie"], producer_id=pid, producer_epoch=epoch, base_sequence=1000, is_transactional=True))
            with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
                self.coord.check_produce(txn, pid, epoch, tp)

    @rule(txn=st.sampled_from(TXN_IDS), commit=st.booleans())
    def end(self, txn, commit):
        if not self.pending[txn]:
            return
        pid, epoch = self.handles[txn]
        touched = {tp for tp, _, _ in self.pending[txn]}
        got = self._end(txn, pid, epoch, commit)
        self._ended(txn, commit)
        assert self.coord.describe(txn).state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        self._ended_v2(txn, pid, epoch, touched, got)

    @rule(txn=st.sampled_from(TXN_IDS), commit=st.booleans(), point=st.sampled_from(CRASH_POINTS))
    def end_and_crash(self, txn, commit, point):
        if not self.pending[txn]:
            return
        pid, epoch = self.handles[txn]
        touched = {tp for tp, _, _ in self.pending[txn]}
        failpoints.enable(point, "raise")
        try:
            if point == "txn:before-complete":  # behind the answer (see CoordinatorMachine.end_and_crash)
                self._end(txn, pid, epoch, commit)
                self.coord.wait_behind()
            else:
                with pytest.raises(OSError):
                    self._end(txn, pid, epoch, commit)
        finally:
            failpoints.disable(point)
        self._restart()  # PrepareX (with the bumped epoch) was durable: the new coordinator completes it
        self._ended(txn, commit)
        assert self.coord.describe(txn).state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        # the producer retries its EndTxn with the epoch it has: a retry, answered with the bumped epoch
        self._ended_v2(txn, pid, epoch, touched, self._end(txn, pid, epoch, commit))

    @rule(txn=st.sampled_from(TXN_IDS))
    def time_out(self, txn):
        if not self.pending[txn]:
            return
        meta = self.coord.describe(txn)
        now = meta.start_ms + meta.timeout_ms + 1
        expired = [t for t in TXN_IDS if self.pending[t]
                   and self.coord.describe(t).start_ms + self.coord.describe(t).timeout_ms < now]
        assert self.coord.expire(now_ms=now) == len(expired)
        for t in expired:
            self.hidden += [v for _, v, _ in self.pending[t]]
            self.pending[t] = []
            pid, epoch = self.handles.pop(t)
            # Kafka 4.4 at transaction.version 2: the abort bumped the epoch once; the old producer's commit is
            # INVALID_TXN_STATE, its abort a retry of that abort (checked against Kafka in the lab)
            with pytest.raises(InvalidTxnStateError):
                self._end(t, pid, epoch, True)
            assert self._end(t, pid, epoch, False) == (pid, epoch + 1)


TestCoordinatorV2Model = CoordinatorV2Machine.TestCase
TestCoordinatorV2Model.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])


def test_an_idle_transactional_id_expires_and_comes_back_with_a_new_producer_id(tmp_path):
    store = kafkalog.LogStore(tmp_path, {"transactional.id.expiration.ms": 1000}, maintenance=False)
    store.create_topic("t", 1)
    coord = store.transactions
    pid, epoch = coord.init_producer_id("idle", 60000)
    busy_pid, busy_epoch = coord.init_producer_id("busy", 60000)
    coord.add_partitions("busy", busy_pid, busy_epoch, [PARTS[0]])  # Ongoing: never expires (it times out first)
    now = coord.describe("idle").last_update_ms
    assert coord.expire(now_ms=now + 999) == 0 and coord.describe("idle") is not None
    coord.expire(now_ms=now + 1000)
    assert coord.describe("idle") is None and coord.describe("busy") is not None
    store.close()
    store = kafkalog.LogStore(tmp_path, {"transactional.id.expiration.ms": 1000}, maintenance=False)
    coord = store.transactions  # the tombstone is read back: the id stays forgotten
    assert coord.describe("idle") is None
    new_pid, new_epoch = coord.init_producer_id("idle", 60000)
    assert new_pid != pid and new_epoch == 0
    store.close()


def test_endtxns_ended_together_share_one_decision_fsync_and_answer_each_on_its_own(tmp_path):
    """end_many (the broker's step for the EndTxns that arrived together): one PrepareX step for all of them, each
    transaction's markers on its own partitions, a refused one answered with its error and the others ended."""
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 2)
    coord = store.transactions
    handles = {}
    for i, txn in enumerate(("a", "b")):
        pid, epoch = handles[txn] = coord.init_producer_id(txn, 60000)
        tp = TopicPartition("t", i)
        coord.add_partitions(txn, pid, epoch, [tp])
        store.log("t", i).append_records(build_batch([txn.encode()], producer_id=pid, producer_epoch=epoch,
                                                     base_sequence=0, is_transactional=True))
    decided = []
    failpoints.enable("txn:after-prepare", lambda: decided.append(coord.describe("a").state_name))
    try:
        got = coord.end_many([("a", *handles["a"], True, 0), ("b", *handles["b"], False, 0),
                              ("c", 12345, 0, True, 0)])
    finally:
        failpoints.disable()
    assert decided == ["PrepareCommit"]  # one decision step (one fsync) for both
    assert got[0] == handles["a"] and got[1] == handles["b"]
    assert isinstance(got[2], KafkaError)
    assert coord.describe("a").state == COMPLETE_COMMIT and coord.describe("b").state == COMPLETE_ABORT
    assert [bytes(r.value) for r in store.log("t", 0).records(isolation_level="read_committed")] == [b"a"]
    assert [bytes(r.value) for r in store.log("t", 1).records(isolation_level="read_committed")] == []
    assert store.log("t", 0).last_stable_offset == 2 and store.log("t", 1).last_stable_offset == 2
    store.close()
    store = kafkalog.LogStore(tmp_path, maintenance=False)  # the CompleteX records were written and are read back
    assert store.transactions.describe("a").state == COMPLETE_COMMIT
    assert store.transactions.describe("b").state == COMPLETE_ABORT
    store.close()


def test_addpartitions_taken_together_write_one_record_per_id_each_answered_on_its_own(tmp_path):
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 2)
    coord = store.transactions
    a = coord.init_producer_id("a", 60000)
    b = coord.init_producer_id("b", 60000)
    txn_log = store.log("__transaction_state", 0)
    end = txn_log.log_end_offset
    got = coord.add_many([("a", *a, [TopicPartition("t", 0)], 0), ("b", b[0], b[1] + 1, [TopicPartition("t", 1)], 0),
                          ("b", *b, [TopicPartition("t", 1), TopicPartition("t", 0)], 0)])
    assert got[0] is None and isinstance(got[1], ProducerFencedError) and got[2] is None
    assert coord.describe("a").partitions == {TopicPartition("t", 0)}
    assert coord.describe("b").partitions == {TopicPartition("t", 0), TopicPartition("t", 1)}
    written = list(txn_log.records(end, txn_log.log_end_offset))
    assert len(written) == 2  # one record per transactional id that changed
    store.close()
    store = kafkalog.LogStore(tmp_path, maintenance=False)  # what add_many wrote is what a restart reads
    assert store.transactions.describe("b").partitions == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert store.transactions.describe("b").state == ONGOING
    store.close()
