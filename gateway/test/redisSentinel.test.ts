// Redis failover under Sentinel, with real processes: the gateway's payment admissions (nonce
// claims and reservations) through connectRedis in Sentinel mode, across a SIGKILL of the primary.
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { connectRedis, replicaAcknowledgement } from '@ats/service-kit'
import { eventually, redisSentinelMissing, startSentinelRedis } from '@ats/service-kit/testing'
import { Redis } from 'ioredis'
import { pino } from 'pino'
import t from 'tap'
import type { Address, Hex } from 'viem'
import { createReservations, nonceKeyOf, PaymentUnavailableError, type Payment, type PayerChain } from '../src/payments/index.ts'

const log = pino({ level: 'silent' })
const payer = `0x${randomBytes(20).toString('hex')}` as Address
/** a chain where the payer holds plenty and no authorization is used: only Redis decides */
const chain = {
  balanceOf: async () => ({ balance: 10n ** 15n, block: 1n }),
  authorizationUsed: async () => false,
  latestBlock: async () => 1n,
  snapshot: async (_: Address, nonces: readonly Hex[]) => ({ balance: { balance: 10n ** 15n, block: 1n }, used: nonces.map(() => false) }),
} as unknown as PayerChain
const paymentOf = (nonce: Hex): Payment => ({
  x402Version: 1,
  scheme: 'exact',
  network: 'devnet',
  signature: '0x00',
  authorization: {
    from: payer.toLowerCase() as Hex,
    to: '0x0000000000000000000000000000000000000001',
    value: 1_000n,
    validAfter: 0n,
    validBefore: BigInt(Math.floor(Date.now() / 1000) + 600),
    nonce,
  },
})
const freshNonce = () => `0x${randomBytes(32).toString('hex')}` as Hex
/** a reservation's outcome as the test reads it: ok, used, unavailable (retryable, 503), or anything else (wrong) */
const outcomeOf = (reserve: Promise<{ kind: string }>) =>
  reserve.then(
    (outcome) => outcome.kind,
    (error: Error) => (error instanceof PaymentUnavailableError ? 'unavailable' : `wrong: ${error.message}`),
  )

const missing = redisSentinelMissing()
if (missing) t.plan(0, `Redis Sentinel failover not tested: ${missing}`)
else await failoverTests()

async function failoverTests() {
  const redis = await startSentinelRedis({ replicas: 2 })
  t.teardown(() => redis.stop())
  const client = await connectRedis(redis.url, log, { sentinels: redis.sentinels, master: redis.master })
  t.teardown(() => client.disconnect())
  const reservations = createReservations({ redis: client, chain, namespace: `sentinel-${randomBytes(4).toString('hex')}` })
  const portOf = async () => Number(/tcp_port:(\d+)/.exec(await client.info('server'))![1])

  t.test('without sentinels there is no replica to wait for: nothing is added to a write', async (t) => {
    const plain = new Redis(`redis://127.0.0.1:${redis.ports[0]}`, { lazyConnect: true })
    t.teardown(() => plain.disconnect())
    t.equal(replicaAcknowledgement(plain), undefined)
    t.type(replicaAcknowledgement(client), 'function')
  })

  t.test('an admission no replica acknowledges in time is refused (503) and taken back: the same payment is admitted later', async (t) => {
    t.equal(await portOf(), redis.ports[0], 'on the first primary')
    const nonce = freshNonce()
    const replicaPids = await Promise.all(
      redis.ports.slice(1).map(async (port) => {
        const one = new Redis({ port, lazyConnect: true })
        await one.connect()
        const pid = Number(/process_id:(\d+)/.exec(await one.info('server'))![1])
        one.disconnect()
        return pid
      }),
    )
    for (const pid of replicaPids) process.kill(pid, 'SIGSTOP')
    const started = Date.now()
    let refused: string
    try {
      refused = await outcomeOf(reservations.reserve(paymentOf(nonce), payer))
    } finally {
      for (const pid of replicaPids) process.kill(pid, 'SIGCONT')
    }
    t.equal(refused, 'unavailable', 'refused as retryable')
    t.ok(Date.now() - started < 3_000, `within the wait's timeout (${Date.now() - started} ms)`)
    t.equal(await client.exists(nonceKeyOf(payer, nonce)), 0, 'its nonce claim taken back')
    await redis.settled(2)
    t.equal(await outcomeOf(reservations.reserve(paymentOf(nonce), payer)), 'ok', 'the same payment admitted once the replicas answer')
    t.equal(await outcomeOf(reservations.reserve(paymentOf(nonce), payer)), 'used', 'and only once')
  })

  t.test('SIGKILL of the primary under load: the client follows the promotion, and no acknowledged nonce is forgotten', async (t) => {
    const first = await redis.primaryPort()
    const admitted: Hex[] = []
    const outcomes = new Map<string, number>()
    let stopped = false
    // eight clients admitting one payment after another, through the kill and the failover: some in flight at the kill
    const load = Promise.all(
      Array.from({ length: 8 }, async () => {
        while (!stopped) {
          const nonce = freshNonce()
          const outcome = await outcomeOf(reservations.reserve(paymentOf(nonce), payer))
          if (outcome === 'ok') admitted.push(nonce)
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
          if (outcome !== 'ok') await sleep(20)
        }
      }),
    )
    await sleep(500)
    const beforeKill = [...admitted]
    t.ok(beforeKill.length > 0, `${beforeKill.length} admitted before the kill`)
    await redis.kill(first)
    const killedAt = Date.now()
    const countAtKill = admitted.length
    // resumed: an admission made after the kill
    while (admitted.length === countAtKill && Date.now() - killedAt < 30_000) await sleep(50)
    const resumedMs = Date.now() - killedAt
    t.ok(admitted.length > countAtKill, `admissions resumed ${resumedMs} ms after the kill`)
    t.ok(resumedMs < 15_000, 'within seconds')
    await sleep(500)
    stopped = true
    await load

    const promoted = await redis.primaryPort()
    t.not(promoted, first, `the sentinels promoted ${promoted}`)
    t.equal(await portOf(), promoted, 'the client is on the promoted replica')
    t.same(
      [...outcomes.keys()].filter((kind) => !['ok', 'unavailable'].includes(kind)),
      [],
      `every admission during the failover was admitted or refused as retryable: ${JSON.stringify(Object.fromEntries(outcomes))}`,
    )
    // every nonce ever admitted is still claimed: sent again, each is refused
    const again = await Promise.all(admitted.map((nonce) => outcomeOf(reservations.reserve(paymentOf(nonce), payer))))
    t.same(
      again.filter((kind) => kind !== 'used'),
      [],
      `all ${admitted.length} admitted nonces (${beforeKill.length} of them before the kill) refused when sent again`,
    )

    // the killed server comes back empty as a replica of the new primary, as a restarted pod would
    await redis.restart(first)
    await redis.settled(2)
    t.equal(await outcomeOf(reservations.reserve(paymentOf(freshNonce()), payer)), 'ok', 'admitting with the old primary back as a replica')
  })

  t.test('a manual failover (the primary demoted while up): the client follows it', async (t) => {
    const before = await redis.primaryPort()
    const [host, port] = redis.sentinels.split(',')[0]!.split(':')
    const sentinel = new Redis({ host: host!, port: Number(port), lazyConnect: true })
    t.teardown(() => sentinel.disconnect())
    await sentinel.connect()
    t.equal(await sentinel.call('SENTINEL', 'FAILOVER', redis.master), 'OK')
    await eventually('the sentinels to promote a replica', async () => ((await redis.primaryPort()) !== before ? true : undefined), 20_000)
    // the old primary reconfigured as a replica of the new one (until then it still takes writes: Redis
    // replicates asynchronously, so a failover has that window; docs/operations.md)
    await redis.settled(2)
    // the demoted server stays up: the sentinels close its clients' connections (CLIENT KILL), and a write it refuses (READONLY) reconnects too
    const promoted = await redis.primaryPort()
    const on = await eventually(
      'an admission on the promoted replica',
      async () => {
        const result = await outcomeOf(reservations.reserve(paymentOf(freshNonce()), payer))
        return result === 'ok' && (await portOf()) === promoted ? promoted : undefined
      },
      20_000,
    )
    t.equal(on, promoted, 'admitted on the promoted replica')
  })
}
