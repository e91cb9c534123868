"""KIP-584 features in ApiVersions v3+ (tagged fields SupportedFeatures, FinalizedFeaturesEpoch, FinalizedFeatures):
what kafkalog advertises, by version and by the ``transaction.version`` server key. Compared with Apache Kafka 4.4
in tests/compat/test_features.py. Cost: one in-process broker per module, a few milliseconds per request."""

from __future__ import annotations

from kafkalog.broker import Broker

from .wire import Wire


def _features(port: int, version: int) -> dict:
    with Wire(port) as w:
        r = w.call(18, version, {"client_software_name": "t", "client_software_version": "1"})
    assert r["error_code"] == 0
    return {"supported": {f["name"]: (f["min_version"], f["max_version"]) for f in r["supported_features"]},
            "epoch": r["finalized_features_epoch"],
            "finalized": {f["name"]: (f["min_version_level"], f["max_version_level"])
                          for f in r["finalized_features"]},
            "zk": r["zk_migration_ready"]}


def test_api_versions_features_by_version(broker):
    v4 = _features(broker.port, 4)
    # only what kafkalog serves: transactions (v2: KIP-890 part 2), KIP-848 groups, KIP-932 share groups (level 1:
    # no dead-letter queues); no metadata/kraft/streams
    assert v4["supported"] == {"group.version": (0, 1), "transaction.version": (0, 2), "share.version": (0, 1)}
    assert v4["finalized"] == {"group.version": (1, 1), "transaction.version": (2, 2), "share.version": (1, 1)}
    assert v4["epoch"] > 0 and v4["zk"] is False
    v3 = _features(broker.port, 3)
    # v3 leaves out features whose supported minimum is 0 (KAFKA-17011), as Kafka 4.4 does; finalized ones stay
    assert v3["supported"] == {} and v3["finalized"] == v4["finalized"] and v3["epoch"] == v4["epoch"]
    with Wire(broker.port) as w:  # v0-2 have no such fields
        assert "supported_features" not in w.call(18, 2, {}) or w.call(18, 2, {})["supported_features"] == []


def test_transaction_version_key_sets_the_finalized_level(tmp_path):
    b = Broker(tmp_path / "data", listen="127.0.0.1:0", config={"transaction.version": 0})
    b.start()
    try:
        f = _features(b.port, 4)
        # level 0 is not listed as finalized (Kafka after kafka-features downgrade --feature transaction.version=0)
        assert f["finalized"] == {"group.version": (1, 1), "share.version": (1, 1)}
        assert f["supported"]["transaction.version"] == (0, 2)
    finally:
        b.stop()


def test_transaction_state_value_version_follows_the_level(tmp_path):
    """Kafka writes TransactionLogValue v1 when transaction.version >= 1, v0 below (TransactionVersion
    .transactionLogValueVersion); kafkalog's coordinator follows its key the same way."""
    import kafkalog

    for level, want in ((0, 0), (1, 1), (2, 1)):
        store = kafkalog.LogStore(tmp_path / f"tv{level}", {"transaction.version": level}, maintenance=False)
        try:
            store.transactions.init_producer_id("t", 60000)
            lg = store.log("__transaction_state", 0)
            values = [bytes(r.value[:2]) for r in lg.records(0, lg.log_end_offset)]
            assert values == [want.to_bytes(2, "big")], (level, values)
        finally:
            store.close()
