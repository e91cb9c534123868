"""Transactions v2 (KIP-890 part 2) beyond what a differential run can reach: the epoch exhausted at 32766 (a new
producer id at the end of the transaction, as Kafka 4.4's coordinator allocates it), and InitProducerId v6 (KIP-939,
unstable in Kafka 4.4: not advertised, a request for it closes the connection, as Kafka's does). The conversation
itself is compared with Apache Kafka 4.4 in tests/compat/test_transactions_v2.py. Cost: milliseconds."""

from __future__ import annotations

import struct

import pytest

import kafkalog
from kafkalog._engine.batch import build_batch, iter_batches
from kafkalog.broker import protocol
from kafkalog.errors import InvalidProducerEpochError
from kafkalog.storage.txnformat import decode_txn_log_value
from kafkalog.structs import TopicPartition

from .wire import Wire

TP = TopicPartition("t", 0)


def _values(store):
    lg = store.log("__transaction_state", 0)
    return [decode_txn_log_value(bytes(r.value)) for r in lg.records(0, lg.log_end_offset)]


def test_an_exhausted_epoch_moves_to_a_new_producer_id_at_the_end_of_the_transaction(tmp_path):
    store = kafkalog.LogStore(tmp_path, maintenance=False)
    store.create_topic("t", 1)
    coord = store.transactions
    pid, _ = coord.init_producer_id("x", 60000)
    with coord.locked():  # the 32766th epoch, written as a run of InitProducerId would have left it
        meta = coord.describe("x")
        meta.epoch = 32766
        coord._write(meta)
    coord.add_partitions("x", pid, 32766, [TP], client_tv=2)
    lg = store.log("t", 0)
    lg.append_records(build_batch([b"v"], producer_id=pid, producer_epoch=32766, base_sequence=0,
                                  is_transactional=True))
    new_pid, new_epoch = coord.end_txn("x", pid, 32766, True, client_tv=2)
    assert new_pid != pid and new_epoch == 0
    coord.wait_behind()  # CompleteX is written behind the answer, once the markers are fsynced
    # the marker closes the old id's transaction with the bumped epoch (32767: never a producer's)
    marker = list(iter_batches(lg.read(1, 1 << 20)))[-1]
    assert marker.is_control and (marker.producer_id, marker.producer_epoch) == (pid, 32767)
    prepare, complete = _values(store)[-2:]
    assert (prepare.state_name, prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id,
            prepare.client_tv) == ("PrepareCommit", pid, 32767, new_pid, 2)
    assert (complete.state_name, complete.producer_id, complete.producer_epoch, complete.prev_producer_id,
            complete.next_producer_id) == ("CompleteCommit", new_pid, 0, pid, -1)
    # a retry of that EndTxn (its answer lost) names the old id and epoch: answered with the new ones
    assert coord.end_txn("x", pid, 32766, True, client_tv=2) == (new_pid, 0)
    store.close()
    store = kafkalog.LogStore(tmp_path, maintenance=False)  # the same after a restart (from the log)
    coord = store.transactions
    assert coord.end_txn("x", pid, 32766, True, client_tv=2) == (new_pid, 0)
    coord.add_partitions("x", new_pid, 0, [TP], client_tv=2)
    with pytest.raises(InvalidProducerEpochError):  # the old id is fenced on the partition
        store.log("t", 0).append_records(build_batch([b"z"], producer_id=pid, producer_epoch=32766,
                                                     base_sequence=1, is_transactional=True))
    assert coord.end_txn("x", new_pid, 0, False, client_tv=2) == (new_pid, 1)
    store.close()


def test_init_producer_id_v6_is_not_served(broker):
    """Kafka 4.4 advertises InitProducerId 0-5 (v6, KIP-939's two-phase commit, is unstable there) and closes the
    connection of a v6 request (checked against the lab's Kafka); so does kafkalog."""
    with Wire(broker.port) as w:
        versions = {a["api_key"]: a["max_version"] for a in w.call(18, 3, {})["api_keys"]}
        assert versions[22] == 5
        frame = bytearray(protocol.encode_request(22, 5, 7, "c", {
            "transactional_id": "v6", "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}))
        frame[6:8] = struct.pack(">h", 6)
        frame = frame[:-1] + b"\x01\x00\x00"  # Enable2Pc=true, KeepPreparedTxn=false, the tag buffer
        frame[0:4] = struct.pack(">i", len(frame) - 4)
        w.send_raw(bytes(frame))
        assert w.recv_frame() is None
