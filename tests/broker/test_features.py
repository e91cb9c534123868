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


def _update(port: int, updates, version: int = 2, validate_only: bool = False) -> dict:
    with Wire(port) as w:
        return w.call(57, version, {"timeout_ms": 5000, "validate_only": validate_only, "feature_updates": [
            {"feature": f, "max_version_level": level, "upgrade_type": kind, "allow_downgrade": False}
            for f, level, kind in updates]})


def test_update_features_changes_the_levels_at_once_and_keeps_them(tmp_path):
    """kafka-features downgrade / upgrade while the broker runs: the level is served at once (the transaction
    coordinator's transaction.version; group.version 0 refuses ConsumerGroupHeartbeat with UNSUPPORTED_VERSION),
    FinalizedFeaturesEpoch grows, and the level is kept across a restart (.kafkalog-broker/features.json, over the
    server key); a refused or validate-only update changes nothing."""
    data = tmp_path / "data"
    b = Broker(data, listen="127.0.0.1:0")
    b.start()
    try:
        before = _features(b.port, 4)
        r = _update(b.port, [("transaction.version", 0, 2), ("no.such", 1, 1)])
        assert r["error_code"] == 95 and "no.such" in r["error_message"], r
        r = _update(b.port, [("transaction.version", 0, 2)], validate_only=True)
        assert r["error_code"] == 0 and _features(b.port, 4) == before
        assert not (data / ".kafkalog-broker" / "features.json").exists()
        r = _update(b.port, [("transaction.version", 0, 2), ("group.version", 0, 2)], version=1)
        assert (r["error_code"], [x["error_code"] for x in r["results"]]) == (0, [0, 0]), r
        after = _features(b.port, 4)
        assert after["finalized"] == {"share.version": (1, 1)} and after["epoch"] > before["epoch"], after
        assert b.store.transactions.transaction_version == 0
        with Wire(b.port) as w:
            r = w.call(68, 0, {"group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None,
                               "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
                               "server_assignor": None, "topic_partitions": []})
        assert r["error_code"] == 35, r
    finally:
        b.stop()
    b = Broker(data, listen="127.0.0.1:0", config={"transaction.version": 2})
    b.start()
    try:
        assert _features(b.port, 4)["finalized"] == {"share.version": (1, 1)}  # kept levels win over the server key
        assert b.store.transactions.transaction_version == 0
        assert _update(b.port, [("transaction.version", 2, 1), ("group.version", 1, 1)])["error_code"] == 0
        assert _features(b.port, 4)["finalized"] == {"group.version": (1, 1), "share.version": (1, 1),
                                                     "transaction.version": (2, 2)}
        assert b.store.transactions.transaction_version == 2
    finally:
        b.stop()


def test_share_version_updated_while_running_turns_share_groups_off_and_on(broker):
    """kafka-features downgrade --feature share.version=0 turns KIP-932's APIs off at once (still listed, each
    answered UNSUPPORTED_VERSION, as Kafka 4.4), upgrade turns them on again."""
    from .test_share_groups import assert_share_apis_refused
    try:
        assert _update(broker.port, [("share.version", 0, 2)])["error_code"] == 0
        assert_share_apis_refused(broker.port)
    finally:
        assert _update(broker.port, [("share.version", 1, 1)])["error_code"] == 0
    with Wire(broker.port) as w:
        r = w.call(76, 1, {"group_id": "g-on", "member_id": "m-on", "member_epoch": 0, "rack_id": None,
                           "subscribed_topic_names": ["t"]})
    assert r["error_code"] == 0 and r["member_epoch"] == 1, r
