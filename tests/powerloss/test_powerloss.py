"""Power-loss tests: real workloads on plfs (a FUSE file system that keeps only what was fsynced), killed at random
moments together with the file system, then mounted again and held to every durability promise that returned.

Checks after each power loss (README, "What is durable when"): every record whose durable call returned is present
and byte-identical at its offset (unless below an acknowledged log start); the log start never goes back below an
acknowledged delete-before or retention; committed offsets never go back; a created topic exists, a deleted one does
not; every record reads back CRC-clean; ``kafkalog check`` exits 0; the store reopens and takes appends. On a
compacted topic (K and G lines, check_compaction): the latest acknowledged record of every key survives (or a later
one of that key), every acknowledged record still there is byte-identical, and a record that a returned cleaning
removed never comes back.

``KAFKALOG_POWERLOSS_SEED`` replays a run; the seed is in every failure message.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kafkalog
from kafkalog import TopicPartition

from .conftest import children

HERE = Path(__file__).resolve().parent
SEED = int(os.environ.get("KAFKALOG_POWERLOSS_SEED", str(random.SystemRandom().randrange(2**31))))


def _load_txncheck():
    """tests/txncheck.py (the transaction checks this file shares with tests/storage/test_txn_torture.py), one copy
    per process."""
    name = "kafkalog_test_txncheck"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE.parent / "txncheck.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


check_transactions = _load_txncheck().check_transactions

CASES = {
    "exclusive": [("exclusive", 0)],
    "shared-writers": [("shared", 0), ("shared", 1), ("shared", 2)],
    "shared-retention": [("shared", 1), ("shared", 2), ("retention", 0)],
    "preallocated-writers": [("prealloc", 0), ("prealloc", 1), ("prealloc", 2)],
    "producer-acks-all": [("producer", 0), ("producer", 1)],
    "consumer-commits": [("consumer", 0), ("consumer", 1)],
    "durable-queue": [("queue", 0), ("queue", 1)],
    "topics-create-delete": [("topics", 0), ("topics", 1)],
    "broker-acks-all": [("broker", 0), ("kafka_producer", 1), ("kafka_producer", 2)],
    "broker-static-group": [("broker", 0), ("static_group", 1), ("kip848_group", 2)],
    "broker-share-group": [("broker", 0), ("share_member", 1)],
    "compaction": [("compact", 0), ("compact", 1)],
    "transactions": [("txn", 0), ("txn", 1)],
    "transactions-ending": [("txn", 0), ("txn", 1)],
    "transactions-adding": [("txn", 0), ("txn", 1)],
}
# the soak's alone (each default case costs seconds of the default suite)
SOAK_ONLY = {"transactions-adding"}
# a case whose round must not end before its workloads wrote an acknowledgement of this kind (the compaction checks
# are empty until a cleaning returned; "transactions-ending" loses power right after an end_txn was called, while it
# writes its PrepareX, markers and CompleteX; "broker-static-group" right after a generation was acknowledged, before
# the member's next commit flushes the same partition; "transactions-adding" right after a transactional batch was
# flushed, its AddPartitionsToTxn record most often not fsynced yet: the coordinator's load must abort what it lost)
NEEDS = {"compaction": "G ", "transactions-ending": "XE ", "broker-static-group": "S ", "broker-share-group": "A ",
         "transactions-adding": "XR "}


def run_round(fs, acks: Path, workers, rng, env, min_acks: int = 0, need: str | None = None) -> None:
    """Start the workloads, let them run a random while, then lose power with them running (``need``: at the first
    acknowledgement line starting so written after that while, the moment its promise is newest)."""
    procs = []
    Path(str(acks) + ".port").unlink(missing_ok=True)  # the broker workload's port, from the previous round
    for name, wid in workers:
        log = open(acks.with_suffix(f".{name}{wid}.out"), "ab")
        procs.append(children.popen([sys.executable, str(HERE / "workloads.py"), name, str(fs.mnt / "data"),
                                     str(acks), str(SEED + rng.randrange(1 << 30)), str(wid)],
                                    stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    try:
        deadline = time.monotonic() + rng.uniform(0.8, 2.5)
        had = None  # (need) the acknowledgements of that kind when the while was over
        while True:
            now = time.monotonic()
            if need and had is None and now >= deadline:
                had = _count_kind(acks, need)
            if now >= deadline and _count(acks) >= min_acks and (not need or _count_kind(acks, need) > had):
                break
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, f"a workload stopped by itself (seed {SEED}): see {acks.parent}/*.out:\n" + \
                _tails(acks)
            assert now < deadline + 60, f"no acknowledgements within a minute (seed {SEED})"
            time.sleep(0.005 if had is not None else 0.05)
    finally:
        _freeze(procs)
        fs.lose_power()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)


def _freeze(procs) -> None:
    """A power loss stops every process at the same instant: stop the workloads (SIGSTOP, each seen stopped) before
    the file system goes. Killed after it instead, they would go on for a moment on a dead mount (their refreshes
    failing half way) and, once it is lazily unmounted, on the bare mount point's paths: what no real machine does
    after its power went."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGSTOP)
    for p in procs:
        for _ in range(2000):  # a process in a file system call stops when the call returns (plfs still answers)
            try:
                with open(f"/proc/{p.pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except FileNotFoundError:
                break
            if state in (b"T", b"t", b"Z", b"X"):
                break
            time.sleep(0.001)


def _count(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _count_kind(path: Path, prefix: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.startswith(prefix.encode()))
    except FileNotFoundError:
        return 0


def _tails(acks: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in acks.parent.glob("*.out"))


def read_acks(path: Path):
    records, starts, commits, topics = {}, collections.defaultdict(int), collections.defaultdict(int), {}
    if not path.exists():
        return records, starts, commits, topics
    for line in path.read_text().splitlines():
        w = line.split()
        if not w:
            continue
        if w[0] == "R" and len(w) == 5:
            records[(w[1], int(w[2]), int(w[3]))] = w[4]
        elif w[0] == "D" and len(w) == 4:
            key = (w[1], int(w[2]))
            starts[key] = max(starts[key], int(w[3]))
        elif w[0] == "C" and len(w) == 5:
            key = (w[1], w[2], int(w[3]))
            commits[key] = max(commits[key], int(w[4]))
        elif w[0] == "T" and len(w) == 3:
            topics[w[1]] = w[2]
    return records, starts, commits, topics


def read_compaction_acks(path: Path):
    """K lines: (topic, partition) -> {offset: (key, sha1 or "-")}; G lines: (topic, partition) -> [(base, end,
    mapped end)]."""
    keyed, groups = collections.defaultdict(dict), collections.defaultdict(list)
    if not path.exists():
        return keyed, groups
    for line in path.read_text().splitlines():
        w = line.split()
        if w and w[0] == "K" and len(w) == 6:
            keyed[(w[1], int(w[2]))][int(w[3])] = (w[4], w[5])
        elif w and w[0] == "G" and len(w) == 6:
            groups[(w[1], int(w[2]))].append((int(w[3]), int(w[4]), int(w[5])))
    return keyed, groups


def check_compaction(store, acks: Path) -> list[str]:
    """What the compacted topics' acknowledgements promise (the cleaner may remove a record once a later record of
    its key exists, so the K lines are not held to R's "present at its offset")."""
    keyed, groups = read_compaction_acks(acks)
    problems = []
    for (t, p), acked in sorted(keyed.items()):
        if t not in store.topics():
            problems.append(f"{t}-{p}: {len(acked)} acknowledged keyed records, the topic is gone")
            continue
        present, prev = {}, -1
        try:
            for rec in store.log(t, p).records():
                if rec.offset <= prev:
                    problems.append(f"{t}-{p}: offset {rec.offset} after {prev}")
                prev = rec.offset
                present[rec.offset] = (rec.key.decode() if rec.key is not None else None,
                                       "-" if rec.value is None else hashlib.sha1(rec.value).hexdigest())
        except kafkalog.errors.KafkaError as e:
            problems.append(f"{t}-{p}: reading failed: {e!r}")
            continue
        wrong = sorted(o for o, kv in acked.items() if o in present and present[o] != kv)
        if wrong:
            problems.append(f"{t}-{p}: {len(wrong)} records differ from what was acknowledged at their offsets "
                            f"(first {[(o, present[o], acked[o]) for o in wrong[:3]]})")
        by_key = collections.defaultdict(list)  # key -> acknowledged offsets, ascending
        for o in sorted(acked):
            by_key[acked[o][0]].append(o)
        last_present = {}
        for o, (k, _) in present.items():
            last_present[k] = max(last_present.get(k, -1), o)
        lost = sorted((k, offs[-1]) for k, offs in by_key.items() if last_present.get(k, -1) < offs[-1])
        if lost:
            problems.append(f"{t}-{p}: the latest acknowledged record of {len(lost)} keys lost (first {lost[:4]}, "
                            f"the log shows them last at {[last_present.get(k) for k, _ in lost[:4]]})")
        back = set()
        for b, e, end in groups.get((t, p), []):
            for o, (k, _) in present.items():
                if b <= o < e:
                    later = by_key.get(k, [])
                    i = bisect.bisect_right(later, o)
                    if i < len(later) and later[i] < end:
                        back.add((o, k, later[i]))
        if back:
            problems.append(f"{t}-{p}: {len(back)} records that a returned cleaning removed came back (offset, key, "
                            f"the later acknowledged record of the key: {sorted(back)[:4]})")
    return problems


def check_group_generations(store, acks: Path) -> list[str]:
    """S lines: no classic group comes back at a generation lower than one a member saw acknowledged (its
    GroupMetadata record in __consumer_offsets); K lines: no KIP-848 group at an epoch lower than a member epoch
    a heartbeat answered (its ConsumerGroupMetadata record)."""
    from kafkalog.storage.groupformat import (
        CONSUMER_GROUP_METADATA,
        decode_epoch_value,
        decode_group_metadata_value,
        encode_group_key,
    )
    acked: dict[str, int] = {}
    epochs: dict[str, int] = {}
    if acks.exists():
        for line in acks.read_text().splitlines():
            w = line.split()
            if len(w) == 3 and w[0] == "S":
                acked[w[1]] = max(acked.get(w[1], -1), int(w[2]))
            elif len(w) == 3 and w[0] == "K":
                epochs[w[1]] = max(epochs.get(w[1], -1), int(w[2]))
    problems = []
    for group, gen in sorted(acked.items()):
        value = store.offsets.group_metadata(group)
        stored = decode_group_metadata_value(value).generation if value is not None else None
        if stored is None or stored < gen:
            problems.append(f"group {group}: stored at generation {stored}, generation {gen} was acknowledged")
    for group, epoch in sorted(epochs.items()):
        value = store.offsets.group_records(group).get(encode_group_key(CONSUMER_GROUP_METADATA, group))
        stored = decode_epoch_value(value)[0] if value is not None else None
        if stored is None or stored < epoch:
            problems.append(f"consumer group {group}: stored at epoch {stored}, member epoch {epoch} was "
                            f"acknowledged")
    return problems


def check_share_states(store, acks: Path) -> list[str]:
    """A lines: every offset whose ACCEPT or REJECT a ShareFetch/ShareAcknowledge answered is done in the recovered
    share-partition state (below the acked prefix, or delivered and in no set: never to be delivered again)."""
    from kafkalog.client.queue import QUEUES_DIR, _StateFiles
    settled: dict[tuple[str, int], set] = collections.defaultdict(set)
    if acks.exists():
        for line in acks.read_text().splitlines():
            w = line.split()
            if len(w) == 4 and w[0] == "A":
                settled[(w[1], int(w[2]))].add(int(w[3]))
    problems = []
    for (t, p), offsets in sorted(settled.items()):
        files = _StateFiles(store.log(t, p).dir / QUEUES_DIR / "pl-share", writable=False)
        try:
            st, bad = files.read()
        finally:
            files.close()
        if st is None:
            problems.append(f"share group pl-share {t}-{p}: no state ({bad}), {len(offsets)} offsets were settled")
            continue
        back = sorted(o for o in offsets if o >= st.next or any(s <= o < e for d in st.sets() for s, e, _ in d.r))
        if back:
            problems.append(f"share group pl-share {t}-{p}: {len(back)} settled offsets would be delivered again "
                            f"(first {back[:5]}; prefix {st.prefix}, next {st.next})")
    return problems


def check_store(data: Path, acks: Path, env) -> list[str]:
    """Everything the acknowledgements promise, as a list of problems (empty: all kept)."""
    records, starts, commits, topics = read_acks(acks)
    problems = []
    by_partition = collections.defaultdict(dict)
    for (t, p, off), sha in records.items():
        by_partition[(t, p)][off] = sha
    with kafkalog.LogStore(data, {"lock.timeout.ms": 60000}, maintenance=False) as store:
        present = set(store.topics())
        for t, state in topics.items():
            if state == "created" and t not in present:
                problems.append(f"topic {t}: created (acknowledged) but gone")
            if state == "deleted" and t in present:
                problems.append(f"topic {t}: deleted (acknowledged) but back")
        for (t, p), expected in sorted(by_partition.items()):
            if topics.get(t) in ("deleting", "deleted"):
                continue
            if t not in present:
                problems.append(f"{t}-{p}: {len(expected)} acknowledged records, the topic is gone")
                continue
            log = store.log(t, p)
            lso, leo = log.log_start_offset, log.log_end_offset
            if lso < starts[(t, p)]:
                problems.append(f"{t}-{p}: log start {lso} went back below the acknowledged {starts[(t, p)]}")
            want = {o: s for o, s in expected.items() if o >= lso}
            if not want:
                continue
            seen = {}
            try:
                for rec in log.records(max(lso, min(want))):
                    if rec.offset in want:
                        seen[rec.offset] = hashlib.sha1(rec.value).hexdigest()
            except kafkalog.errors.KafkaError as e:
                problems.append(f"{t}-{p}: reading failed: {e!r}")
            lost = sorted(o for o in want if o not in seen)
            wrong = sorted(o for o in want if o in seen and seen[o] != want[o])
            if lost:
                problems.append(f"{t}-{p}: {len(lost)} acknowledged records lost (first {lost[:5]}, log start "
                                f"{lso}, log end {leo})")
            if wrong:
                problems.append(f"{t}-{p}: {len(wrong)} records differ from what was acknowledged at their offsets "
                                f"(first {wrong[:5]})")
        for (g, t, p), off in sorted(commits.items()):
            consumer = kafkalog.KafkaConsumer(store=store, group_id=g, enable_auto_commit=False)
            try:
                got = consumer.committed(TopicPartition(t, p))
            finally:
                consumer.close()
            if got is None or got < off:
                problems.append(f"group {g} {t}-{p}: committed offset {got}, acknowledged {off}")
        problems += check_compaction(store, acks)
        problems += check_share_states(store, acks)
        problems += check_group_generations(store, acks)
        problems += check_transactions(store, acks)
    r = children.run([sys.executable, "-m", "kafkalog", "check", str(data)], capture_output=True, text=True,
                     env=env, timeout=300)
    if r.returncode != 0:
        problems.append(f"kafkalog check exited {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
    return problems


def run_case(plfs_factory, tmp_path, env, workers, rounds, flags=(), need: str | None = None) -> list[str]:
    rng = random.Random(f"{SEED}-{workers}")
    fs = plfs_factory(flags=flags)
    acks = tmp_path / "acks" / "acks.txt"
    acks.parent.mkdir()
    problems = []
    for rnd in range(rounds):
        run_round(fs, acks, workers, rng, env, min_acks=1 if rnd == 0 else 0, need=need)
        fs.mount(flags=flags)
        problems = check_store(fs.mnt / "data", acks, env)
        if problems:
            return [f"round {rnd}: {p}" for p in problems]
    # the store keeps working after the last power loss
    with kafkalog.LogStore(fs.mnt / "data") as store:
        for t in store.topics():
            if not t.startswith("__"):
                log = store.log(t, 0)
                end = log.log_end_offset
                if "compact" in log.config["cleanup.policy"]:
                    assert log.append_batch([b"after"], keys=[b"after"]) == end  # no keyless record there
                else:
                    assert log.append_batch([b"after"]) == end
                log.flush()
    return problems


@pytest.mark.parametrize("case", [c for c in CASES if c not in SOAK_ONLY])
def test_power_loss(case, plfs, tmp_path, child_env):
    problems = run_case(plfs, tmp_path, child_env, CASES[case], rounds=2, need=NEEDS.get(case))
    assert not problems, f"{case} (seed {SEED}):\n" + "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_power_loss_soak(case, plfs, tmp_path, child_env):
    rounds = int(os.environ.get("KAFKALOG_POWERLOSS_ROUNDS", "12"))
    problems = run_case(plfs, tmp_path, child_env, CASES[case], rounds=rounds, need=NEEDS.get(case))
    assert not problems, f"{case} (seed {SEED}):\n" + "\n".join(problems)


@pytest.mark.parametrize("breakage", [["--ignore-fsync", ".log"], ["--ignore-dirsync"]])
def test_the_harness_catches_a_missing_fsync(breakage, plfs, tmp_path, child_env):
    """The harness can fail: with fsync of .log files (or of directories) silently skipped by the file system, the
    same workloads must be caught losing acknowledged records."""
    problems = run_case(plfs, tmp_path, child_env, CASES["shared-writers"], rounds=3, flags=breakage)
    assert problems, f"{breakage} went unnoticed (seed {SEED}): the power-loss checks cannot fail"
    assert any("lost" in p or "gone" in p for p in problems), problems


def test_the_harness_catches_share_states_without_fsync(plfs, tmp_path, child_env):
    """The share-group check can fail: with the fsyncs of the share-partition's state slots silently skipped by the
    file system, offsets whose ACCEPT or REJECT was answered are not done in the recovered state."""
    problems = run_case(plfs, tmp_path, child_env, CASES["broker-share-group"], rounds=2,
                        flags=["--ignore-fsync", "state.0", "--ignore-fsync", "state.1"],
                        need=NEEDS["broker-share-group"])
    assert problems, f"unsynced share states went unnoticed (seed {SEED}): the share-group check cannot fail"
    assert any("share group" in p for p in problems), problems


def test_the_harness_catches_a_cleaner_without_fsync(plfs, tmp_path, child_env):
    """The compaction checks can fail: with the fsyncs of the cleaner's ``.cleaned`` files silently skipped by the
    file system, the segments it swaps in are empty after a power loss and latest records of keys are lost."""
    def expired(signum, frame):
        raise TimeoutError(f"ran longer than 300 s (seed {SEED})")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(300)
    try:
        # one workload: another writer's first flush after its open (from the checkpointed recovery point) would
        # fsync the freshly cleaned segments under their final names, as it may, and hide the breakage; up to four
        # rounds: a round can still miss it (its first flush came after its first cleaning)
        problems = run_case(plfs, tmp_path, child_env, CASES["compaction"][:1], rounds=4,
                            flags=["--ignore-fsync", ".cleaned"], need=NEEDS["compaction"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert problems, f"unsynced .cleaned files went unnoticed (seed {SEED}): the compaction checks cannot fail"
    assert any("lost" in p for p in problems), problems


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_the_file_system_keeps_what_was_made_durable_and_nothing_else(plfs):
    """plfs itself, against the model the power-loss checks stand on: data fsynced in a file whose entry never
    became durable is gone with the entry (and never shows up in a later file: a new file whose entry a directory
    fsync made durable before its own fsync comes back empty), an unlink not covered by a directory fsync is
    undone, and a file whose data and entry were both made durable keeps exactly its fsynced bytes."""
    fs = plfs()
    kept = fs.mnt / "kept"
    kept.write_bytes(b"durable")
    with open(kept, "r+b") as f:
        os.fsync(f.fileno())
    _fsync_dir(fs.mnt)
    with open(kept, "ab") as f:
        f.write(b" and more, never fsynced")
    orphan = fs.mnt / "orphan"
    with open(orphan, "wb") as f:
        f.write(b"fsynced data under an entry that never became durable")
        f.flush()
        os.fsync(f.fileno())
    fs.lose_power()
    fs.mount()
    assert sorted(os.listdir(fs.mnt)) == ["kept"]
    assert kept.read_bytes() == b"durable"
    fresh = fs.mnt / "fresh"
    fresh.touch()
    _fsync_dir(fs.mnt)
    kept.unlink()
    fs.lose_power()
    fs.mount()
    assert sorted(os.listdir(fs.mnt)) == ["fresh", "kept"]
    assert fresh.read_bytes() == b"", "a never-fsynced file shows another file's old bytes"
    assert kept.read_bytes() == b"durable"
