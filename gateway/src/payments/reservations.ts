// What a payer can still pay at the edge (issue 23): the on-chain balance minus what the payer's
// unsettled payments have reserved, in Redis for every gateway, and the payment's nonce unused
// on chain. Before, each payment was compared alone with a balance cached 5 s (three payments
// of just over half the balance were all served) and a nonce was checked in Redis only (a payer
// who spent it on chain first was served, and the settlement failed).
import { eip3009Abi, MULTICALL3_ADDRESS, multicall3Abi } from '@ats/chain'
import { cachedLoader, type Logger } from '@ats/service-kit'
import type { Redis } from 'ioredis'
import {
  decodeFunctionResult,
  encodeFunctionData,
  getAbiItem,
  numberToHex,
  toFunctionSelector,
  type Address,
  type Hex,
  type PublicClient,
} from 'viem'
import { PaymentRefused, PaymentUnavailableError } from '../errors.ts'
import type { Payment } from './header.ts'
import { nonceKeyOf, nonceTtlMs, NONCE_MARGIN_MS } from './nonces.ts'

/** A payer's balance, read at `block` or later. */
export interface Balance {
  balance: bigint
  block: bigint
}

export interface PayerChainOptions {
  publicClient: Pick<PublicClient, 'readContract' | 'getBlockNumber' | 'request'>
  asset: Address
  /** how long a balance is reused (5 s); a fresher one is read when Redis says it predates a settlement it must include */
  ttlMs?: number
  now?: () => number
}

const unavailable = (what: string) => (error: Error) => {
  throw new PaymentUnavailableError(`${what} failed: ${error.message.split('\n')[0]}`, { cause: error })
}

/**
 * Reads of the payer's state on chain. A balance is cached briefly with the block it was read at
 * (concurrent lookups for one payer share one read); the state of an authorization is read
 * fresh for each payment, the payments of one tick together in one Multicall3 call. The calls of
 * one tick go in one JSON-RPC batch (the chain client batches).
 */
export function createPayerChain({ publicClient, asset, ttlMs = 5_000, now }: PayerChainOptions) {
  const read = async (payer: Address, blockNumber?: bigint): Promise<Balance> => {
    // the block number first: the balance is read at it or later, so `block` is a lower bound
    const block = blockNumber ?? (await publicClient.getBlockNumber({ cacheTime: 0 }).catch(unavailable('block number lookup')))
    const balance = await publicClient
      .readContract({
        address: asset,
        abi: eip3009Abi,
        functionName: 'balanceOf',
        args: [payer],
        ...(blockNumber === undefined ? {} : { blockNumber }),
      })
      .catch(unavailable('balance lookup'))
    return { balance, block }
  }
  const balances = cachedLoader<Address, Balance>({ max: 50_000, ttlMs, ...(now ? { now } : {}), load: (payer) => read(payer) })
  const authorizationUsed = authorizationStates(publicClient, asset)
  return {
    /** the payer's balance, cached briefly */
    balanceOf: (payer: Address) => balances.get(payer.toLowerCase() as Address),
    /** the payer's balance read now (at `blockNumber`, else the latest block); the cached one is dropped */
    async freshBalance(payer: Address, blockNumber?: bigint): Promise<Balance> {
      const fresh = await read(payer, blockNumber)
      balances.delete(payer.toLowerCase() as Address)
      return fresh
    },
    /** whether EIP-3009 has the (payer, nonce) authorization used or canceled (at `blockNumber`, else latest) */
    authorizationUsed,
    /** the latest block number */
    latestBlock: () => publicClient.getBlockNumber({ cacheTime: 0 }).catch(unavailable('block number lookup')),
  }
}

export type PayerChain = ReturnType<typeof createPayerChain>

const authorizationStateSelector = toFunctionSelector(getAbiItem({ abi: eip3009Abi, name: 'authorizationState' }))

/** the most authorization states read in one Multicall3 call (~6,000 gas each) */
const MAX_STATES_PER_CALL = 200

interface StateRead {
  data: Hex
  resolve(used: boolean): void
  reject(error: Error): void
}

/**
 * `authorizationState(payer, nonce)` for every payment, read on chain before the work is done
 * (issue 23). The reads asked for in one tick of the event loop go out together: one `eth_call` of
 * Multicall3's aggregate3 per block asked for, instead of one `eth_call` each (issue 26: each cost
 * the gateway ~140 µs and the node a call; batched, the ABI work and the node's call are shared by
 * every payment of the tick). A lone read is a plain `eth_call`; where Multicall3 answers nothing
 * useful (a chain without it), every read of the batch is made on its own.
 */
function authorizationStates(publicClient: PayerChainOptions['publicClient'], asset: Address) {
  let queued = new Map<Hex | 'latest', StateRead[]>()
  let scheduled = false
  /** answers a read from its one-word result: used (non-zero) or not; anything else is an error */
  const settle = (read: StateRead, result: Hex) => {
    if (result.length === 66) read.resolve(BigInt(result) !== 0n)
    else read.reject(new Error(`authorizationState answered ${result.length > 80 ? `${result.slice(0, 80)}…` : result}, not one word`))
  }
  const single = (read: StateRead, block: Hex | 'latest') =>
    publicClient
      .request({ method: 'eth_call', params: [{ to: asset, data: read.data }, block] })
      .then((result) => settle(read, result as Hex), read.reject)
  const together = (reads: StateRead[], block: Hex | 'latest') =>
    publicClient
      .request({
        method: 'eth_call',
        params: [
          {
            to: MULTICALL3_ADDRESS,
            data: encodeFunctionData({
              abi: multicall3Abi,
              functionName: 'aggregate3',
              args: [reads.map((read) => ({ target: asset, allowFailure: true, callData: read.data }))],
            }),
          },
          block,
        ],
      })
      .then((result) => {
        const results = decodeFunctionResult({ abi: multicall3Abi, functionName: 'aggregate3', data: result as Hex })
        if (results.length !== reads.length) throw new Error(`Multicall3 answered ${results.length} results for ${reads.length} calls`)
        results.forEach(({ success, returnData }, i) => {
          if (success) settle(reads[i]!, returnData)
          else reads[i]!.reject(new Error(`authorizationState reverted (${returnData})`))
        })
      })
      .catch(() => {
        for (const read of reads) void single(read, block)
      })
  const flush = () => {
    scheduled = false
    const groups = queued
    queued = new Map()
    for (const [block, reads] of groups) {
      for (let i = 0; i < reads.length; i += MAX_STATES_PER_CALL) {
        const chunk = reads.slice(i, i + MAX_STATES_PER_CALL)
        void (chunk.length === 1 ? single(chunk[0]!, block) : together(chunk, block))
      }
    }
  }
  return (payer: Address, nonce: Hex, blockNumber?: bigint): Promise<boolean> =>
    new Promise<boolean>((resolve, reject) => {
      const block: Hex | 'latest' = blockNumber === undefined ? 'latest' : numberToHex(blockNumber)
      const data: Hex = `${authorizationStateSelector}${payer.slice(2).toLowerCase().padStart(64, '0')}${nonce.slice(2).padStart(64, '0')}`
      const reads = queued.get(block)
      if (reads) reads.push({ data, resolve, reject })
      else queued.set(block, [{ data, resolve, reject }])
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    }).catch(unavailable('authorization state lookup'))
}

export const RESERVATION_KEY_PREFIX = 'ats-x402-reserved:'

// A payer's reservations are two keys: a hash (nonce -> value, '@sum' the total, '@block' the
// newest block a pruning read) and a sorted set (nonce by expiry, ms), so that admitting a payment
// costs the same however many are unsettled: expired ones are dropped a hundred at a time.
const dropExpired = `
local sum = tonumber(redis.call('HGET', KEYS[2], '@sum') or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 100)
for _, nonce in ipairs(expired) do
  local v = redis.call('HGET', KEYS[2], nonce)
  if v then sum = sum - tonumber(v); redis.call('HDEL', KEYS[2], nonce) end
  redis.call('ZREM', KEYS[3], nonce)
end
if sum < 0 then sum = 0 end
if #expired > 0 then redis.call('HSET', KEYS[2], '@sum', string.format('%.0f', sum)) end`

// KEYS: nonce, amounts, expiries, and optionally a record (a payment id's). ARGV: nonce, value,
// balance, balance block, nonce TTL ms, reservation expiry (ms since the epoch), now (ms), then
// the record and its TTL ms. Returns {'ok'|'reserved'|'used'|'stale'|'record', the reserved sum |
// the pruned block | the existing record}.
const reserveScript = `
if KEYS[4] then
  local existing = redis.call('GET', KEYS[4])
  if existing then return {'record', existing} end
end
local now = tonumber(ARGV[7])
local pruned = tonumber(redis.call('HGET', KEYS[2], '@block') or '0')
if tonumber(ARGV[4]) < pruned then return {'stale', tostring(pruned)} end
${dropExpired}
local value = tonumber(ARGV[2])
if tonumber(ARGV[3]) - sum < value then return {'reserved', string.format('%.0f', sum)} end
if not redis.call('SET', KEYS[1], '1', 'PX', ARGV[5], 'NX') then return {'used', '0'} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2], '@sum', string.format('%.0f', sum + value))
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
local expiresAt = tonumber(ARGV[6])
for i = 2, 3 do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl < 0 or now + ttl < expiresAt then redis.call('PEXPIREAT', KEYS[i], expiresAt) end
end
if KEYS[4] then redis.call('SET', KEYS[4], ARGV[8], 'PX', ARGV[9]) end
return {'ok', string.format('%.0f', sum)}`

// KEYS: amounts, expiries. ARGV: the block the nonces were read used at ('' for a release), then
// the nonces whose reservations end.
const endScript = `
local sum = tonumber(redis.call('HGET', KEYS[1], '@sum') or '0')
local ended = 0
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then sum = sum - tonumber(v); redis.call('HDEL', KEYS[1], ARGV[i]); ended = ended + 1 end
  redis.call('ZREM', KEYS[2], ARGV[i])
end
if sum < 0 then sum = 0 end
if ended > 0 then redis.call('HSET', KEYS[1], '@sum', string.format('%.0f', sum)) end
if ARGV[1] ~= '' then
  local pruned = tonumber(redis.call('HGET', KEYS[1], '@block') or '0')
  if tonumber(ARGV[1]) > pruned then redis.call('HSET', KEYS[1], '@block', ARGV[1]) end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 600000 then redis.call('PEXPIRE', KEYS[1], 600000) end
end
return ended`

/** how many of a payer's reservations one pruning looks at (those expiring first) */
const PRUNE_AT_MOST = 200

type ScriptedRedis = Redis & {
  reservePayment(...keysAndArgv: string[]): Promise<[string, string]>
  endReservations(amountsKey: string, expiriesKey: string, block: string, ...nonces: string[]): Promise<number>
}

export type ReserveOutcome =
  /** admitted: the nonce is claimed, the value reserved (and the record created) */
  | { kind: 'ok' }
  /** the nonce was claimed before */
  | { kind: 'used' }
  /** the record existed: nothing claimed or reserved */
  | { kind: 'record'; existing: string }

/** A record created with the claim, unless one exists (a payment id's): then nothing is claimed. */
export interface ReserveRecord {
  key: string
  value: string
  ttlMs: number
}

export interface ReservationOptions {
  redis: Redis
  chain: PayerChain
  /** the fleet's NATS namespace: fleets sharing a Redis (tests, a devnet beside production) keep their payers apart */
  namespace: string
  /** how long a reservation outlives validBefore (60 s, as a nonce claim): by then the payment is settled or can never be */
  marginMs?: number
  now?: () => number
}

const LUA_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/**
 * Per-payer reservations of unsettled payments, shared by every gateway in Redis. A payment is
 * admitted by one script that, atomically, finds the balance minus what is reserved enough,
 * claims the nonce and reserves the value (until validBefore + margin: by then the payment was
 * settled, or can never be). A reservation ends early when its authorization is found used on
 * chain: its transfer is then in the balance (or it never will be, and the payer is blocked).
 * That pruning is done only when a payer would be refused, from one read of the balance and of
 * the reserved nonces at one block, and it records that block: a gateway whose cached balance
 * is older (it lacks a transfer whose reservation is gone) reads the balance again.
 */
export function createReservations({ redis, chain, namespace, marginMs = NONCE_MARGIN_MS, now = Date.now }: ReservationOptions) {
  // the number of keys is the first argument: 3, or 4 with a record
  redis.defineCommand('reservePayment', { lua: reserveScript })
  redis.defineCommand('endReservations', { numberOfKeys: 2, lua: endScript })
  const scripted = redis as ScriptedRedis
  const keysOf = (payer: Address) => {
    const base = `${RESERVATION_KEY_PREFIX}${namespace}:${payer.toLowerCase()}`
    return [`${base}:amounts`, `${base}:expiries`] as const
  }
  const failed = (error: unknown) => {
    if (error instanceof PaymentUnavailableError || error instanceof PaymentRefused) return error
    return new PaymentUnavailableError(`reservation store unavailable: ${(error as Error).message}`, { cause: error })
  }

  const attempt = async (payment: Payment, { balance, block }: Balance, record: ReserveRecord | undefined) => {
    const a = payment.authorization
    const t = now()
    const [kind, detail] = await scripted.reservePayment(
      record ? '4' : '3',
      nonceKeyOf(a.from, a.nonce),
      ...keysOf(a.from),
      ...(record ? [record.key] : []),
      a.nonce.toLowerCase(),
      a.value.toString(),
      (balance > LUA_SAFE ? LUA_SAFE : balance).toString(),
      block.toString(),
      String(nonceTtlMs(a.validBefore, t, marginMs)),
      String(Number(a.validBefore) * 1000 + marginMs),
      String(t),
      ...(record ? [record.value, String(record.ttlMs)] : []),
    )
    return { kind, detail }
  }

  /** Ends the reservations whose authorizations are used on chain, read with the balance at one block. */
  async function prune(payer: Address): Promise<Balance> {
    const [amounts, expiries] = keysOf(payer)
    const fields = await redis.zrange(expiries, 0, PRUNE_AT_MOST - 1)
    const block = await chain.latestBlock()
    // one block for all: the balance then holds every transfer whose reservation ends here
    const [balance, used] = await Promise.all([
      chain.freshBalance(payer, block),
      Promise.all(fields.map((nonce) => chain.authorizationUsed(payer, nonce as Hex, block))),
    ])
    const gone = fields.filter((_, i) => used[i])
    await scripted.endReservations(amounts, expiries, block.toString(), ...gone)
    return balance
  }

  return {
    /** Ends the reservation of a payment that will not be charged (its request was answered 400 or more). */
    async release(payer: Address, nonce: Hex, log: Pick<Logger, 'warn'>) {
      try {
        await scripted.endReservations(...keysOf(payer), '', nonce.toLowerCase())
      } catch (error) {
        // it ends at validBefore anyway; meanwhile it only holds back the payer's own balance
        log.warn({ err: error }, 'reservation of an uncharged payment not released')
      }
    },
    /**
     * Admits a payment: funded beyond what the payer's unsettled payments reserve, its nonce
     * claimed and its value reserved, in one atomic step for every gateway. `used` when the nonce
     * is already claimed; a PaymentRefused when the payer cannot cover it.
     */
    async reserve(payment: Payment, payer: Address, record?: ReserveRecord): Promise<ReserveOutcome> {
      try {
        const { nonce } = payment.authorization
        // one JSON-RPC batch: the payer's balance (unless cached) and this authorization's state
        let [balance, usedOnChain] = await Promise.all([chain.balanceOf(payer), chain.authorizationUsed(payer, nonce)])
        if (usedOnChain) {
          // a payment id's repeat names its first payment, which may be settled by now
          const existing = record && (await redis.get(record.key))
          if (existing) return { kind: 'record', existing }
          throw new PaymentRefused(
            'nonce_used',
            `nonce already used on chain: authorization ${nonce} of ${payer} was used or canceled on the token contract; sign a new payment`,
          )
        }
        let pruned = false
        for (let stale = 0; ; ) {
          const { kind, detail } = await attempt(payment, balance, record)
          if (kind === 'ok') return { kind: 'ok' }
          if (kind === 'used') return { kind: 'used' }
          if (kind === 'record') return { kind: 'record', existing: detail }
          if (kind === 'stale') {
            // another gateway ended reservations from a newer balance than ours: read it again
            if (++stale > 3)
              throw new PaymentUnavailableError(`the chain node answers with blocks older than ${detail}, which another gateway has read`)
            balance = await chain.freshBalance(payer)
            continue
          }
          const value = payment.authorization.value
          if (balance.balance < value) throw insufficient(payer, balance.balance, value)
          if (pruned) {
            throw new PaymentRefused(
              'insufficient_funds',
              `insufficient funds: ${payer} holds ${balance.balance}, of which ${detail} is reserved by unsettled payments; the payment is ${value}`,
            )
          }
          balance = await prune(payer)
          pruned = true
        }
      } catch (error) {
        throw failed(error)
      }
    },
  }
}

export type Reservations = ReturnType<typeof createReservations>

export const insufficient = (payer: Address, balance: bigint, value: bigint) =>
  new PaymentRefused('insufficient_funds', `insufficient funds: ${payer} holds ${balance}, the payment is ${value}`)
