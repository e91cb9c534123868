"""The broker's admin APIs: groups (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete), configs
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), topics (CreatePartitions, DescribeTopicPartitions),
the cluster (DescribeCluster, DescribeLogDirs), ACLs (DescribeAcls, CreateAcls, DeleteAcls) and SCRAM users
(DescribeUserScramCredentials, AlterUserScramCredentials), with Kafka's semantics, error codes and ACL checks.

Same handler contract as ``api.py``: ``handler(services, ctx, header, frame, offset)`` returns the response chunks
or is a generator (run by ``api.run_sliced``) that yields an awaitable to wait for work done off the loop.
Everything that writes a file (configs, partitions, offsets, users, ACLs) runs on a worker thread.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import uuid

from ..client.admin import (
    _NO_DEFAULT_SYNONYM,
    INTERNAL_TOPICS,
    _broker_key,
    _config_type,
    _render,
    _topic_config_entries,
)
from ..client.group import describe_group, group_dir, known_groups
from ..config import BROKER, CONFIG_KEYS, STORE, SYNONYMS, TOPIC, Config
from ..errors import (
    DuplicateResourceError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    MismatchedEndpointTypeError,
    NonEmptyGroupError,
    ResourceNotFoundError,
    SecurityDisabledError,
    UnacceptableCredentialError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
)
from ..storage.store import NULL_TOPIC_ID
from ..structs import TopicPartition
from . import group_configs, protocol, security
from .handling import (
    CLUSTER_ID,
    Slice,
    allowed,
    answer_sliced,
    check_partition_budget,
    error_code,
    not_allowed,
    request_body,
    respond,
)

log = logging.getLogger("kafkalog.broker")

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 29, 30, 31
NO_OPERATIONS = -(2**31)  # authorized_operations when not asked for (Kafka's Integer.MIN_VALUE)
CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"

# Kafka's wire enums (org.apache.kafka.common.{resource,acl,config})
RESOURCE_TYPE = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID"}
RESOURCE_CODE = {v: k for k, v in RESOURCE_TYPE.items()}
PATTERN_TYPE = {1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
PATTERN_CODE = {"LITERAL": 3, "PREFIXED": 4}
OPERATION = {1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
             9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE"}
OPERATION_CODE = {v: k for k, v in OPERATION.items()}
PERMISSION = {1: "ANY", 2: "DENY", 3: "ALLOW"}
PERMISSION_CODE = {"DENY": 2, "ALLOW": 3}
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32
CONFIG_SOURCE = {"DYNAMIC_TOPIC_CONFIG": 1, "DYNAMIC_BROKER_CONFIG": 2, "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
                 "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5, "GROUP_CONFIG": 8}
CONFIG_TYPE = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
SCRAM_MECHANISM = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_CODE = {v: k for k, v in SCRAM_MECHANISM.items()}
# what a group / the cluster / a topic allows, in Kafka's bit order, for authorized_operations
GROUP_OPERATIONS = ("READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")  # 4.x: group configs
CLUSTER_OPERATIONS = ("CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE")
TOPIC_OPERATIONS = ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")


def _operations(s, ctx, resource_type: str, name: str, ops) -> int:
    """Kafka's authorized_operations bit set: bit n for the AclOperation of code n that ``ctx`` may do."""
    bits = 0
    for op in ops:
        if allowed(s, ctx, op, resource_type, name):
            bits |= 1 << OPERATION_CODE[op]
    return bits


# ---------------------------------------------------------------------------------------------------- groups

def _group_ids(s) -> list[str]:
    """Every group of the data dir: with committed offsets, with a group directory, or live on this broker."""
    ids = set(s.store.offsets.groups()) | set(known_groups(s.store.path))
    ids |= {g for g, wg in s.groups.groups.items() if wg.members}
    ids |= {g for g, cg in s.groups.classic.groups.items() if cg.members}
    ids |= set(s.groups.consumer.groups)
    return sorted(ids)


def _consumer_group_view(s, kg, names: dict | None) -> dict:
    """A KIP-848 consumer group in DescribeGroups' classic shape, as Kafka's ConsumerGroup.asDescribedGroup: protocol
    type consumer, the assignor as the protocol, each member's subscription and assignment in ConsumerProtocol
    bytes (``names``: topic id -> name; None: without members)."""
    members = []
    for m in kg.members.values() if names is not None else ():
        assigned = {names[t]: sorted(ps) for t, ps in m.assigned.items() if t in names}
        members.append({"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": protocol.encode_subscription(sorted(m.topic_names)),
                        "member_assignment": protocol.encode_assignment(assigned)})
    return {"state": kg.state(), "protocol_type": "consumer", "protocol": kg.assignor or s.groups.consumer.assignors[0],
            "members": members, "group_type": CONSUMER}


def _group_view(s, gid: str, with_members: bool = True, joined_ids: set | None = None) -> dict:
    """{"state", "protocol_type", "protocol", "members": [...]} as Kafka's DescribeGroups describes a group.
    ``joined_ids``: the data dir's ``known_groups`` when the caller has listed them already (ListGroups: listing them
    again for each group read every group's id file once per group, quadratic in the groups of the data dir)."""
    kg = s.groups.consumer.groups.get(gid)
    if kg is not None:
        return _consumer_group_view(s, kg, _topic_names_by_id(s) if with_members else None)
    cg = s.groups.classic.groups.get(gid)
    if cg is not None and cg.members:
        state = {"CompletingRebalance": "CompletingRebalance"}.get(cg.state, cg.state)
        members = []
        for m in cg.members.values():
            meta = next((md for n, md in m.protocols if n == cg.protocol), b"") if state == "Stable" else b""
            # not Stable: Kafka's describeNoMetadata (the assignment a member holds, no metadata, no protocol)
            members.append({"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                            "client_host": s.groups.hosts.get(m.member_id, ""), "member_metadata": meta,
                            "member_assignment": m.assignment})
        return {"state": state, "protocol_type": cg.protocol_type,
                "protocol": (cg.protocol or "") if state == "Stable" else "", "members": members}
    if gid == "":  # Kafka allows the empty group id for commits (and so to describe and delete): never joined
        d = {"state": "Empty", "members": [], "protocol": None}
    else:
        d = describe_group(s.store, gid)
    if joined_ids is None:
        joined_ids = set(known_groups(s.store.path))
    joined = gid in joined_ids or bool(d["members"]) or bool(s.groups.groups.get(gid) and s.groups.groups[gid].members)
    if not joined and gid not in s.store.offsets.groups():
        return {"state": "Dead", "protocol_type": "", "protocol": "", "members": []}
    wire = s.groups.groups.get(gid)
    state = d["state"]
    if wire is not None and wire.members:
        # the broker's join phase (Kafka's states): joins waiting to be written, or a generation whose leader has
        # not sent its SyncGroup yet
        leader = wire.members.get(wire.leader) if wire.leader else None
        if wire.preparing:
            state = "PreparingRebalance"
        elif state == "Stable" and leader is not None and leader.joined_generation == d["generation"] \
                and leader.synced_generation < d["generation"]:
            state = "CompletingRebalance"
    stable = state == "Stable"
    members = []
    listed = [m for m in d["members"] if m["member_id"] not in wire.departed] if wire is not None else d["members"]
    if wire is not None and wire.preparing and with_members:  # members whose join is not written yet
        known = {m["member_id"] for m in listed}
        listed = listed + [{"member_id": mid, "client_id": wm.gm.client_id, "pid": None, "topics": wm.topics,
                            "assignment": []} for mid, wm in wire.members.items()
                           if mid not in known and wm.join_waiter is not None and not wm.join_waiter.done()]
    for m in listed if with_members else ():
        wm = wire.members.get(m["member_id"]) if wire is not None else None
        if wm is not None:  # a wire member: the bytes it sent and the bytes it was given, as Kafka keeps them
            metadata, assignment = wm.metadata(d["protocol"]), wm.assignment
        else:  # an embedded member (another process): its subscription and assignment in the consumer protocol
            by_topic: dict[str, list[int]] = {}
            for tp in m["assignment"]:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            metadata = protocol.encode_subscription(m["topics"])
            assignment = protocol.encode_assignment(by_topic)
        members.append({
            "member_id": m["member_id"], "group_instance_id": None, "client_id": m["client_id"] or "",
            "client_host": s.groups.hosts.get(m["member_id"], f"pid:{m['pid']}"),
            # Kafka's describeNoMetadata while the group is not Stable: the assignment a member holds, no metadata
            "member_metadata": metadata if stable else b"",
            "member_assignment": assignment if stable or wm is not None else b""})
    return {"state": state, "protocol_type": (d.get("protocol_type") or "consumer") if joined else "",
            "protocol": (d["protocol"] or "") if stable else "", "members": members}


def _listed_groups(s, ids, states, types=()) -> list:
    """ListGroups' entries (a worker thread, one call for the whole listing): a group with only committed offsets
    is Empty without a file read; a joined group's state comes from its group files or the live coordinator."""
    joined = set(known_groups(s.store.path))
    out = []
    for gid in ids:
        kg = s.groups.consumer.groups.get(gid)
        if kg is not None:
            if not types or CONSUMER in types:
                state = kg.state()
                if not states or state.lower() in states:
                    out.append({"group_id": gid, "protocol_type": "consumer", "group_state": state,
                                "group_type": CONSUMER})
            continue
        if types and CLASSIC not in types:
            continue
        if gid not in joined and gid not in s.groups.groups and gid not in s.groups.classic.groups:
            view = {"state": "Empty", "protocol_type": ""}
        else:
            try:
                view = _group_view(s, gid, False, joined)
            except KafkaError as e:  # a group whose files cannot be read now: left out, the listing goes on
                log.warning("ListGroups: group %r: %s", gid, e)
                continue
        if view["state"] == "Dead" or (states and view["state"].lower() not in states):
            continue
        out.append({"group_id": gid, "protocol_type": view["protocol_type"], "group_state": view["state"],
                    "group_type": CLASSIC})
    return out


def list_groups(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    states = {x.lower() for x in req.get("states_filter") or []}
    types = {x.lower() for x in req.get("types_filter") or []}
    ids = yield s.loop.run_in_executor(None, _group_ids, s)
    s.shares.adopt((yield s.loop.run_in_executor(None, s.shares.stored)))
    share = [] if types and SHARE not in types else sorted(s.shares.groups)
    if types and not types & {CLASSIC, CONSUMER}:
        ids = []  # streams groups are not served
    ids = [g for g in ids if g not in s.shares.groups]
    if not allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME):
        ids = [g for g in ids if allowed(s, ctx, "DESCRIBE", "GROUP", g)]  # only the groups the caller may describe
    out = yield s.loop.run_in_executor(None, _listed_groups, s, ids, states, types)
    for gid in share:
        state = s.shares.groups[gid].state
        if (not states or state.lower() in states) and (allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME)
                                                          or allowed(s, ctx, "DESCRIBE", "GROUP", gid)):
            out.append({"group_id": gid, "protocol_type": "share", "group_state": state, "group_type": SHARE})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "groups": out})


def describe_groups(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    for gid in req["groups"]:
        r = {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "", "protocol_type": "",
             "protocol_data": "", "members": [], "authorized_operations": NO_OPERATIONS}
        if not_allowed(s, ctx, "DESCRIBE", "GROUP", gid):
            r["error_code"] = GROUP_DENIED
            out.append(r)
            continue
        if gid in s.groups.consumer.groups or (yield from s.shares.group_of(gid)):
            # Kafka 4.4 describes only classic groups here: a KIP-848 group is "Dead" before v6, and from v6 not found
            r["group_state"] = "Dead"
            if header.api_version >= 6:
                r.update(error_code=GroupIdNotFoundError.code, error_message=f"Group {gid} is not a classic group.")
            out.append(r)
            continue
        try:
            view = yield s.loop.run_in_executor(None, _group_view, s, gid, True)
        except KafkaError as e:
            r["error_code"] = error_code(e)
            out.append(r)
            continue
        if view["state"] == "Dead" and header.api_version >= 6:
            # Kafka 4 (KIP-1043): v6 names an unknown group with GROUP_ID_NOT_FOUND; older versions answer "Dead"
            r.update(error_code=GroupIdNotFoundError.code, error_message=f"Group {gid} not found.",
                     group_state="Dead")
            out.append(r)
            continue
        r.update(group_state=view["state"], protocol_type=view["protocol_type"], protocol_data=view["protocol"],
                 members=view["members"])
        if req.get("include_authorized_operations"):
            r["authorized_operations"] = _operations(s, ctx, "GROUP", gid, GROUP_OPERATIONS)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "groups": out})


def _topic_names_by_id(s) -> dict:
    """{topic id (UUID): name} of every topic (a worker thread)."""
    from .consumer_groups import topic_uuid
    out = {}
    for name in s.store.topics():
        try:
            out[topic_uuid(s.store.topic_id(name))] = name
        except KafkaError:
            continue
    return out


def _delete_group_files(s, gid: str) -> int:
    """DeleteGroups for one group (worker thread): its offsets and its directory, when it has no live member."""
    view = _group_view(s, gid, True)
    if view["state"] == "Dead":
        return GroupIdNotFoundError.code
    if view["members"] or view["state"] not in ("Empty", "Dead"):
        return NonEmptyGroupError.code
    s.store.offsets.delete_group(gid)
    path = group_dir(s.store.path, gid) if gid else None
    if path is not None and path.exists():
        gone = path.with_name(path.name + ".deleted")
        try:
            os.replace(path, gone)
            shutil.rmtree(gone, ignore_errors=True)
        except OSError as e:
            log.warning("group %s: could not remove %s: %s", gid, path, e)
    return 0


def delete_groups(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    for gid in dict.fromkeys(req["groups_names"]):  # a name asked twice is answered once, as Kafka does
        if not_allowed(s, ctx, "DELETE", "GROUP", gid):
            out.append({"group_id": gid, "error_code": GROUP_DENIED})
            continue
        sg = s.shares.groups.get(gid) if (yield from s.shares.group_of(gid)) else None
        if sg is not None:  # a share group: deleted when it has no member, with its share-partition states
            if sg.members:
                out.append({"group_id": gid, "error_code": NonEmptyGroupError.code})
                continue
            del s.shares.groups[gid]
            yield s.loop.run_in_executor(None, s.shares.delete_states, gid)
            if gid not in s.store.offsets.groups():
                out.append({"group_id": gid, "error_code": 0})
                continue
        live = s.groups.groups.get(gid)
        kg = s.groups.consumer.groups.get(gid)
        if kg is not None and not kg.members:  # an empty consumer group: its offsets go with it below
            del s.groups.consumer.groups[gid]
            if gid not in s.store.offsets.groups():
                out.append({"group_id": gid, "error_code": 0})
                continue
        if (live is not None and live.members) or (gid in s.groups.classic.groups
                                                    and s.groups.classic.groups[gid].members) or \
                (kg is not None and kg.members):
            out.append({"group_id": gid, "error_code": NonEmptyGroupError.code})
            continue
        try:
            yield s.groups.state.barrier()
            code = yield s.loop.run_in_executor(None, _delete_group_files, s, gid)
        except KafkaError as e:
            code = error_code(e)
        if code == 0:
            s.groups.groups.pop(gid, None)
            s.groups.classic.groups.pop(gid, None)
            s.groups.state.forget(gid)
            log.info("deleted group %s for %s", gid, ctx.peer)
        out.append({"group_id": gid, "error_code": code})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": out})


def offset_delete(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    gid = req["group_id"]

    def answer(code, topics=()):
        return respond(header, {"error_code": code, "throttle_time_ms": ctx.throttle_time_ms, "topics": list(topics)})
    if not_allowed(s, ctx, "DELETE", "GROUP", gid):
        return answer(GROUP_DENIED)
    try:
        view = yield s.loop.run_in_executor(None, _group_view, s, gid, True)
    except KafkaError as e:
        return answer(error_code(e))
    if view["state"] == "Dead":
        return answer(GroupIdNotFoundError.code)
    subscribed = set()
    unknown = False  # a member whose subscription cannot be read is taken as subscribed to every topic (Kafka's
    # GroupMetadata.isSubscribedToTopic with no parsed subscription): its metadata is opaque to the join, and one
    # member's bad bytes must not close the connection of whoever deletes offsets (found by the fuzzer)
    for m in view["members"]:
        if m["member_metadata"]:
            try:
                subscribed |= set(protocol.decode_subscription(m["member_metadata"])["topics"])
            except InvalidRequestError:
                unknown = True
    live = s.groups.groups.get(gid)
    if live is not None:
        for m in live.members.values():
            subscribed |= set(m.topics)
    cg = s.groups.classic.groups.get(gid)
    if cg is not None:
        for m in cg.members.values():
            subscribed |= set(m.topics)
    kg = s.groups.consumer.groups.get(gid)
    if kg is not None:
        subscribed |= set(kg.metadata or ())
    if view["state"] != "Empty" and not subscribed and gid:
        d = yield s.loop.run_in_executor(None, describe_group, s.store, gid)
        for m in d["members"]:
            subscribed |= set(m["topics"])
    topics, delete = [], []
    for t in req["topics"]:
        name = t["name"]
        parts = []
        denied = not_allowed(s, ctx, "READ", "TOPIC", name)
        n = s.partitions(name)
        for p in t["partitions"]:
            idx = p["partition_index"]
            if denied:
                code = TOPIC_DENIED
            elif not 0 <= idx < n:
                code = UnknownTopicOrPartitionError.code
            elif unknown or name in subscribed:
                code = GroupSubscribedToTopicError.code
            else:
                code = 0
                delete.append(TopicPartition(name, idx))
            parts.append({"partition_index": idx, "error_code": code})
        topics.append({"name": name, "partitions": parts})
    if delete:
        yield s.loop.run_in_executor(None, s.store.offsets.delete_offsets, gid, delete)
        log.info("deleted committed offsets of group %s for %d partitions for %s", gid, len(delete), ctx.peer)
    return answer(0, topics)


# ---------------------------------------------------------------------------------------------------- configs

def _entry(name, e: dict, version: int, synonyms: bool, docs: bool) -> dict:
    return {"name": name, "value": e["value"], "read_only": e["read_only"], "is_default": e["is_default"],
            "config_source": CONFIG_SOURCE[e["config_source"]], "is_sensitive": e["is_sensitive"],
            "synonyms": [{"name": x["name"], "value": x["value"], "source": CONFIG_SOURCE[x["source"]]}
                         for x in e["synonyms"]] if synonyms else [],
            "config_type": CONFIG_TYPE.get(e["config_type"], 0), "documentation": e["documentation"] if docs else None}


def _broker_entries(s) -> dict:
    """{name: entry} of the broker's configuration: its own keys and the topic defaults under their broker names."""
    out = {}
    overrides = s.config.overrides
    store_overrides = s.store.config.overrides
    for key, spec in CONFIG_KEYS.items():
        if spec.scope in (BROKER, STORE):
            name, value, static = key, s.config[key] if key in s.config else spec.default, key in overrides
        elif spec.scope == TOPIC:
            name, value, static = _broker_key(key), s.store.config[key], key in store_overrides
        else:
            continue
        if spec.scope == TOPIC and not static and key in _NO_DEFAULT_SYNONYM:
            value = None  # Kafka's log.retention.ms & co. have no default of their own (the hours key has it)
        _put_broker_entry(out, name, key, value, static, spec.doc)
    # the coarser broker keys Kafka also lists (log.retention.hours=168, log.roll.hours=168, ...): the same setting
    for name, (key, mult) in SYNONYMS.items():
        if mult == 1 or name in out:
            continue
        static = key in store_overrides
        ms = s.store.config[key]
        # set (any of the synonyms, in the store's config): shown in each unit it divides; else Kafka's defaults
        # (log.retention.hours=168 beside a null log.retention.minutes)
        value = ms // mult if ms % mult == 0 and (static or name.endswith(".hours")) else None
        _put_broker_entry(out, name, key, value, static and value is not None, CONFIG_KEYS[key].doc)
    return out


def _put_broker_entry(out: dict, name: str, key: str, value, static: bool, doc: str) -> None:
    sensitive = "password" in name or name.endswith(".jaas.config")
    source = "STATIC_BROKER_CONFIG" if static else "DEFAULT_CONFIG"
    shown = None if sensitive or value is None else _render(value)
    out[name] = {"value": shown, "read_only": True, "config_source": source, "is_default": not static,
                 "is_sensitive": sensitive, "synonyms": [{"name": name, "value": shown, "source": source}],
                 "config_type": "PASSWORD" if sensitive else _config_type_any(key), "documentation": doc}


def _config_type_any(key: str) -> str:
    try:
        return _config_type(key)
    except Exception:  # noqa: BLE001  (a key _config_type does not know)
        return "STRING"


def describe_configs(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    v = header.api_version
    synonyms = bool(req.get("include_synonyms"))
    docs = bool(req.get("include_documentation"))
    out = []
    for res in req["resources"]:
        rtype, name = res["resource_type"], res["resource_name"]
        # Kafka answers an empty error message (not null) for a resource described without error
        r = {"error_code": 0, "error_message": "", "resource_type": rtype, "resource_name": name, "configs": []}
        try:
            if rtype == CONFIG_TOPIC:
                if not_allowed(s, ctx, "DESCRIBE_CONFIGS", "TOPIC", name):
                    r["error_code"], r["error_message"] = TOPIC_DENIED, f"{ctx.principal} may not describe {name!r}"
                    out.append(r)
                    continue
                overrides = s.store.topic_config(name).overrides  # UnknownTopicOrPartitionError
                entries = _topic_config_entries(s.store.config, overrides, True)
            elif rtype == CONFIG_BROKER:
                if name not in ("", str(s.node_id)):
                    raise InvalidRequestError(f"unknown broker {name!r}: this cluster is broker {s.node_id}")
                if not_allowed(s, ctx, "DESCRIBE_CONFIGS", "CLUSTER", security.CLUSTER_NAME):
                    r["error_code"], r["error_message"] = CLUSTER_DENIED, f"{ctx.principal} may not describe configs"
                    out.append(r)
                    continue
                entries = _broker_entries(s) if name else {}  # the cluster-wide default resource holds no dynamic key
            elif rtype == CONFIG_BROKER_LOGGER:
                entries = {}
            elif rtype == CONFIG_GROUP:
                if not_allowed(s, ctx, "DESCRIBE_CONFIGS", "GROUP", name):
                    r["error_code"], r["error_message"] = GROUP_DENIED, None
                    out.append(r)
                    continue
                entries = _group_config_entries(s, name)
            else:
                raise InvalidRequestError(f"config resource type {rtype} is not served by kafkalog "
                                          "(TOPIC 2, BROKER 4, BROKER_LOGGER 8 and GROUP 32 are)")
            keys = res.get("configuration_keys")
            if keys is not None:
                entries = {k: e for k, e in entries.items() if k in keys}
            listed = entries.items() if rtype == CONFIG_GROUP else sorted(entries.items())  # a group's: Kafka's order
            r["configs"] = [_entry(k, e, v, synonyms, docs) for k, e in listed]
        except KafkaError as e:
            r["error_code"], r["error_message"] = error_code(e), str(e)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": out})


def _new_overrides(s, name: str, ops, replace: bool) -> dict:
    """The topic's overrides after ``ops`` [(key, op, value)] (AlterConfigs replaces them all: ``replace``)."""
    current = s.store.topic_config(name)  # UnknownTopicOrPartitionError
    overrides = {} if replace else dict(current.overrides)
    seen = set()
    for key, op, value in ops:
        if key in seen:
            raise InvalidRequestError(f"config key {key!r} appears more than once for topic {name!r}")
        seen.add(key)
        spec = CONFIG_KEYS.get(key)
        if spec is None or spec.scope != TOPIC:
            raise InvalidConfigError(f"unknown topic config key {key!r}")
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"null value for topic config {key!r}")
            overrides[key] = value
        elif op == DELETE:
            overrides.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if _config_type(key) != "LIST":
                raise InvalidConfigError(f"APPEND/SUBTRACT apply to list configs only; {key!r} is not a list")
            base = overrides[key] if key in overrides else current[key]
            items = [x for x in str(base).replace(" ", "").split(",") if x]
            for x in str(value or "").replace(" ", "").split(","):
                if op == APPEND and x and x not in items:
                    items.append(x)
                elif op == SUBTRACT and x in items:
                    items.remove(x)
            if not items:
                raise InvalidConfigError(f"{key!r} cannot be empty")
            overrides[key] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return Config(overrides, scope=TOPIC).overrides  # InvalidConfigError names a bad value


def _alter(s, ctx, header, frame, offset, incremental: bool):
    req = request_body(ctx, header, frame, offset)
    out = []
    for res in req["resources"]:
        rtype, name = res["resource_type"], res["resource_name"]
        r = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name}
        try:
            if rtype == CONFIG_TOPIC:
                if not_allowed(s, ctx, "ALTER_CONFIGS", "TOPIC", name):
                    r["error_code"], r["error_message"] = TOPIC_DENIED, f"{ctx.principal} may not alter {name!r}"
                    out.append(r)
                    continue
                ops = [(c["name"], c["config_operation"] if incremental else SET, c["value"]) for c in res["configs"]]
                overrides = _new_overrides(s, name, ops, replace=not incremental)
                if not req["validate_only"]:
                    yield s.loop.run_in_executor(None, s.store.alter_topic_config, name, overrides)
                    log.info("topic %s config set to %s by %s", name, overrides, ctx.peer)
            elif rtype in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
                if not_allowed(s, ctx, "ALTER_CONFIGS", "CLUSTER", security.CLUSTER_NAME):
                    r["error_code"], r["error_message"] = CLUSTER_DENIED, f"{ctx.principal} may not alter configs"
                    out.append(r)
                    continue
                if incremental and rtype == CONFIG_BROKER and all(c["config_operation"] == DELETE
                                                                  for c in res["configs"]):
                    # no broker config is dynamic here: deleting dynamic ones deletes nothing, answered as Kafka
                    # answers a delete of unset keys (kafka-reassign-partitions --verify clears its throttles so)
                    out.append(r)
                    continue
                keys = ", ".join(c["name"] for c in res["configs"]) or "(none)"
                raise InvalidConfigError(f"broker configs cannot be changed while kafkalog runs ({keys}): set them "
                                         "with --override / server.properties and restart (quotas: "
                                         "AlterClientQuotas)")
            elif rtype == CONFIG_GROUP:
                if not_allowed(s, ctx, "ALTER_CONFIGS", "GROUP", name):
                    r["error_code"], r["error_message"] = GROUP_DENIED, None
                    out.append(r)
                    continue
                ops = [(c["name"], c["config_operation"] if incremental else SET, c["value"]) for c in res["configs"]]
                new = yield s.loop.run_in_executor(None, _alter_group_configs, s, name, ops, not incremental,
                                                   req["validate_only"])
                if new is not None:
                    log.info("group %s config set to %s by %s", name, new, ctx.peer)
            else:
                raise InvalidRequestError(f"config resource type {rtype} is not served by kafkalog")
        except KafkaError as e:
            r["error_code"], r["error_message"] = error_code(e), str(e)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "responses": out})


def _group_config_entries(s, name: str) -> dict:
    """{key: DescribeConfigs entry} of a group, as Kafka 4.4 describes one (in its order): every key it may set
    (Kafka's internal ones aside), its own value (GROUP_CONFIG) or its broker key's (STATIC_BROKER_CONFIG when the
    server sets it, else DEFAULT_CONFIG); synonyms: its own, then the broker key set and its default (a key without
    a broker key names itself)."""
    if not name:
        raise InvalidRequestError("Group name must not be empty")
    gc = s.group_configs
    own = gc.of(name)
    overrides = s.config.overrides
    out = {}
    for key, spec in group_configs.KEYS.items():
        if spec.internal:
            continue
        broker_name = spec.synonym or key
        default = group_configs.render(CONFIG_KEYS[spec.synonym].default if spec.synonym in CONFIG_KEYS
                                       else spec.default)
        synonyms = []
        if key in own:
            synonyms.append({"name": key, "value": own[key], "source": "GROUP_CONFIG"})
        if spec.synonym is not None and spec.synonym in overrides:
            synonyms.append({"name": broker_name, "value": group_configs.render(gc.broker_value(spec)),
                             "source": "STATIC_BROKER_CONFIG"})
        synonyms.append({"name": broker_name, "value": default, "source": "DEFAULT_CONFIG"})
        out[key] = {"value": synonyms[0]["value"], "read_only": False, "config_source": synonyms[0]["source"],
                    "is_default": False, "is_sensitive": False, "synonyms": synonyms, "config_type": spec.type,
                    "documentation": spec.doc}
    return out


def _alter_group_configs(s, name: str, ops, replace: bool, validate_only: bool) -> dict | None:
    """Worker thread: check ``ops`` and, unless ``validate_only``, make the group's new configs durable and take
    them (one alteration at a time: two of one group never lose each other's keys); the new configs if changed."""
    with s.group_configs.lock:
        new = _new_group_configs(s, name, ops, replace)
        if validate_only or new == s.group_configs.of(name):
            return None
        s.group_configs.update({name: new})
        return new


def _new_group_configs(s, name: str, ops, replace: bool) -> dict:
    """The group's configs after ``ops`` [(key, op, value)], checked as Kafka 4.4 checks them (AlterConfigs
    replaces them all: ``replace``)."""
    if not name:
        raise InvalidRequestError("Default group resources are not allowed.")
    if len({k for k, _, _ in ops}) != len(ops):
        raise InvalidRequestError("Error due to duplicate config keys")
    current = s.group_configs.of(name)
    new = {} if replace else dict(current)
    for key, op, value in ops:
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for : {key}")
            new[key] = value
        elif op == DELETE:
            new.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            spec = group_configs.KEYS.get(key)
            if spec is None:
                raise InvalidConfigError(f"Unknown group config name: {key}")
            what = "APPEND" if op == APPEND else "SUBTRACT"
            if spec.type != group_configs.LIST:
                raise InvalidConfigError(f"Can't {what} to key {key} because its type is not LIST.")
            items = [x for x in str(new.get(key, s.group_configs.broker_value(spec))).split(",") if x.strip()]
            for x in str(value or "").split(","):
                x = x.strip()
                if op == APPEND and x and x not in items:
                    items.append(x)
                elif op == SUBTRACT and x in items:
                    items.remove(x)
            new[key] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    s.group_configs.validate(name, new)
    return new


def alter_configs(s, ctx, header, frame, offset):
    return (yield from _alter(s, ctx, header, frame, offset, incremental=False))


def incremental_alter_configs(s, ctx, header, frame, offset):
    return (yield from _alter(s, ctx, header, frame, offset, incremental=True))


# ---------------------------------------------------------------------------------------------------- topics

def create_partitions(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    out = []
    seen = set()
    for t in req["topics"]:
        name = t["name"]
        r = {"name": name, "error_code": 0, "error_message": None}
        try:
            if name in seen:
                raise InvalidRequestError(f"topic {name!r} appears more than once")
            seen.add(name)
            if not_allowed(s, ctx, "ALTER", "TOPIC", name):
                r["error_code"], r["error_message"] = TOPIC_DENIED, f"{ctx.principal} may not alter {name!r}"
                out.append(r)
                continue
            have = s.partitions(name)
            if not have:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            if name in INTERNAL_TOPICS:
                raise InvalidRequestError(f"topic {name!r} is internal")
            count = t["count"]
            if count < have:
                raise InvalidPartitionsError(f"Topic currently has {have} partitions, which is higher than the "
                                             f"requested {count}.")
            if count == have:
                raise InvalidPartitionsError(f"Topic already has {have} partitions.")
            assignments = t.get("assignments")
            if assignments is not None:
                if len(assignments) != count - have:
                    raise InvalidReplicaAssignmentError(f"{len(assignments)} replica assignments for "
                                                        f"{count - have} new partitions")
                if any(list(a["broker_ids"]) != [s.node_id] for a in assignments):
                    raise InvalidReplicaAssignmentError(f"replica assignment must name only broker {s.node_id}")
            check_partition_budget(s, count - have)
            if not req["validate_only"]:
                yield s.loop.run_in_executor(None, s.store.create_partitions, name, count)
                log.info("topic %s grown from %d to %d partitions for %s", name, have, count, ctx.peer)
        except KafkaError as e:
            r["error_code"], r["error_message"] = error_code(e), str(e)
        out.append(r)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": out})


def describe_topic_partitions(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    limit = max(1, req["response_partition_limit"])
    cursor = req.get("cursor")
    wanted = [t["name"] for t in req["topics"]]
    names = sorted(wanted) if wanted else s.store.topics()
    if cursor is not None:
        names = [n for n in names if n >= cursor["topic_name"]]
    topics, left, next_cursor = [], limit, None
    sl = Slice()
    for name in names:
        if sl.due():
            yield
        n = s.partitions(name)
        if not wanted and not_allowed(s, ctx, "DESCRIBE", "TOPIC", name):
            continue
        t = {"error_code": 0, "name": name, "topic_id": NULL_TOPIC_ID_UUID, "is_internal": name in INTERNAL_TOPICS,
             "partitions": [], "topic_authorized_operations": NO_OPERATIONS}
        if wanted and not_allowed(s, ctx, "DESCRIBE", "TOPIC", name):
            t["error_code"] = TOPIC_DENIED
            topics.append(t)
            continue
        if not n:
            t["error_code"] = UnknownTopicOrPartitionError.code
            topics.append(t)
            continue
        tid = s.store.cached_topic_id(name)
        if tid is None:
            try:
                tid = yield s.loop.run_in_executor(None, s.store.topic_id, name)
            except UnknownTopicOrPartitionError:  # deleted meanwhile
                t["error_code"] = UnknownTopicOrPartitionError.code
                topics.append(t)
                continue
        t["topic_id"] = _uuid(tid)
        first = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
        if left <= 0:
            next_cursor = {"topic_name": name, "partition_index": first}
            break
        last = min(n, first + left)
        t["partitions"] = [{"error_code": 0, "partition_index": p, "leader_id": s.node_id, "leader_epoch": 0,
                            "replica_nodes": [s.node_id], "isr_nodes": [s.node_id], "eligible_leader_replicas": [],
                            "last_known_elr": [], "offline_replicas": []} for p in range(first, last)]
        left -= last - first
        if last < n:
            next_cursor = {"topic_name": name, "partition_index": last}
            topics.append(t)
            break
        t["topic_authorized_operations"] = _operations(s, ctx, "TOPIC", name, TOPIC_OPERATIONS)
        topics.append(t)
    return (yield from answer_sliced(s, sl, header, {"throttle_time_ms": ctx.throttle_time_ms, "topics": topics,
                                                "next_cursor": next_cursor}))


NULL_TOPIC_ID_UUID = uuid.UUID(int=0)


def _uuid(topic_id: str) -> uuid.UUID:
    if topic_id == NULL_TOPIC_ID:
        return NULL_TOPIC_ID_UUID
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


# ---------------------------------------------------------------------------------------------------- cluster

def describe_cluster(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    body = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None,
            "endpoint_type": req.get("endpoint_type", 1), "cluster_id": CLUSTER_ID, "controller_id": s.node_id,
            "brokers": [{"broker_id": s.node_id, "host": s.host, "port": s.port, "rack": None}],
            "cluster_authorized_operations": NO_OPERATIONS}
    if req.get("endpoint_type", 1) != 1:
        body.update(error_code=MismatchedEndpointTypeError.code, brokers=[],
                    error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
                                  "type CONTROLLER")
    elif req["include_cluster_authorized_operations"]:
        body["cluster_authorized_operations"] = _operations(s, ctx, "CLUSTER", security.CLUSTER_NAME,
                                                            CLUSTER_OPERATIONS)
    return respond(header, body)


# ---------------------------------------------------------------------------------------------------- replicas

# One node: every partition has one replica, this broker, its leader since it was made. An election finds the
# leader it would elect already leading, and nothing is ever being reassigned: Kafka's answers for that cluster.

def elect_leaders(s, ctx, header, frame, offset):
    """ElectLeaders (kafka-leader-election), preferred or unclean: ELECTION_NOT_NEEDED (84) for every partition
    there is; asked for every partition (null), those results are left out (each topic listed with none), as
    Kafka's controller answers. ALTER on the cluster."""
    req = request_body(ctx, header, frame, offset)
    denied = not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME)
    wanted = req["topic_partitions"]
    if wanted is None:
        results = [] if denied else [{"topic": t, "partition_result": []} for t in sorted(s.store.topics())]
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms,
                                "error_code": CLUSTER_DENIED if denied else 0, "replica_election_results": results})
    results = []
    for t in wanted:
        name = t["topic"]
        n = 0 if denied else s.partitions(name)
        parts = []
        for p in t["partitions"]:
            if denied:
                code, msg = CLUSTER_DENIED, None
            elif not n:
                code, msg = UnknownTopicOrPartitionError.code, f"No such topic as {name}"
            elif not 0 <= p < n:
                code, msg = UnknownTopicOrPartitionError.code, f"No such partition as {name}-{p}"
            else:
                code, msg = 84, "Leader election not needed for topic partition."  # ELECTION_NOT_NEEDED
            parts.append({"partition_id": p, "error_code": code, "error_message": msg})
        results.append({"topic": name, "partition_result": parts})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms,
                            "error_code": CLUSTER_DENIED if denied else 0, "replica_election_results": results})


def _reassignment_error(s, name: str, n: int, p: dict) -> tuple[int, str | None]:
    """Kafka's answer to one partition of an AlterPartitionReassignments on one node."""
    idx, replicas = p["partition_index"], p["replicas"]
    if not n:
        return UnknownTopicOrPartitionError.code, f"Unable to find a topic named {name}."
    if not 0 <= idx < n:
        return UnknownTopicOrPartitionError.code, f"Unable to find partition {name}:{idx}."
    if replicas is None:
        return 85, None  # NO_REASSIGNMENT_IN_PROGRESS: a cancel with nothing to cancel
    if not replicas:
        return InvalidReplicaAssignmentError.code, "The manual partition assignment includes an empty replica list."
    seen = set()
    for r in replicas:  # each replica in turn: registered, then not seen before (Kafka's order)
        if r != s.node_id:
            return InvalidReplicaAssignmentError.code, \
                f"The manual partition assignment includes broker {r}, but no such broker is registered."
        if r in seen:
            return InvalidReplicaAssignmentError.code, \
                f"The manual partition assignment includes the broker {r} more than once."
        seen.add(r)
    return 0, None  # the replicas it has: nothing to move


def alter_partition_reassignments(s, ctx, header, frame, offset):
    """AlterPartitionReassignments (kafka-reassign-partitions --execute): to this broker alone is done already (the
    partition's replicas); any other broker is not registered, a cancel finds nothing in progress. ALTER on the
    cluster (else CLUSTER_AUTHORIZATION_FAILED for the request)."""
    req = request_body(ctx, header, frame, offset)
    body = {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "error_message": None, "responses": [],
            "allow_replication_factor_change": req.get("allow_replication_factor_change", True)}
    if not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME):
        body.update(error_code=CLUSTER_DENIED, error_message="Cluster authorization failed.")
        return respond(header, body)
    for t in req["topics"]:
        name = t["name"]
        n = s.partitions(name)
        parts = []
        for p in t["partitions"]:
            code, msg = _reassignment_error(s, name, n, p)
            parts.append({"partition_index": p["partition_index"], "error_code": code, "error_message": msg})
        body["responses"].append({"name": name, "partitions": parts})
    return respond(header, body)


def list_partition_reassignments(s, ctx, header, frame, offset):
    """ListPartitionReassignments (kafka-reassign-partitions --list / --verify): none in progress, ever. DESCRIBE
    on the cluster."""
    request_body(ctx, header, frame, offset)  # parsed: garbage is refused all the same
    denied = not_allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": CLUSTER_DENIED if denied else 0,
                            "error_message": "Cluster authorization failed." if denied else None, "topics": []})


def _log_dir_sizes(s, wanted) -> list:
    topics = []
    for name in (s.store.topics() if wanted is None else [t["topic"] for t in wanted]):
        n = s.partitions(name)
        if not n:
            continue
        asked = None if wanted is None else {p for t in wanted if t["topic"] == name for p in t["partitions"]}
        parts = []
        for p in range(n):
            if asked is not None and p not in asked:
                continue
            d = s.store.partition_dir(name, p)
            size = 0
            try:
                if s.store.topic_config(name)["preallocate"]:
                    size = s.store.log(name, p).size_in_bytes  # the batches, not the active segment's zero room
                else:
                    for f in os.scandir(d):
                        if f.name.endswith(".log"):
                            size += f.stat().st_size
            except (OSError, KafkaError):
                continue
            parts.append({"partition_index": p, "partition_size": size, "offset_lag": 0, "is_future_key": False})
        if parts:
            topics.append({"name": name, "partitions": parts})
    return topics


def describe_log_dirs(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    if not_allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME):
        # Kafka: v3+ answers the error at the top; older versions an empty result
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": CLUSTER_DENIED,
                              "results": []})
    topics = yield s.loop.run_in_executor(None, _log_dir_sizes, s, req["topics"])
    st = yield s.loop.run_in_executor(None, shutil.disk_usage, s.store.path)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": 0, "results": [{
        "error_code": 0, "log_dir": str(s.store.path), "topics": topics, "total_bytes": st.total,
        "usable_bytes": st.free}]})


# ---------------------------------------------------------------------------------------------------- ACLs

def _no_authorizer(s) -> bool:
    return s.authorizer is None


def _acl_filter(f: dict, pattern_key: str) -> security.AclBindingFilter:
    rt = f["resource_type_filter"]
    pt = f.get(pattern_key, 3)
    op, perm = f["operation"], f["permission_type"]
    if rt != 1 and rt not in RESOURCE_TYPE:
        raise InvalidRequestError(f"resource type {rt} is not one kafkalog's ACLs know (TOPIC, GROUP, CLUSTER, "
                                  "TRANSACTIONAL_ID)")
    if pt not in PATTERN_TYPE or op not in OPERATION or perm not in PERMISSION:
        raise InvalidRequestError("unknown pattern type, operation or permission in the ACL filter")
    return security.AclBindingFilter(
        principal=f["principal_filter"], host=f["host_filter"], operation=OPERATION[op],
        resource_type=None if rt == 1 else RESOURCE_TYPE[rt], name=f["resource_name_filter"],
        pattern_type=PATTERN_TYPE[pt], permission=PERMISSION[perm])


def _acl_description(b) -> dict:
    return {"principal": b.principal, "host": b.host, "operation": OPERATION_CODE[b.operation],
            "permission_type": PERMISSION_CODE[b.permission]}


def describe_acls(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)

    def answer(code, message=None, resources=()):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code, "error_message": message,
                              "resources": list(resources)})
    if _no_authorizer(s):
        return answer(SecurityDisabledError.code, "No Authorizer is configured.")
    if not_allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME):
        return answer(CLUSTER_DENIED, f"{ctx.principal} may not describe ACLs")
    try:
        flt = _acl_filter(req, "pattern_type_filter")
    except (KafkaError, ValueError) as e:
        return answer(InvalidRequestError.code, str(e))
    groups: dict[tuple, list] = {}
    for b in s.authorizer.list(flt):
        groups.setdefault((b.resource_type, b.name, b.pattern_type), []).append(_acl_description(b))
    return answer(0, None, [{"resource_type": RESOURCE_CODE[rt], "resource_name": name,
                             "pattern_type": PATTERN_CODE[pt], "acls": acls}
                            for (rt, name, pt), acls in groups.items()])


def create_acls(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    n = len(req["creations"])
    if _no_authorizer(s):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": [
            {"error_code": SecurityDisabledError.code, "error_message": "No Authorizer is configured."}] * n})
    if not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": [
            {"error_code": CLUSTER_DENIED, "error_message": f"{ctx.principal} may not create ACLs"}] * n})
    results, bindings = [], []
    for c in req["creations"]:
        try:
            if c["resource_type"] not in RESOURCE_TYPE:
                raise ValueError(f"resource type {c['resource_type']} cannot carry an ACL here")
            if c.get("resource_pattern_type", 3) not in (3, 4):
                raise ValueError("an ACL's pattern type must be LITERAL or PREFIXED")
            if c["operation"] not in OPERATION or c["operation"] == 1 or c["permission_type"] not in (2, 3):
                raise ValueError("an ACL needs a concrete operation and ALLOW or DENY")
            b = security.AclBinding(
                principal=c["principal"], host=c["host"], operation=OPERATION[c["operation"]],
                resource_type=RESOURCE_TYPE[c["resource_type"]], name=c["resource_name"],
                pattern_type=PATTERN_TYPE[c.get("resource_pattern_type", 3)],
                permission=PERMISSION[c["permission_type"]])
        except (ValueError, KafkaError) as e:
            results.append({"error_code": InvalidRequestError.code, "error_message": str(e)})
            continue
        bindings.append(b)
        results.append({"error_code": 0, "error_message": None})
    if bindings:
        yield s.loop.run_in_executor(None, lambda: s.authorizer.add(*bindings))
        log.info("%d ACLs added by %s", len(bindings), ctx.peer)
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": results})


def delete_acls(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    n = len(req["filters"])

    def all_failed(code, message):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}] * n})
    if _no_authorizer(s):
        return all_failed(SecurityDisabledError.code, "No Authorizer is configured.")
    if not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME):
        return all_failed(CLUSTER_DENIED, f"{ctx.principal} may not delete ACLs")
    out = []
    for f in req["filters"]:
        try:
            flt = _acl_filter(f, "pattern_type_filter")
        except (KafkaError, ValueError) as e:
            out.append({"error_code": InvalidRequestError.code, "error_message": str(e), "matching_acls": []})
            continue
        matching = s.authorizer.list(flt)
        if matching:
            yield s.loop.run_in_executor(None, s.authorizer.remove, flt)
        out.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": RESOURCE_CODE[b.resource_type],
             "resource_name": b.name, "pattern_type": PATTERN_CODE[b.pattern_type], **_acl_description(b)}
            for b in matching]})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "filter_results": out})


# ---------------------------------------------------------------------------------------------------- SCRAM users

def _credentials(s):
    """The users file (kept even when no SASL listener is up: users may be made before one is)."""
    if s.credentials is None:
        users_path, _ = security.default_paths(s.store.path)
        s.credentials = security.CredentialStore(users_path)
    return s.credentials


def describe_user_scram_credentials(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)

    def answer(code, message=None, results=()):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "error_code": code, "error_message": message,
                              "results": list(results)})
    if not_allowed(s, ctx, "DESCRIBE", "CLUSTER", security.CLUSTER_NAME):
        return answer(CLUSTER_DENIED, f"{ctx.principal} may not describe SCRAM credentials")
    store = _credentials(s)
    users = req["users"]
    names = [u["name"] for u in users] if users else store.users()
    dup = {n for n in names if names.count(n) > 1}
    out = []
    for name in dict.fromkeys(names):
        r = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
        if name in dup:
            r["error_code"], r["error_message"] = DuplicateResourceError.code, f"Cannot describe SCRAM credentials " \
                                                                              f"for the same user twice: {name}"
        else:
            mechs = store.mechanisms(name)
            if not mechs:
                r["error_code"], r["error_message"] = ResourceNotFoundError.code, \
                    f"Attempt to describe a user credential that does not exist: {name}"
            r["credential_infos"] = [{"mechanism": SCRAM_CODE[m], "iterations": i} for m, i in mechs.items()]
        out.append(r)
    return answer(0, None, out)


def alter_user_scram_credentials(s, ctx, header, frame, offset):
    req = request_body(ctx, header, frame, offset)
    users = [d["name"] for d in req["deletions"]] + [u["name"] for u in req["upsertions"]]
    if not_allowed(s, ctx, "ALTER", "CLUSTER", security.CLUSTER_NAME):
        return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": [
            {"user": u, "error_code": CLUSTER_DENIED, "error_message": f"{ctx.principal} may not alter credentials"}
            for u in dict.fromkeys(users)]})
    store = _credentials(s)
    # Kafka refuses a user named more than once in one request (deletions and upsertions together, whatever the
    # mechanisms): every alteration of that user fails with DUPLICATE_RESOURCE
    dup_users = {u for u in users if users.count(u) > 1}
    errors: dict[str, tuple[int, str]] = {u: (DuplicateResourceError.code, "A user credential cannot be altered "
                                              "twice in the same request") for u in dup_users}
    work = []
    for d in req["deletions"]:
        if d["name"] in errors:
            continue
        if d["mechanism"] not in SCRAM_MECHANISM:
            errors[d["name"]] = (UnsupportedSaslMechanismError.code, f"Unknown SCRAM mechanism {d['mechanism']}")
        elif not d["name"]:
            errors[d["name"]] = (UnacceptableCredentialError.code, "Username must not be empty")
        elif SCRAM_MECHANISM[d["mechanism"]] not in store.mechanisms(d["name"]):
            errors[d["name"]] = (ResourceNotFoundError.code, "Attempt to delete a user credential that does not "
                                                             "exist")
        else:
            work.append(("delete", d))
    for u in req["upsertions"]:
        if u["name"] in errors:
            continue
        if u["mechanism"] not in SCRAM_MECHANISM:
            errors[u["name"]] = (UnsupportedSaslMechanismError.code, f"Unknown SCRAM mechanism {u['mechanism']}")
        elif not u["name"]:
            errors[u["name"]] = (UnacceptableCredentialError.code, "Username must not be empty")
        elif not security.MIN_ITERATIONS <= u["iterations"] <= security.MAX_ITERATIONS:
            errors[u["name"]] = (UnacceptableCredentialError.code,
                                 f"Iterations {u['iterations']} must be between {security.MIN_ITERATIONS} and "
                                 f"{security.MAX_ITERATIONS}")
        elif not u["salt"] or not u["salted_password"]:
            errors[u["name"]] = (UnacceptableCredentialError.code, "Salt and salted password must not be empty")
        else:
            work.append(("upsert", u))
    work = [(kind, x) for kind, x in work if x["name"] not in errors]

    def apply():
        for kind, x in work:
            mech = SCRAM_MECHANISM[x["mechanism"]]
            if kind == "delete":
                store.remove_credential(x["name"], mech)
            else:
                store.set_credential(x["name"], mech, bytes(x["salt"]), bytes(x["salted_password"]), x["iterations"])
    if work:
        yield s.loop.run_in_executor(None, apply)
        log.info("SCRAM credentials of %s altered by %s", sorted({x["name"] for _, x in work}), ctx.peer)
    out = []
    for u in dict.fromkeys(users):
        code, message = errors.get(u, (0, None))
        out.append({"user": u, "error_code": code, "error_message": message})
    return respond(header, {"throttle_time_ms": ctx.throttle_time_ms, "results": out})


HANDLERS = {
    15: describe_groups, 16: list_groups, 29: describe_acls, 30: create_acls, 31: delete_acls,
    32: describe_configs, 33: alter_configs, 35: describe_log_dirs, 37: create_partitions, 42: delete_groups,
    44: incremental_alter_configs, 47: offset_delete, 50: describe_user_scram_credentials,
    51: alter_user_scram_credentials, 60: describe_cluster, 75: describe_topic_partitions, 43: elect_leaders,
    45: alter_partition_reassignments, 46: list_partition_reassignments,
}

# versions served (and advertised): the ranges Kafka 4's clients and tools use, flexible versions included
VERSIONS = {
    15: (0, 6), 16: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 35: (1, 5), 37: (0, 3),
    42: (0, 3), 44: (0, 1), 47: (0, 0), 50: (0, 0), 51: (0, 0), 60: (0, 2), 75: (0, 0),
    43: (0, 2), 45: (0, 1), 46: (0, 0),
}

__all__ = ["HANDLERS", "VERSIONS"]
