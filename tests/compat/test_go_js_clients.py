"""Go and JavaScript clients against Apache Kafka 4.4.0 and `kafkalog serve`: franz-go (kgo + kadm), IBM/sarama and
KafkaJS, each running the same scenario on both brokers (tests/compat/go, tests/compat/js; built and installed into
the lab's cache by ``.ci/lab-clients``, run here on a fresh machine when needed).

The scenario, per client and broker (a topic and a group of its own):

1. ``produce 6 0``: create the topic (3 partitions) with the client's admin API, produce k0..k5 (keyed, 2 headers);
2. ``consume 6``: consume them in the group, commit, describe/list the group while the member runs, leave, describe
   it again (Empty) and fetch its committed offsets;
3. ``admin``: list groups, describe the group, fetch its offsets, list topics, end offsets;
4. ``produce 4 6`` then ``consume 4``: the group resumes from its commit (the 4 new records, none of the old);
5. KafkaJS only: ``reset`` (admin.resetOffsets earliest) then ``consume 10`` (all of them again), ``partitions``
   (admin.createPartitions to 4), ``configs`` (admin.describeConfigs); Go clients only: ``delete-offsets``
   (OffsetDelete of partition 0 in the empty group, then fetch its offsets);
6. ``delete-group``: delete the group, list groups (it is gone).

Each program prints one JSON object per line; a failed call is ``{"op": ..., "error": ...}``. The tests assert
Kafka's behaviour on each broker (``target``), and ``test_same_answers_as_kafka`` compares kafkalog's answers with
Kafka's field by field (offsets, high watermarks, group states and assignments, committed offsets, configs).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import pytest

from .lab import LabError, assert_same, lab_client_commands

LAB_TEST_DEADLINE_S = 60   # test bodies only assert on cached runs; the runs themselves are bounded below
CLIENTS = ("franz", "sarama", "kafkajs")
RUN_TIMEOUT_S = 120        # one program run (each program also stops itself after 90 s)
FIRST, SECOND = 6, 4       # records of the first and second produce


# -- building the clients ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client_commands():
    """{client: argv prefix}: the Go programs and kafkajs of .ci/lab-clients (lab.lab_client_commands)."""
    try:
        return lab_client_commands()
    except LabError as e:
        pytest.fail(str(e), pytrace=False)


# -- running the scenario ----------------------------------------------------------------------------------------

@dataclass
class Step:
    name: str
    argv: list
    returncode: int | None = None
    lines: list = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    skipped_because: str = ""   # a step after a failed one it depends on: its tests fail with this reason

    def describe(self) -> str:
        return (f"step {self.name} ({' '.join(map(str, self.argv[-5:]))}): exit {self.returncode} after "
                f"{self.seconds:.1f} s\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


@dataclass
class Scenario:
    client: str
    broker: str
    topic: str
    group: str
    steps: dict = field(default_factory=dict)

    def step(self, name: str) -> Step:
        assert name in self.steps, f"{self.client} on {self.broker}: step {name} never ran"
        s = self.steps[name]
        if s.skipped_because:
            pytest.fail(f"{self.client} on {self.broker}: step {name} not run: {s.skipped_because}", pytrace=False)
        return s

    def all(self, name: str, op: str, phase: str | None = None) -> list[dict]:
        s = self.step(name)
        return [ln for ln in s.lines if ln.get("op") == op and (phase is None or ln.get("phase") == phase)]

    def result(self, name: str, op: str, phase: str | None = None) -> dict:
        """The one successful ``op`` line of a step (failing the test with the error or the whole output)."""
        found = self.all(name, op, phase)
        s = self.steps[name]
        what = f"{self.client} on {self.broker}: {op}{'[' + phase + ']' if phase else ''} in step {name}"
        if not found:
            pytest.fail(f"{what}: no answer\n{s.describe()}", pytrace=False)
        errors = [ln["error"] for ln in found if "error" in ln]
        if errors:
            pytest.fail(f"{what} failed: {errors[0]}", pytrace=False)
        assert len(found) == 1, f"{what}: {len(found)} answers\n{s.describe()}"
        return found[0]

    def ok(self, name: str) -> bool:
        s = self.steps.get(name)
        return s is not None and not s.skipped_because and s.returncode == 0


def run_step(sc: Scenario, argv_prefix: list, bootstrap: str, name: str, mode: str, *args) -> Step:
    argv = [*argv_prefix, bootstrap, sc.topic, sc.group, mode, *map(str, args)]
    step = Step(name, argv)
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1"))
        step.returncode, step.stdout, step.stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:   # subprocess.run killed it
        step.returncode = -9
        step.stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        step.stderr = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")) + \
            f"\n(killed after {RUN_TIMEOUT_S} s)"
    step.seconds = time.monotonic() - t0
    for raw in step.stdout.splitlines():
        try:
            step.lines.append(json.loads(raw))
        except ValueError:
            step.lines.append({"op": "unparsed", "error": f"not JSON: {raw!r}"})
    sc.steps[name] = step
    return step


def skip_step(sc: Scenario, name: str, reason: str) -> None:
    sc.steps[name] = Step(name, [], skipped_because=reason)


def committed_and_ok(sc: Scenario, name: str) -> bool:
    s = sc.steps.get(name)
    return s is not None and not s.skipped_because and any(ln.get("op") == "commit" for ln in s.lines)


def run_scenario(client: str, argv_prefix: list, broker: str, bootstrap: str) -> Scenario:
    tag = uuid.uuid4().hex[:8]
    sc = Scenario(client, broker, topic=f"gojs-{client}-{tag}", group=f"gojs-{client}-group-{tag}")
    run = lambda name, mode, *args: run_step(sc, argv_prefix, bootstrap, name, mode, *args)  # noqa: E731
    run("produce1", "produce", FIRST, 0)
    if not sc.ok("produce1"):
        for name in ("consume1", "admin", "produce2", "consume2", "reset", "consume3", "partitions", "configs",
                     "delete-offsets", "delete"):
            skip_step(sc, name, f"the first produce failed:\n{sc.steps['produce1'].describe()}")
        return sc
    run("consume1", "consume", FIRST)
    run("admin", "admin")
    run("produce2", "produce", SECOND, FIRST)
    if committed_and_ok(sc, "consume1"):
        run("consume2", "consume", SECOND)
    else:
        skip_step(sc, "consume2", f"the first consume did not commit:\n{sc.steps['consume1'].describe()}")
    if client == "kafkajs":
        run("reset", "reset")
        if any(ln.get("op") == "reset_offsets" and "error" not in ln for ln in sc.steps["reset"].lines):
            run("consume3", "consume", FIRST + SECOND)
        else:
            skip_step(sc, "consume3", f"admin.resetOffsets failed:\n{sc.steps['reset'].describe()}")
        run("partitions", "partitions")
        run("configs", "configs")
    else:
        run("delete-offsets", "delete-offsets")
    run("delete", "delete-group")
    return sc


_scenarios: dict = {}


def scenario_for(client: str, commands: dict, target) -> Scenario:
    key = (client, target.name)
    if key not in _scenarios:
        _scenarios[key] = run_scenario(client, commands[client], target.name, target.bootstrap)
        took = sum(s.seconds for s in _scenarios[key].steps.values())
        print(f"{client} scenario on {target.name}: {took:.1f} s")
    return _scenarios[key]


@pytest.fixture
def scenario(client, client_commands, target):
    return scenario_for(client, client_commands, target)


# -- expectations --------------------------------------------------------------------------------------------------

def produced(sc: Scenario, name: str) -> list[dict]:
    sc.result(name, "create_topic")
    recs = sc.all(name, "produced")
    errors = [ln["error"] for ln in sc.step(name).lines if "error" in ln]
    assert not errors, f"{sc.client} on {sc.broker}: step {name} failed: {errors[0]}"
    return recs


def per_partition_counts(recs) -> dict:
    counts = {"0": 0, "1": 0, "2": 0}
    for r in recs:
        counts[str(r["partition"])] += 1
    return counts


def expected_records(sc: Scenario, recs) -> set:
    """(key, value, idx header, client header, partition, offset) of what the produce step reported."""
    return {(r["key"], f"{sc.client}-v{r['key'][1:]}", r["key"][1:], sc.client, r["partition"], r["offset"])
            for r in recs}


def consumed_records(sc: Scenario, name: str) -> list:
    out = []
    for r in sc.all(name, "record"):
        out.append((r["key"], r["value"], r["headers"].get("idx"), r["headers"].get("client"), r["partition"],
                    r["offset"]))
    return out


def check_consumed(sc: Scenario, name: str, recs) -> None:
    s = sc.step(name)
    errors = [ln for ln in s.lines if "error" in ln and ln["op"] in ("fetch", "consume", "consumer_error",
                                                                      "consumer_crash", "fatal", "timeout")]
    assert not errors, f"{sc.client} on {sc.broker}: step {name} reported {errors}\n{s.describe()}"
    got = consumed_records(sc, name)
    want = expected_records(sc, recs)
    assert len(got) == len(set(got)), f"{sc.client} on {sc.broker}: step {name} got duplicates: {got}"
    assert set(got) == want, (f"{sc.client} on {sc.broker}: step {name} consumed\n  {sorted(got)}\nexpected\n  "
                              f"{sorted(want)}\n{s.describe()}")
    for p in range(3):   # each partition in offset order
        offs = [g[5] for g in got if g[4] == p]
        assert offs == sorted(offs), f"{sc.client} on {sc.broker}: partition {p} out of order: {offs}"
    assert sc.result(name, "consumed")["count"] == len(want)


def end_offsets_after(recs) -> dict:
    return per_partition_counts(recs)


# -- per-broker tests: Kafka's behaviour ---------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_produce_reports_partitions_and_offsets(client, scenario):
    sc = scenario
    first = produced(sc, "produce1")
    assert [r["key"] for r in first] == [f"k{i}" for i in range(FIRST)]
    for p, n in per_partition_counts(first).items():   # a fresh topic: each partition's offsets run 0, 1, ...
        assert [r["offset"] for r in first if str(r["partition"]) == p] == list(range(n)), first
    assert sc.result("produce1", "end_offsets")["offsets"] == end_offsets_after(first)

    second = produced(sc, "produce2")
    assert sc.result("produce2", "create_topic").get("exists") is True, "the second create must find the topic"
    assert [r["key"] for r in second] == [f"k{i}" for i in range(FIRST, FIRST + SECOND)]
    before = per_partition_counts(first)
    for p, n in per_partition_counts(second).items():  # offsets go on from the first produce's high watermark
        assert [r["offset"] for r in second if str(r["partition"]) == p] == list(range(before[p], before[p] + n))
    assert sc.result("produce2", "end_offsets")["offsets"] == end_offsets_after(first + second)


@pytest.mark.parametrize("client", CLIENTS)
def test_group_consumes_and_commits(client, scenario):
    sc = scenario
    first = produced(sc, "produce1")
    check_consumed(sc, "consume1", first)
    sc.result("consume1", "commit")
    assert sc.result("consume1", "fetch_offsets", "after")["offsets"] == end_offsets_after(first)


@pytest.mark.parametrize("client", CLIENTS)
def test_second_run_resumes_from_commit(client, scenario):
    sc = scenario
    first, second = produced(sc, "produce1"), produced(sc, "produce2")
    check_consumed(sc, "consume2", second)   # the new records only: nothing of the first run again
    sc.result("consume2", "commit")
    assert sc.result("consume2", "fetch_offsets", "after")["offsets"] == end_offsets_after(first + second)


@pytest.mark.parametrize("client", CLIENTS)
def test_group_listed_and_described_while_running(client, scenario):
    sc = scenario
    listed = [g for g in sc.result("consume1", "list_groups", "running")["groups"] if g["group"] == sc.group]
    assert len(listed) == 1, f"{sc.group} not among the listed groups"
    assert listed[0]["protocol_type"] == "consumer"
    if "state" in listed[0]:
        assert listed[0]["state"] == "Stable"
    d = sc.result("consume1", "describe_group", "running")
    assert (d["group"], d["state"], d["protocol_type"]) == (sc.group, "Stable", "consumer"), d
    assert d["protocol"], d
    assert len(d["members"]) == 1, d
    m = d["members"][0]
    assert m["client_id"] == f"compat-{client}"
    assert m["member_id"].startswith(f"compat-{client}-"), m   # KIP-394: client id + "-" + uuid
    assert m["assigned"] == {sc.topic: [0, 1, 2]}, m


@pytest.mark.parametrize("client", CLIENTS)
def test_group_empty_after_leaving(client, scenario):
    sc = scenario
    first = produced(sc, "produce1")
    d = sc.result("consume1", "describe_group", "after")
    assert (d["group"], d["state"], d["protocol_type"], d["members"]) == (sc.group, "Empty", "consumer", []), d
    listed = [g for g in sc.result("admin", "list_groups")["groups"] if g["group"] == sc.group]
    assert len(listed) == 1 and listed[0]["protocol_type"] == "consumer", listed
    if "state" in listed[0]:
        assert listed[0]["state"] == "Empty"
    d = sc.result("admin", "describe_group")
    assert (d["state"], d["members"]) == ("Empty", []), d
    assert sc.result("admin", "fetch_offsets")["offsets"] == end_offsets_after(first)
    assert sc.result("admin", "list_topics")["topics"].get(sc.topic) == 3
    assert sc.result("admin", "end_offsets")["offsets"] == end_offsets_after(first)


@pytest.mark.parametrize("client", CLIENTS)
def test_delete_group(client, scenario):
    sc = scenario
    d = sc.result("delete", "delete_group")
    if "results" in d:   # KafkaJS answers per group
        assert d["results"] == [{"group": sc.group, "error_code": 0}], d
    listed = [g["group"] for g in sc.result("delete", "list_groups", "after")["groups"]]
    assert sc.group not in listed


@pytest.mark.parametrize("client", ["franz", "sarama"])
def test_delete_committed_offset(client, scenario):
    sc = scenario
    recs = produced(sc, "produce1") + produced(sc, "produce2")
    sc.result("delete-offsets", "delete_offsets")
    after = sc.result("delete-offsets", "fetch_offsets", "after_delete")["offsets"]
    kept = end_offsets_after(recs)
    del kept["0"]
    # partition 0 has no committed offset any more: absent from a fetch of all (franz), -1 when asked for (sarama)
    assert after.get("0", -1) == -1 and {p: o for p, o in after.items() if p != "0"} == kept, after


@pytest.mark.parametrize("client", ["kafkajs"])
def test_kafkajs_reset_offsets(client, scenario):
    sc = scenario
    first, second = produced(sc, "produce1"), produced(sc, "produce2")
    sc.result("reset", "reset_offsets")
    after = sc.result("reset", "fetch_offsets", "after_reset")["offsets"]
    assert sorted(after) == ["0", "1", "2"] and all(o <= 0 for o in after.values()), after
    check_consumed(sc, "consume3", first + second)   # everything again, from the start
    sc.result("consume3", "commit")
    assert sc.result("consume3", "fetch_offsets", "after")["offsets"] == end_offsets_after(first + second)


@pytest.mark.parametrize("client", ["kafkajs"])
def test_kafkajs_create_partitions(client, scenario):
    sc = scenario
    recs = produced(sc, "produce1") + produced(sc, "produce2")
    sc.result("partitions", "create_partitions")
    assert sc.result("partitions", "topic_metadata")["partitions"] == [0, 1, 2, 3]
    assert sc.result("partitions", "end_offsets")["offsets"] == {**end_offsets_after(recs), "3": 0}


@pytest.mark.parametrize("client", ["kafkajs"])
def test_kafkajs_describe_configs(client, scenario):
    sc = scenario
    d = sc.result("configs", "describe_configs")
    assert (d["error_code"], d["resource"]) == (0, sc.topic), d
    assert sorted(d["configs"]) == ["cleanup.policy", "max.message.bytes", "retention.ms"], d
    assert d["configs"]["cleanup.policy"]["value"] == "delete", d   # created without configs: the default
    assert all(c["value"] not in (None, "") for c in d["configs"].values()), d
    assert int(d["configs"]["retention.ms"]["value"]) != 0 and int(d["configs"]["max.message.bytes"]["value"]) > 0


# -- kafkalog's answers against Kafka's ----------------------------------------------------------------------------

def digest(sc: Scenario) -> dict:
    """Everything a step answered, names normalized (TOPIC, GROUP), ids and other groups/topics left out."""
    def norm(v):
        if isinstance(v, str):
            return v.replace(sc.group, "GROUP").replace(sc.topic, "TOPIC")
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {norm(k): norm(x) for k, x in v.items()}
        return v

    out = {}
    for name, s in sc.steps.items():
        if s.skipped_because:
            out[name] = "not run"
            continue
        answers = {}
        for ln in s.lines:
            ln = copy.deepcopy(ln)
            if ln.get("op") == "list_groups" and "groups" in ln:
                ln["groups"] = [g for g in ln["groups"] if g["group"] == sc.group]
            if ln.get("op") == "list_topics" and "topics" in ln:
                ln["topics"] = {t: n for t, n in ln["topics"].items() if t == sc.topic}
            if ln.get("op") == "create_topic":
                ln.pop("partitions", None)   # CreateTopics v5+ echoes the count; older versions answer -1
            for m in ln.get("members") or ():
                m.pop("member_id", None)
            if ln.get("op") == "record":   # the order across partitions is the fetch's, not the broker's
                continue
            key = ln.pop("op") + (f"[{ln.pop('phase')}]" if ln.get("phase") else "")
            ln.pop("phase", None)
            answers.setdefault(key, []).append(norm(ln))
        answers = {k: v[0] if len(v) == 1 else v for k, v in answers.items()}
        out[name] = {"exit": s.returncode, **answers, "records": sorted(map(norm, consumed_records(sc, name)))}
    return out


@pytest.fixture
def both_scenarios(client, client_commands, targets):
    return {name: scenario_for(client, client_commands, t) for name, t in targets.items()}


@pytest.mark.parametrize("client", CLIENTS)
def test_same_answers_as_kafka(client, both_scenarios):
    assert_same(digest(both_scenarios["kafka"]), digest(both_scenarios["kafkalog"]), what=f"{client}'s answers")
