"""KIP-584 features, differential: ApiVersions v3/v4's tagged feature fields in raw frames and ``kafka-features
describe``, against Apache Kafka 4.4 (the session's Kafka, at its default transaction.version=2) and kafkalog.

kafkalog advertises only what it serves: ``group.version`` (KIP-848 groups), ``transaction.version`` and
``share.version`` (KIP-932 share groups); Kafka's metadata.version, kraft.version, streams.version and
eligible.leader.replicas.version name things kafkalog does not serve and are left out. The features both list must
agree field by field (transaction.version supported 0-2 and finalized 2 on both, as on a new Kafka 4.4 cluster),
but share.version: kafkalog supports and finalizes level 1 (share groups), Kafka 4.4 level 2 (1 + dead-letter
queues, which kafkalog does not serve).

Cost: the lab's session pair, milliseconds per raw request; ``kafka-features describe`` is one tool JVM per broker
(about 2-3 s each).
"""

from __future__ import annotations

import re
import time

from kafkalog.broker.api import SUPPORTED_FEATURES
from tests.broker.wire import Wire

from .lab import assert_same

LAB_TEST_DEADLINE_S = 120
OURS = set(SUPPORTED_FEATURES)
SUPPORTED_TV = SUPPORTED_FEATURES["transaction.version"][1]
assert SUPPORTED_TV == 2  # transactions v2 (KIP-890 part 2) served: nothing capped below Kafka
SUPPORTED_SV = SUPPORTED_FEATURES["share.version"][1]
assert SUPPORTED_SV == 1  # share groups without dead-letter queues: capped below Kafka 4.4's 2


def _api_versions(target, version: int) -> dict:
    with Wire(int(target.bootstrap.rsplit(":", 1)[1]), timeout=30) as w:
        r = w.call(18, version, {"client_software_name": "kafkalog-tests", "client_software_version": "1"})
    return r


def _features(r: dict) -> dict:
    return {"supported": {f["name"]: {"min": f["min_version"], "max": f["max_version"]}
                          for f in r["supported_features"]},
            "finalized": {f["name"]: {"min": f["min_version_level"], "max": f["max_version_level"]}
                          for f in r["finalized_features"]},
            "zk_migration_ready": r["zk_migration_ready"],
            "error_code": r["error_code"]}


def _ours_only(answer: dict, tv_max: int, tv_level: int) -> dict:
    """Kafka's answer cut to the features kafkalog serves, transaction.version capped where kafkalog is."""
    out = {"supported": {k: dict(v) for k, v in answer["supported"].items() if k in OURS},
           "finalized": {k: dict(v) for k, v in answer["finalized"].items() if k in OURS},
           "zk_migration_ready": answer["zk_migration_ready"], "error_code": answer["error_code"]}
    if "transaction.version" in out["supported"]:
        out["supported"]["transaction.version"]["max"] = tv_max
    if "transaction.version" in out["finalized"]:
        out["finalized"]["transaction.version"] = {"min": tv_level, "max": tv_level}
    if "share.version" in out["supported"]:
        out["supported"]["share.version"]["max"] = SUPPORTED_SV
    if "share.version" in out["finalized"]:
        out["finalized"]["share.version"] = {"min": SUPPORTED_SV, "max": SUPPORTED_SV}
    return out


def test_api_versions_feature_fields(targets):
    for version in (3, 4):
        kafka = _api_versions(targets["kafka"], version)
        ours = _api_versions(targets["kafkalog"], version)
        k, o = _features(kafka), _features(ours)
        # nothing kafkalog advertises is unknown to Kafka
        assert set(o["supported"]) <= set(k["supported"]) | {n for n in OURS if version == 3}
        assert set(o["finalized"]) <= set(k["finalized"])
        # Kafka's own finalized transaction.version in the session is 2 (nobody downgraded it)
        assert k["finalized"]["transaction.version"] == {"min": 2, "max": 2}
        assert_same(_ours_only(k, SUPPORTED_TV, SUPPORTED_TV), o, what=f"ApiVersions v{version} features")
        # both carry an epoch of their finalized levels (clients take in levels with a higher epoch than theirs)
        assert kafka["finalized_features_epoch"] >= 0 and ours["finalized_features_epoch"] >= 0


_DESCRIBE = re.compile(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
                       r"FinalizedVersionLevel: (\S+)\s+Epoch: (\S+)")


def _describe(target) -> dict:
    r = target.tool("kafka-features", "--bootstrap-server", target.bootstrap, "describe")
    rows = {m[0]: {"min": m[1], "max": m[2], "level": m[3]} for m in _DESCRIBE.findall(r.stdout)}
    assert rows, r.stdout
    return rows


def test_kafka_features_describe(targets):
    kafka, ours = _describe(targets["kafka"]), _describe(targets["kafkalog"])
    assert set(ours) == OURS, ours
    want = {name: dict(kafka[name]) for name in OURS}
    want["transaction.version"] = {"min": "0", "max": str(SUPPORTED_TV), "level": str(SUPPORTED_TV)}
    assert kafka["share.version"]["level"] == "2"  # Kafka 4.4: share groups and their dead-letter queues
    want["share.version"] = {"min": "0", "max": str(SUPPORTED_SV), "level": str(SUPPORTED_SV)}
    assert_same(want, ours, what="kafka-features describe")


def _update(target, version: int, updates, validate_only: bool = False) -> dict:
    with Wire(int(target.bootstrap.rsplit(":", 1)[1]), timeout=30) as w:
        return w.call(57, version, {"timeout_ms": 10000, "validate_only": validate_only, "feature_updates": [
            {"feature": f, "max_version_level": level, "upgrade_type": kind, "allow_downgrade": kind is None}
            for f, level, kind in updates]})


def _settled(target, answer: dict, updates, validate_only: bool, tries: int = 200) -> dict:
    """ApiVersions' finalized levels after an UpdateFeatures answer. Kafka's broker answers ApiVersions from its
    metadata image, which takes in the controller's committed FeatureLevelRecord a moment after UpdateFeatures was
    answered (seen once in CI: group.version still 1 in the ApiVersions right after a downgrade to 0 was answered
    with no error): after an update that was applied, the levels are read again, at most ``tries`` times 10 ms
    apart, until they show the levels asked for; whatever is there then is what is compared."""
    applied = (not validate_only and updates and answer["error_code"] == 0
               and all(x["error_code"] == 0 for x in answer.get("results") or ()))
    want = {f: level for f, level, _ in updates}
    for _ in range(tries):
        finalized = _features(_api_versions(target, 4))["finalized"]
        if not applied or all((finalized.get(f) or {}).get("max", 0) == level for f, level in want.items()):
            return finalized
        time.sleep(0.01)
    return finalized


def test_update_features_like_kafka(targets):
    """UpdateFeatures v0-2 on both brokers, the same requests in the same order: downgrades need UpgradeType safe
    or unsafe (v0 cannot downgrade at all), a level out of range, an unknown feature or a negative level is
    INVALID_UPDATE_VERSION (95) with Kafka's text and nothing applied, validate_only applies nothing, v0-1 list each
    feature's result ("NONE"), v2 none; ApiVersions' finalized levels follow. Both are put back (transaction.version
    2, group.version 1) whatever happens: the session's other tests use them."""
    steps = [(1, [("transaction.version", 0, 1)], False), (1, [("transaction.version", 0, 2)], True),
             (2, [("transaction.version", 0, 2)], False), (1, [("transaction.version", 1, 1)], False),
             (2, [("transaction.version", 3, 1)], False), (2, [("no.such.feature", 1, 1)], False),
             (1, [("transaction.version", 2, 1), ("no.such.feature", 1, 1)], False),
             (2, [("transaction.version", -1, 3)], False), (0, [("transaction.version", 0, None)], False),
             (1, [("group.version", 0, 2)], False), (2, [], False),
             (1, [("transaction.version", 2, 1), ("group.version", 1, 1)], False)]
    answers = {}
    try:
        for name, t in targets.items():
            seen = []
            for version, updates, validate_only in steps:
                r = _update(t, version, updates, validate_only)
                finalized = _settled(t, r, updates, validate_only)
                seen.append({"answer": r, "finalized": {k: v for k, v in finalized.items()  # share.version: 2 on Kafka
                                                        if k in ("transaction.version", "group.version")}})
            answers[name] = seen
    finally:
        for t in targets.values():
            _update(t, 2, [("transaction.version", 2, 1), ("group.version", 1, 1)])
    assert_same(answers["kafka"], answers["kafkalog"], what="UpdateFeatures, step by step")
    codes = [s["answer"]["error_code"] for s in answers["kafkalog"]]
    assert codes == [95, 0, 0, 0, 95, 95, 95, 95, 95, 0, 0, 0], codes
    assert answers["kafkalog"][2]["finalized"] == {"group.version": {"min": 1, "max": 1}}  # tv 0: not listed
