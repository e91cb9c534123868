"""Kafka Streams 4.4 with static membership (KIP-345, `group.instance.id`) against Apache Kafka 4.4.0 and `kafkalog
serve` (issue 24): a restart within the session timeout triggers no rebalance, as on Kafka.

The app is test_streams_eos.py's word count (tests/compat/java/streams/StreamsWordCount.java) at at_least_once, with
STREAMS_GROUP_INSTANCE_ID set (static members "a" and "b") and a 30 s session. Per broker: A and B share the 6 tasks
and are RUNNING; A is stopped (SIGTERM: Kafka Streams closes and, as a static member, sends no LeaveGroup) and
started again under the same instance id; it must come back RUNNING with the tasks it had, and B must see no state
change at all (a rebalance would take B through REBALANCING). The two brokers' answers are compared. Every wait is a
bounded number of polls of the instances' event lines.
"""

from __future__ import annotations

import time
import uuid

import pytest

from .lab import assert_same
from .test_streams_eos import INPUT_PARTITIONS, OUTPUT_PARTITIONS, Instance, app_classes  # noqa: F401

LAB_TEST_DEADLINE_S = 240
POLLS = 600  # 0.2 s each: a failure guard, never a measure
ENV = {"STREAMS_PROCESSING_GUARANTEE": "at_least_once", "STREAMS_SESSION_TIMEOUT_MS": "30000"}


def _wait(pred, what: str, instances) -> None:
    for _ in range(POLLS):
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}\n" + "\n".join(i.log_text(2500) for i in instances))


def _running_with_tasks(i: Instance) -> bool:
    state, tasks = i.latest_tasks()
    return state == "RUNNING" and bool(tasks)


def restart_scenario(target, classes, workdir) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    run = uuid.uuid4().hex[:8]
    app_id, inp, outp = f"static-{run}-app", f"static-{run}-in", f"static-{run}-out"
    admin = AdminClient({"bootstrap.servers": target.bootstrap, "broker.address.family": "v4"})
    for f in admin.create_topics([NewTopic(inp, INPUT_PARTITIONS, 1), NewTopic(outp, OUTPUT_PARTITIONS, 1)],
                                 operation_timeout=15).values():
        f.result(timeout=20)
    started = []

    def start(name: str, instance: str) -> Instance:
        i = Instance(classes, target.bootstrap, app_id, workdir / target.name, name, (inp, outp),
                     env=dict(ENV, STREAMS_GROUP_INSTANCE_ID=instance))
        started.append(i)
        return i

    try:
        a, b = start("A", "a"), start("B", "b")
        _wait(lambda: _running_with_tasks(a) and _running_with_tasks(b)
              and len(a.latest_tasks()[1] | b.latest_tasks()[1]) == 6
              and not (a.latest_tasks()[1] & b.latest_tasks()[1]),
              f"[{target.name}] A and B never shared the 6 tasks RUNNING", started)
        a_tasks = sorted(a.latest_tasks()[1])
        b_seen = len(b.lines)
        a.stop()
        a2 = start("A2", "a")
        _wait(lambda: _running_with_tasks(a2), f"[{target.name}] the restarted A never ran", started)
        for _ in range(15):  # B's heartbeats (every 1 s... 3 s) would bring a rebalance to it by now
            time.sleep(0.2)
        # which 3 of the 6 tasks A has is the Streams leader's choice (by the instances' random process ids): the
        # brokers are compared on A keeping the ones it had
        a_after = sorted(a2.latest_tasks()[1])
        return {"A's task count": len(a_tasks), "A keeps its tasks": a_after == a_tasks,
                "A's tasks": (a_tasks, a_after),
                "B's events after the restart": [(d["event"], d.get("old"), d.get("new")) for d in b.lines[b_seen:]
                                                 if d["event"] == "state"],
                "errors": [d for i in started for d in i.errors()]}
    finally:
        for i in started:
            i.stop()


@pytest.mark.slow  # two Kafka Streams JVMs and a restart per broker (~25 s each)
def test_a_static_streams_instance_restarts_without_a_rebalance(targets, app_classes, tmp_path):  # noqa: F811
    answers = {name: restart_scenario(t, app_classes, tmp_path) for name, t in targets.items()}
    k = answers["kafka"]
    assert k["A keeps its tasks"] and not k["B's events after the restart"], k
    assert_same(k, answers["kafkalog"], ignore=("A's tasks",), what="a static Kafka Streams instance restarted")
