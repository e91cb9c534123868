"""bench/broker.py's client throughput: confluent-kafka, kafka-python and aiokafka producing N records to one
partition and consuming them back (b1, b2 and k1), the brokers alternating run by run; the topic helpers the other
sections use."""

from __future__ import annotations

import asyncio
import time
import uuid

from harness import MB, Measure, best_by_rate

from .procs import BrokerProcess

VALUE_BYTES = 100
WARMUP = 10_000
DEADLINE_S = 300  # per timed phase: a stuck broker ends the row, not the run

def values(n: int):
    """n distinct 100-byte values (made once, outside the timed region)."""
    pad = b"." * VALUE_BYTES
    return [(b"%012d|" % i + pad)[:VALUE_BYTES] for i in range(n)]



def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Free what a run stored (Tansu holds it in memory, kafkalog on the scratch disk)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4})
    for f in admin.delete_topics(topics, operation_timeout=30, request_timeout=30).values():
        f.result(timeout=60)


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 4})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30, request_timeout=30)[topic].result(timeout=60)


def ck_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from confluent_kafka import Producer
    # no per-record delivery callback (a Python call per record would be the client's cost, not the broker's);
    # the consume phase checks that every record arrived, once, in order
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5,
                  "batch.size": 65536, "acks": 1, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "error_cb": errors.append})
    p.list_topics(topic, timeout=30)  # connected, metadata known: setup stays outside the timed region
    produce, poll = p.produce, p.poll
    with timed:
        for i, v in enumerate(vals):
            try:
                produce(topic, v, partition=0)
            except BufferError:
                poll(0.01)
                produce(topic, v, partition=0)
            if not i % 10_000:
                poll(0)
        left = p.flush(DEADLINE_S)
    if left or errors:
        raise RuntimeError(f"{left} records not delivered; errors: {errors[:3]}")


def ck_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from confluent_kafka import Consumer, TopicPartition
    # a local queue that holds the whole run: with librdkafka's defaults (queued.min.messages 100000) the fetcher
    # stops for fetch.queue.backoff.ms (1 s) whenever the queue is full, and both brokers then measure the same
    # ~150k msg/s of client-side sleep (fetch.queue.backoff.ms=0 instead makes the fetcher spin on a CPU)
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "bench-" + topic,
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "queued.min.messages": max(n, 100_000), "queued.max.messages.kbytes": 2_097_151})
    try:
        c.list_topics(topic, timeout=30)  # connected, metadata known (its value is not checked: Tansu's is off)
        got, last, end = 0, -1, time.monotonic() + DEADLINE_S
        with timed:
            c.assign([TopicPartition(topic, 0, 0)])
            while got < n:
                if time.monotonic() > end:
                    raise RuntimeError(f"consumed {got} of {n} within {DEADLINE_S} s")
                for m in c.consume(num_messages=10_000, timeout=1.0):
                    if m.error() is not None:
                        raise RuntimeError(str(m.error()))
                    got += 1
                    last = m.offset()
        check_last(last, n)
    finally:
        c.close()


def check_last(last: int, n: int) -> None:
    if last != n - 1:  # n records counted and the last at offset n-1: none lost, none twice
        raise RuntimeError(f"the {n}th record consumed has offset {last}, not {n - 1}")


def kp_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=65536, acks=1,
                      max_block_ms=DEADLINE_S * 1000)
    try:
        p.partitions_for(topic)
        send = p.send
        with timed:
            for v in vals:
                send(topic, value=v, partition=0)
            p.flush(timeout=DEADLINE_S)
    finally:
        p.close(timeout=30)


def kp_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.end_offsets([tp])  # loads the topic's metadata before the clock starts (value unchecked: Tansu's is off)
        c.seek(tp, 0)
        got, last, end = 0, -1, time.monotonic() + DEADLINE_S
        with timed:
            while got < n:
                if time.monotonic() > end:
                    raise RuntimeError(f"consumed {got} of {n} within {DEADLINE_S} s")
                for recs in c.poll(timeout_ms=1000, max_records=10_000).values():
                    got += len(recs)
                    last = recs[-1].offset
        check_last(last, n)
    finally:
        c.close()


def aio_produce(bootstrap: str, topic: str, vals, timed) -> None:
    from aiokafka import AIOKafkaProducer

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=65536, acks=1)
        await p.start()
        try:
            await p.partitions_for(topic)
            pending = []
            with timed:
                for v in vals:
                    pending.append(await p.send(topic, value=v, partition=0))
                    if len(pending) >= 20_000:  # bound the futures held, as an app would
                        await asyncio.gather(*pending)
                        pending.clear()
                await asyncio.gather(*pending)
        finally:
            await p.stop()
    asyncio.run(asyncio.wait_for(go(), DEADLINE_S))


def aio_consume(bootstrap: str, topic: str, n: int, timed) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.end_offsets([tp])
            c.seek(tp, 0)
            got, last = 0, -1
            with timed:
                while got < n:
                    for recs in (await c.getmany(timeout_ms=1000, max_records=10_000)).values():
                        got += len(recs)
                        last = recs[-1].offset
            check_last(last, n)
        finally:
            await asyncio.sleep(0)  # aiokafka: stop() right after start() re-raises a never-run task's cancel
            await c.stop()
    asyncio.run(asyncio.wait_for(go(), DEADLINE_S))


CLIENTS = {
    "confluent": (ck_produce, ck_consume),
    "kafka-python": (kp_produce, kp_consume),
    "aiokafka": (aio_produce, aio_consume),
}


class NoClock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def run_client(client: str, broker: BrokerProcess, n: int, vals, warm) -> dict:
    """Warm up on one topic, then produce n records to a fresh topic and consume them back; both timed."""
    produce, consume = CLIENTS[client]
    tag = uuid.uuid4().hex[:6]
    warm_topic, topic = f"warm-{client}-{tag}", f"bench-{client}-{tag}"
    create_topic(broker.bootstrap, warm_topic)
    try:
        produce(broker.bootstrap, warm_topic, warm, NoClock())
        consume(broker.bootstrap, warm_topic, len(warm), NoClock())
        create_topic(broker.bootstrap, topic)
        out = {}
        for phase, fn, arg in (("produce", produce, vals[:n]), ("consume", consume, n)):
            m = Measure(broker)
            fn(broker.bootstrap, topic, arg, m)
            out[phase] = {"records": n, "seconds": m.seconds, "msg_s": n / m.seconds,
                          "mb_s": n * VALUE_BYTES / MB / m.seconds, "client_cpu_s": m.client_cpu,
                          "broker_cpu_s": m.broker_cpu}
        return out
    finally:
        if broker.alive():
            try:
                delete_topics(broker.bootstrap, [warm_topic, topic])
            except Exception:  # best effort: a topic that was never created, a broker that went away
                pass



def best_of(runs: list[dict]) -> dict:
    """Per phase, the run with the highest rate (the one least disturbed by other work on the machine)."""
    out = {}
    for phase in ("produce", "consume"):
        rates = [r[phase] for r in runs if phase in r]
        if rates:
            out[phase] = best_by_rate(rates)
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "bench-offsets"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()



def run_clients(brokers: dict, clients: list, report: dict) -> None:
    """b1, b2 and k1: (client, records, runs) each, the brokers alternating run by run; Kafka joins confluent-kafka
    only (b2's goal is about kafkalog's CPU; Tansu stays beside it as before). Best of the runs per phase."""
    res, notes = report["results"], report["notes"]
    if not clients:
        return
    warm = values(WARMUP)
    big = values(max(n for _, n, _ in clients))
    for client, n, repeat in clients:
        targets = {name: b for name, b in brokers.items() if client == "confluent" or name != "kafka"}
        runs: dict[str, list] = {name: [] for name in targets}
        for r in range(repeat):
            for name, b in targets.items():
                if not b.alive():
                    continue
                print(f"  {client} x {n:,} on {name} (run {r + 1}/{repeat}) ...", flush=True)
                try:
                    runs[name].append(run_client(client, b, n, big, warm))
                except Exception as e:  # one broker failing a row must not end the run
                    notes.append(b.failure(f"{client} on {name}", e, "; its remaining rows are skipped"))
        for name, rs in runs.items():
            if rs:
                res[f"{client}/{name}"] = best_of(rs)
