// KafkaJS side of kafkalog's compatibility lab.
//
// Usage: node client.js BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]
//
// Modes (each prints one JSON object per line on stdout, "op" names what the line reports; a failed call is
// {"op": ..., "error": "..."} and the program goes on with the next step where it can; KafkaJS's own log goes
// to stderr):
//   produce N START  create TOPIC (3 partitions) with admin.createTopics, produce records START..START+N-1 keyed
//                    "k<i>" with headers, print each record's partition and offset, then admin.fetchTopicOffsets
//   consume N        consume N records in GROUP, commitOffsets, admin.describeGroups/listGroups while the member
//                    runs, disconnect, then describeGroups and fetchOffsets again
//   admin            listGroups, describeGroups, fetchOffsets, listTopics, fetchTopicOffsets
//   reset            resetOffsets({earliest: true}) on GROUP (it must be empty), then fetchOffsets
//   partitions       createPartitions (TOPIC to 4), then fetchTopicMetadata
//   configs          describeConfigs of TOPIC (cleanup.policy, retention.ms, max.message.bytes)
//   delete-group     deleteGroups([GROUP]), then listGroups
//   txn              transactions (tests/compat/test_transactions_clients.py): see txnScenario below
'use strict'

const { Kafka, logLevel, Partitioners, AssignerProtocol, ConfigResourceTypes } = require('kafkajs')

const [bootstrap, topic, group, mode] = process.argv.slice(2, 6)
const intArg = (i, def) => (process.argv.length > i ? parseInt(process.argv[i], 10) : def)
if (!mode) {
  process.stderr.write('usage: node client.js BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]\n')
  process.exit(2)
}

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const errText = (e) => {
  const parts = [`${e.name || 'Error'}: ${e.message}`]
  if (e.type) parts.push(`type=${e.type}`)
  if (e.cause && e.cause !== e) parts.push(`cause: ${errText(e.cause)}`)
  return parts.join('; ')
}
const emitErr = (op, e, extra = {}) => emit({ op, error: errText(e), ...extra })

// a hung program is the test's failure, never a hung test
setTimeout(() => {
  emit({ op: 'timeout', error: 'kafkajs program ran over 90 s' })
  process.exit(1)
}, 90000).unref()

const kafka = new Kafka({
  clientId: 'compat-kafkajs',
  brokers: [bootstrap],
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, label, log }) => {
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`)
  }
})

async function step (op, fn, extra = {}) {
  try {
    return await fn()
  } catch (e) {
    emitErr(op, e, extra)
    return undefined
  }
}

// A partition just created may not have its leader everywhere yet (Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a
// moment after CreatePartitions): retry that retriable error a bounded number of times, as a user's code would.
async function fetchTopicOffsetsRetrying (admin, attempts) {
  for (let i = 1; ; i++) {
    try {
      return await admin.fetchTopicOffsets(topic)
    } catch (e) {
      const retriable = e && (e.type === 'NOT_LEADER_FOR_PARTITION' || e.type === 'LEADER_NOT_AVAILABLE' ||
        e.type === 'UNKNOWN_TOPIC_OR_PARTITION')
      if (!retriable || i >= attempts) throw e
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
}

async function endOffsets (admin, attempts = 1) {
  await step('end_offsets', async () => {
    const offs = await fetchTopicOffsetsRetrying(admin, attempts)
    const offsets = {}
    for (const o of offs) offsets[String(o.partition)] = Number(o.high)
    emit({ op: 'end_offsets', offsets })
  })
}

async function listGroups (admin, phase) {
  await step('list_groups', async () => {
    const { groups } = await admin.listGroups()
    const out = groups.map((g) => ({ group: g.groupId, protocol_type: g.protocolType }))
    out.sort((a, b) => (a.group < b.group ? -1 : a.group > b.group ? 1 : 0))
    emit({ op: 'list_groups', phase, groups: out })
  }, { phase })
}

async function describeGroup (admin, phase) {
  await step('describe_group', async () => {
    const { groups } = await admin.describeGroups([group])
    if (groups.length !== 1) throw new Error(`describeGroups answered ${groups.length} groups`)
    const d = groups[0]
    if (d.errorCode) throw new Error(`describeGroups error code ${d.errorCode}`)
    const members = d.members.map((m) => {
      const assigned = {}
      if (m.memberAssignment && m.memberAssignment.length) {
        const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
        for (const [t, ps] of Object.entries((a && a.assignment) || {})) assigned[t] = [...ps].sort((x, y) => x - y)
      }
      return { member_id: m.memberId, client_id: m.clientId, assigned }
    })
    emit({
      op: 'describe_group', phase, group: d.groupId, state: d.state, protocol_type: d.protocolType,
      protocol: d.protocol, members
    })
  }, { phase })
}

async function fetchOffsets (admin, phase) {
  await step('fetch_offsets', async () => {
    const res = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    const offsets = {}
    for (const t of res) {
      if (t.topic !== topic) continue
      for (const p of t.partitions) offsets[String(p.partition)] = Number(p.offset)
    }
    emit({ op: 'fetch_offsets', phase, offsets })
  }, { phase })
}

async function withAdmin (fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

async function produce (n, start) {
  await withAdmin(async (admin) => {
    try {
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true
      })
      emit(created ? { op: 'create_topic' } : { op: 'create_topic', exists: true })
    } catch (e) {
      emitErr('create_topic', e)
      process.exitCode = 1
      return
    }
    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false })
    await producer.connect()
    try {
      for (let i = start; i < start + n; i++) {
        const [meta] = await producer.send({
          topic,
          messages: [{ key: `k${i}`, value: `kafkajs-v${i}`, headers: { idx: String(i), client: 'kafkajs' } }]
        })
        if (meta.errorCode) throw new Error(`produce error code ${meta.errorCode}`)
        emit({ op: 'produced', key: `k${i}`, partition: meta.partition, offset: Number(meta.baseOffset) })
      }
    } catch (e) {
      emitErr('produce', e)
      process.exitCode = 1
      return
    } finally {
      await producer.disconnect()
    }
    await endOffsets(admin)
  })
}

async function consume (n) {
  await withAdmin(async (admin) => {
    // a short long-poll: disconnect() waits for the fetch in flight
    const consumer = kafka.consumer({ groupId: group, sessionTimeout: 30000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 })
    const got = []
    let enough
    const enoughP = new Promise((resolve) => { enough = resolve })
    const errors = []
    consumer.on(consumer.events.CRASH, (e) => errors.push(e.payload.error))
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const headers = {}
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v.toString()
        got.push({ partition, offset: Number(message.offset) })
        emit({
          op: 'record', key: message.key.toString(), value: message.value.toString(), headers, partition,
          offset: Number(message.offset)
        })
        if (got.length === n) enough()
      }
    })
    await Promise.race([enoughP, new Promise((resolve) => setTimeout(resolve, 30000))])
    // keep consuming briefly: a resumed consumer must get nothing more
    await new Promise((resolve) => setTimeout(resolve, 1500))
    for (const e of errors) emitErr('consumer_crash', e)
    emit({ op: 'consumed', count: got.length, expected: n })
    const next = {}
    for (const r of got) next[r.partition] = Math.max(next[r.partition] ?? 0, r.offset + 1)
    await step('commit', async () => {
      await consumer.commitOffsets(Object.entries(next).map(([p, o]) => ({ topic, partition: Number(p), offset: String(o) })))
      emit({ op: 'commit' })
    })
    // the member is still in the group: it must be listed and described as Stable with this member
    await listGroups(admin, 'running')
    await describeGroup(admin, 'running')
    await consumer.disconnect() // leaves the group
    await describeGroup(admin, 'after')
    await fetchOffsets(admin, 'after')
  })
}

// -- transactions ------------------------------------------------------------------------------------------------
//
// One run, in order (each step prints {"op": STEP, ...}; a failed step adds "error" and, for a broker's error,
// "error_name" (KafkaJS's type) and "error_code"; later steps run where they can):
//   create          TOPIC and TOPIC-in, 1 partition each
//   commit          producer A ({transactionalId: GROUP-txn, idempotent, maxInFlightRequests: 1}).transaction():
//                   send c-0, c-1, c-2 (one send each), commit
//   abort           A.transaction(): send a-0, a-1, abort
//   fence_open      A.transaction(): send f-0 (left open)
//   fence_init      producer B, same transactionalId: connect + transaction() (InitProducerId: fences A)
//   fenced_commit   A's open transaction: commit (must fail)
//   b_commit        B's transaction: send b-0, commit
//   input           a plain producer: in-0..in-5 to TOPIC-in
//   ctp_commit      consumer({groupId: GROUP, readUncommitted: false}) on TOPIC-in gets in-0..in-3; a transaction
//                   of producer C (GROUP-ctp) sends OUT-in-i, sendOffsets({consumerGroupId: GROUP}) 4, commit
//   offsets_commit  admin.fetchOffsets of GROUP (asked again while the input has none, at most 50 times 100 ms
//                   apart: Kafka writes the commit's markers after EndTxn answers)
//   ctp_abort       the consumer gets in-4 in-5; C's transaction sends OUT-in-4 OUT-in-5, sendOffsets 6, abort
//   ends            admin.fetchTopicOffsets (its ListOffsets is read_committed: the LSO) of TOPIC, once it is past
//                   the abort's marker (asked at most 50 times, 100 ms apart)
//   offsets_abort   admin.fetchOffsets of GROUP again (unchanged)
//   read            TOPIC from the start by a group consumer, readUncommitted false and true ("isolation"), until
//                   the count a reader may see came or 20 s passed, then 1.5 s more (nothing more may come)
const READ_COMMITTED_COUNT = 8 // c-0..c-2, b-0, OUT-in-0..3
const READ_UNCOMMITTED_COUNT = 13 // and a-0 a-1, f-0, OUT-in-4 OUT-in-5

const txnErrFields = (e) => {
  let x = e
  while (x && !x.type && x.cause && x.cause !== x) x = x.cause
  return x && x.type ? { error_name: x.type, error_code: x.code ?? null } : {}
}

async function txnStep (op, fn, extra = {}) {
  try {
    const got = await fn()
    emit({ op, ...(got || {}) })
    return true
  } catch (e) {
    emit({ op, error: errText(e), ...txnErrFields(e), ...extra })
    return false
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor (cond, ms) {
  for (let waited = 0; !cond() && waited < ms; waited += 50) await sleep(50)
  return cond()
}

async function sendEach (sender, t, values) {
  const offsets = []
  for (const value of values) {
    const [meta] = await sender.send({ topic: t, messages: [{ value, partition: 0 }] })
    if (meta.errorCode) throw new Error(`produce error code ${meta.errorCode}`)
    offsets.push(Number(meta.baseOffset))
  }
  return offsets
}

async function readTopic (isolation, n) {
  const consumer = kafka.consumer({
    groupId: `${group}-reader-${isolation}`, readUncommitted: isolation === 'read_uncommitted', maxWaitTimeInMs: 300
  })
  const got = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => { got.push({ value: message.value.toString(), offset: Number(message.offset) }) }
    })
    await waitFor(() => got.length >= n, 20000)
    await sleep(1500)
  } finally {
    await consumer.disconnect()
  }
  return { isolation, values: got.map((r) => r.value), offsets: got.map((r) => r.offset) }
}

async function txnScenario () {
  const inTopic = `${topic}-in`
  const txnProducer = (id) => kafka.producer({
    transactionalId: id, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 60000,
    createPartitioner: Partitioners.DefaultPartitioner
  })
  const admin = kafka.admin()
  await admin.connect()
  const opened = [admin]
  try {
    if (!await txnStep('create', async () => {
      await admin.createTopics({
        topics: [{ topic, numPartitions: 1, replicationFactor: 1 }, { topic: inTopic, numPartitions: 1, replicationFactor: 1 }],
        waitForLeaders: true
      })
    })) return

    const a = txnProducer(`${group}-txn`)
    await a.connect()
    opened.push(a)
    const round = async (op, producer, end, values) => {
      let txn
      let offsets
      const ok = await txnStep(op, async () => {
        txn = await producer.transaction()
        offsets = await sendEach(txn, topic, values)
        if (end === 'commit') await txn.commit()
        if (end === 'abort') await txn.abort()
        return { offsets }
      }, { offsets })
      return ok ? txn : undefined
    }
    await round('commit', a, 'commit', ['c-0', 'c-1', 'c-2'])
    await round('abort', a, 'abort', ['a-0', 'a-1'])
    const open = await round('fence_open', a, 'open', ['f-0'])
    if (open) {
      const b = txnProducer(`${group}-txn`)
      let bTxn
      await txnStep('fence_init', async () => {
        await b.connect()
        opened.push(b)
        bTxn = await b.transaction()
      })
      await txnStep('fenced_commit', async () => { await open.commit() })
      if (bTxn) {
        await txnStep('b_commit', async () => {
          const offsets = await sendEach(bTxn, topic, ['b-0'])
          await bTxn.commit()
          return { offsets }
        })
      }
    }

    const plain = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
    await plain.connect()
    opened.push(plain)
    await txnStep('input', async () => ({ offsets: await sendEach(plain, inTopic, [0, 1, 2, 3, 4, 5].map((i) => `in-${i}`)) }))

    const c = txnProducer(`${group}-ctp`)
    await c.connect()
    opened.push(c)
    const consumer = kafka.consumer({ groupId: group, readUncommitted: false, maxWaitTimeInMs: 300, sessionTimeout: 30000 })
    const got = []
    await consumer.connect()
    opened.push(consumer)
    await consumer.subscribe({ topics: [inTopic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => { got.push({ value: message.value.toString(), offset: Number(message.offset) }) }
    })
    let lastOut // the last record the transactions produced: the final marker comes right after it
    const ctpRound = async (op, from, to, end) => {
      await txnStep(op, async () => {
        if (!await waitFor(() => got.length >= to, 30000)) throw new Error(`consumed ${got.length} records, wanted ${to}`)
        const batch = got.slice(from, to)
        const txn = await c.transaction()
        try {
          const offsets = await sendEach(txn, topic, batch.map((r) => `OUT-${r.value}`))
          lastOut = offsets[offsets.length - 1]
          await txn.sendOffsets({
            consumerGroupId: group,
            topics: [{ topic: inTopic, partitions: [{ partition: 0, offset: String(batch[batch.length - 1].offset + 1) }] }]
          })
          if (end === 'commit') await txn.commit()
          else await txn.abort()
          return { consumed: batch.map((r) => r.value), consumed_offsets: batch.map((r) => r.offset), offsets }
        } catch (e) {
          if (txn.isActive()) await txn.abort().catch(() => {})
          throw e
        }
      })
    }
    // Kafka's EndTxn answers before the markers are written (the coordinator writes them next): what the group
    // and readers see settles a moment later. groupOffsets(op, true) asks again (at most 50 times, 100 ms apart)
    // while the input partition has no committed offset; 'ends' asks until the (read_committed) high watermark
    // is past the abort's marker.
    const groupOffsets = async (op, wait) => {
      await txnStep(op, async () => {
        for (let attempt = 1; ; attempt++) {
          const res = await admin.fetchOffsets({ groupId: group, topics: [inTopic] })
          const offsets = {}
          for (const t of res) for (const p of t.partitions) offsets[`${t.topic}-${p.partition}`] = Number(p.offset)
          const o = offsets[`${inTopic}-0`]
          if (!wait || (o !== undefined && o >= 0) || attempt >= 50) return { offsets }
          await sleep(100)
        }
      })
    }
    await ctpRound('ctp_commit', 0, 4, 'commit')
    await groupOffsets('offsets_commit', true)
    await ctpRound('ctp_abort', 4, 6, 'abort')
    await txnStep('ends', async () => {
      for (let attempt = 1; ; attempt++) {
        const offs = await admin.fetchTopicOffsets(topic)
        const high = Number(offs[0].high)
        if (lastOut === undefined || high >= lastOut + 2 || attempt >= 50) return { high, low: Number(offs[0].low) }
        await sleep(100)
      }
    })
    await groupOffsets('offsets_abort', false)
    await txnStep('read', () => readTopic('read_committed', READ_COMMITTED_COUNT), { isolation: 'read_committed' })
    await txnStep('read', () => readTopic('read_uncommitted', READ_UNCOMMITTED_COUNT), { isolation: 'read_uncommitted' })
  } finally {
    for (const x of opened.reverse()) await x.disconnect().catch((e) => emitErr('disconnect', e))
  }
}

async function main () {
  switch (mode) {
    case 'produce':
      return produce(intArg(6, 6), intArg(7, 0))
    case 'consume':
      return consume(intArg(6, 6))
    case 'admin':
      return withAdmin(async (admin) => {
        await listGroups(admin, '')
        await describeGroup(admin, '')
        await fetchOffsets(admin, '')
        await step('list_topics', async () => {
          const names = await admin.listTopics()
          const md = await admin.fetchTopicMetadata({ topics: names })
          const topics = {}
          for (const t of md.topics) topics[t.name] = t.partitions.length
          emit({ op: 'list_topics', topics })
        })
        await endOffsets(admin)
      })
    case 'reset':
      return withAdmin(async (admin) => {
        await step('reset_offsets', async () => {
          await admin.resetOffsets({ groupId: group, topic, earliest: true })
          emit({ op: 'reset_offsets' })
        })
        await fetchOffsets(admin, 'after_reset')
      })
    case 'partitions':
      return withAdmin(async (admin) => {
        await step('create_partitions', async () => {
          const ok = await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
          emit({ op: 'create_partitions', result: ok })
        })
        await step('topic_metadata', async () => {
          const md = await admin.fetchTopicMetadata({ topics: [topic] })
          emit({ op: 'topic_metadata', partitions: md.topics[0].partitions.map((p) => p.partitionId).sort((a, b) => a - b) })
        })
        await endOffsets(admin, 25)
      })
    case 'configs':
      return withAdmin(async (admin) => {
        await step('describe_configs', async () => {
          const res = await admin.describeConfigs({
            resources: [{
              type: ConfigResourceTypes.TOPIC, name: topic,
              configNames: ['cleanup.policy', 'retention.ms', 'max.message.bytes']
            }],
            includeSynonyms: false
          })
          const r = res.resources[0]
          const configs = {}
          for (const c of r.configEntries) configs[c.configName] = { value: c.configValue, is_default: c.isDefault, read_only: c.readOnly }
          emit({ op: 'describe_configs', error_code: r.errorCode, resource: r.resourceName, configs })
        })
      })
    case 'txn':
      return txnScenario()
    case 'delete-group':
      return withAdmin(async (admin) => {
        await step('delete_group', async () => {
          const res = await admin.deleteGroups([group])
          emit({ op: 'delete_group', results: res.map((r) => ({ group: r.groupId, error_code: r.errorCode })) })
        })
        await listGroups(admin, 'after')
      })
    default:
      process.stderr.write(`unknown mode ${mode}\n`)
      process.exitCode = 2
  }
}

main().then(
  () => process.exit(process.exitCode || 0),
  (e) => { emitErr('fatal', e); process.exit(1) }
)
