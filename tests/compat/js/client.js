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
