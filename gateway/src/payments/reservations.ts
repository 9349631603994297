// What a payer can still pay at the edge: the on-chain balance minus what the payer's unsettled
// payments have reserved, in Redis for every gateway, and the payment's nonce unused on chain.
// Compared alone with a cached balance, payments that together exceed it would all be served; a
// nonce checked in Redis only could be spent on chain first, and the settlement would fail.
import { eip3009Abi, MULTICALL3_ADDRESS, multicall3Abi } from '@ats/chain'
import { cachedLoader, firstLine, replicaAcknowledgement, type Logger } from '@ats/service-kit'
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

/** A payer's balance at `block`: every transfer mined in `block` or before is in it, none after. */
export interface Balance {
  balance: bigint
  block: bigint
}

export interface PayerChainOptions {
  publicClient: Pick<PublicClient, 'readContract' | 'getBlockNumber' | 'request'>
  asset: Address
  /** how long a balance is reused (5 s); a fresher one is read when Redis says it predates a settlement it must include */
  ttlMs?: number
}

const unavailable = (what: string) => (error: Error) => {
  throw new PaymentUnavailableError(`${what} failed: ${firstLine(error)}`, { cause: error })
}

/**
 * Reads of the payer's state on chain. A balance is cached briefly with the block it was read at
 * (concurrent lookups for one payer share one read); the state of an authorization is read
 * fresh for each payment, the payments of one tick together in one Multicall3 call. The calls of
 * one tick go in one JSON-RPC batch (the chain client batches).
 */
export function createPayerChain({ publicClient, asset, ttlMs = 5_000 }: PayerChainOptions) {
  const readBalance = async (payer: Address, blockNumber?: bigint): Promise<Balance> => {
    // always at a named block: a node may answer 'latest' from a state older than the block
    // number it has just given (anvil does, while it mines; so may nodes behind one URL)
    const block = blockNumber ?? (await publicClient.getBlockNumber({ cacheTime: 0 }).catch(unavailable('block number lookup')))
    const balance = await publicClient
      .readContract({ address: asset, abi: eip3009Abi, functionName: 'balanceOf', args: [payer], blockNumber: block })
      .catch(unavailable('balance lookup'))
    return { balance, block }
  }
  const balances = cachedLoader<Address, Balance>({ max: 50_000, ttlMs, load: (payer) => readBalance(payer) })
  const authorizationUsed = authorizationStates(publicClient, asset)

  /** the balance and the authorization states in one eth_call of Multicall3; throws where it answers nothing useful */
  const together = async (payer: Address, nonces: readonly Hex[], block: bigint) => {
    const calls = [balanceOfData(payer), ...nonces.map((nonce) => authorizationStateData(payer, nonce))]
    const words = (await aggregate3(publicClient, asset, calls, false, numberToHex(block))).map(({ returnData }) => oneWord(returnData))
    if (words.length !== calls.length) throw new Error(`Multicall3 answered ${words.length} results for ${calls.length} calls`)
    return { balance: { balance: words[0]!, block }, used: words.slice(1).map((word) => word !== 0n) }
  }

  return {
    /** the payer's balance, cached briefly */
    balanceOf: (payer: Address) => balances.get(payer.toLowerCase() as Address),
    /** whether EIP-3009 has the (payer, nonce) authorization used or canceled (at `blockNumber`, else latest) */
    authorizationUsed,
    /** the latest block number */
    latestBlock: () => publicClient.getBlockNumber({ cacheTime: 0 }).catch(unavailable('block number lookup')),
    /**
     * The payer's balance and whether each of these authorizations is used, at `block`, from one
     * call: one state of the chain for all (a node may answer a call at its newest block from the
     * block it is still building, so two calls could see two states). Where Multicall3 answers
     * nothing useful, one call each. The balance replaces an older cached one.
     */
    async snapshot(payer: Address, nonces: readonly Hex[], block: bigint): Promise<{ balance: Balance; used: boolean[] }> {
      const read = await together(payer, nonces, block).catch(async () => ({
        balance: await readBalance(payer, block),
        used: await Promise.all(nonces.map((nonce) => authorizationUsed(payer, nonce, block))),
      }))
      const key = payer.toLowerCase() as Address
      const cached = balances.peek(key)
      if (!cached || cached.block < block) balances.set(key, read.balance)
      return read
    },
  }
}

export type PayerChain = ReturnType<typeof createPayerChain>

/** One `eth_call` of Multicall3's aggregate3 with these calls to the token, at `block`: each call's outcome. */
async function aggregate3(
  publicClient: PayerChainOptions['publicClient'],
  asset: Address,
  calls: readonly Hex[],
  allowFailure: boolean,
  block: Hex | 'latest',
) {
  const result = await publicClient.request({
    method: 'eth_call',
    params: [
      {
        to: MULTICALL3_ADDRESS,
        data: encodeFunctionData({
          abi: multicall3Abi,
          functionName: 'aggregate3',
          args: [calls.map((callData) => ({ target: asset, allowFailure, callData }))],
        }),
      },
      block,
    ],
  })
  return decodeFunctionResult({ abi: multicall3Abi, functionName: 'aggregate3', data: result as Hex })
}

const authorizationStateSelector = toFunctionSelector(getAbiItem({ abi: eip3009Abi, name: 'authorizationState' }))
const balanceOfSelector = toFunctionSelector(getAbiItem({ abi: eip3009Abi, name: 'balanceOf' }))
const word = (hex: Hex) => hex.slice(2).toLowerCase().padStart(64, '0')
const authorizationStateData = (payer: Address, nonce: Hex): Hex => `${authorizationStateSelector}${word(payer)}${word(nonce)}`
const balanceOfData = (owner: Address): Hex => `${balanceOfSelector}${word(owner)}`
/** a call's one-word result as a number; anything else is an error */
const oneWord = (result: Hex) => {
  if (result.length !== 66) throw new Error(`answered ${result.length > 80 ? `${result.slice(0, 80)}…` : result}, not one word`)
  return BigInt(result)
}

/** the most authorization states read in one Multicall3 call (~6,000 gas each) */
const MAX_STATES_PER_CALL = 200

interface StateRead {
  data: Hex
  resolve(used: boolean): void
  reject(error: Error): void
}

/**
 * `authorizationState(payer, nonce)` for every payment, read on chain before the work is done.
 * The reads asked for in one tick of the event loop go out together: one `eth_call` of
 * Multicall3's aggregate3 per block asked for, instead of one `eth_call` each (each cost the
 * gateway ~140 µs and the node a call; batched, the ABI work and the node's call are shared by
 * every payment of the tick). A lone read is a plain `eth_call`; where Multicall3 answers nothing
 * useful (a chain without it), every read of the batch is made on its own.
 */
function authorizationStates(publicClient: PayerChainOptions['publicClient'], asset: Address) {
  let queued = new Map<Hex | 'latest', StateRead[]>()
  let scheduled = false
  /** answers a read from its one-word result: used (non-zero) or not; anything else is an error */
  const settle = (read: StateRead, result: Hex) => {
    try {
      read.resolve(oneWord(result) !== 0n)
    } catch (error) {
      read.reject(new Error(`authorizationState ${(error as Error).message}`))
    }
  }
  const single = (read: StateRead, block: Hex | 'latest') =>
    publicClient
      .request({ method: 'eth_call', params: [{ to: asset, data: read.data }, block] })
      .then((result) => settle(read, result as Hex), read.reject)
  const together = (reads: StateRead[], block: Hex | 'latest') =>
    aggregate3(
      publicClient,
      asset,
      reads.map((read) => read.data),
      true,
      block,
    )
      .then((results) => {
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
      const data = authorizationStateData(payer, nonce)
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
/** the Redis key of a claimed nonce */
export const nonceKeyOf = (from: string, nonce: string) => `ats-x402:${from.toLowerCase()}:${nonce.toLowerCase()}`
/** how long a nonce claim and a reservation are kept past validBefore, against clock skew between replicas and the chain */
const NONCE_MARGIN_MS = 60_000

// A payer's reservations are two keys: a hash (nonce -> value, '@sum' the total, '@block' the
// newest block a pruning read, '@balance' the balance it read there) and a sorted set (nonce by
// expiry, ms), so that admitting a payment costs the same however many are unsettled: expired
// ones are dropped a hundred at a time.
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
// the record and its TTL ms. Returns {'ok'|'reserved'|'used'|'record', the reserved sum | the
// existing record, the balance compared}. A balance read no later than the newest pruning's block
// may lack a transfer whose reservation that pruning ended: the lower of it and the pruning's own
// balance is compared (that one holds every transfer it ended; any lower one is as safe).
const reserveScript = `
if KEYS[4] then
  local existing = redis.call('GET', KEYS[4])
  if existing then return {'record', existing} end
end
local now = tonumber(ARGV[7])
local held = tonumber(ARGV[3])
local pruned = tonumber(redis.call('HGET', KEYS[2], '@block') or '0')
if tonumber(ARGV[4]) <= pruned then
  local snapshot = tonumber(redis.call('HGET', KEYS[2], '@balance') or ARGV[3])
  if snapshot < held then held = snapshot end
end
${dropExpired}
local value = tonumber(ARGV[2])
if held - sum < value then return {'reserved', string.format('%.0f', sum), string.format('%.0f', held)} end
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

// KEYS: amounts, expiries. ARGV: the block the nonces were read used at ('' for a release), the
// balance read with them at that block, then the nonces whose reservations end. Of two prunings
// at one block (a node's newest block may still be growing), the lower balance is kept.
const endScript = `
local sum = tonumber(redis.call('HGET', KEYS[1], '@sum') or '0')
local ended = 0
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then sum = sum - tonumber(v); redis.call('HDEL', KEYS[1], ARGV[i]); ended = ended + 1 end
  redis.call('ZREM', KEYS[2], ARGV[i])
end
if sum < 0 then sum = 0 end
if ended > 0 then redis.call('HSET', KEYS[1], '@sum', string.format('%.0f', sum)) end
if ARGV[1] ~= '' then
  local pruned = tonumber(redis.call('HGET', KEYS[1], '@block') or '0')
  local block = tonumber(ARGV[1])
  if block > pruned then
    redis.call('HSET', KEYS[1], '@block', ARGV[1], '@balance', ARGV[2])
  elseif block == pruned and tonumber(ARGV[2]) < tonumber(redis.call('HGET', KEYS[1], '@balance') or ARGV[2]) then
    redis.call('HSET', KEYS[1], '@balance', ARGV[2])
  end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 600000 then redis.call('PEXPIRE', KEYS[1], 600000) end
end
return ended`

/** how many of a payer's reservations one pruning looks at (those expiring first) */
const PRUNE_AT_MOST = 200

type ScriptedRedis = Redis & {
  reservePayment(...keysAndArgv: string[]): Promise<[string, string, string?]>
  endReservations(amountsKey: string, expiriesKey: string, block: string, balance: string, ...nonces: string[]): Promise<number>
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
}

const LUA_SAFE = BigInt(Number.MAX_SAFE_INTEGER)
/** a balance as the scripts compare it: Lua's numbers are exact to 2^53 (9 billion USDC) */
const capped = (balance: bigint) => (balance > LUA_SAFE ? LUA_SAFE : balance).toString()

/**
 * Per-payer reservations of unsettled payments, shared by every gateway in Redis. A payment is
 * admitted by one script that, atomically, finds the balance minus what is reserved enough,
 * claims the nonce and reserves the value (until validBefore + margin: by then the payment was
 * settled, or can never be). A reservation ends early when its authorization is found used on
 * chain: its transfer is then in the balance (or it never will be, and the payer is blocked).
 * That pruning is done only when a payer would be refused, from one read of the balance and of
 * the reserved nonces at one block (one call: one state of the chain), and it records that block
 * and that balance.
 *
 * Why no interleaving admits more than the balance: every admitted payment is either still
 * reserved, or was pruned, found used in the state a pruning read with its balance. A balance read
 * at a block after the newest pruning's holds every pruned transfer; any other is compared at
 * most at the newest pruning's own balance, which holds them (a lower one is safer still). What
 * is reserved covers the rest; a settled payment not yet pruned is counted twice, so a payment can
 * be refused early, never served beyond the balance (balances are read at a named block: readBalance).
 */
export function createReservations({ redis, chain, namespace }: ReservationOptions) {
  // the number of keys is the first argument: 3, or 4 with a record
  redis.defineCommand('reservePayment', { lua: reserveScript })
  redis.defineCommand('endReservations', { numberOfKeys: 2, lua: endScript })
  const scripted = redis as ScriptedRedis
  const acknowledgement = replicaAcknowledgement(redis)
  const keysOf = (payer: Address) => {
    const base = `${RESERVATION_KEY_PREFIX}${namespace}:${payer.toLowerCase()}`
    return [`${base}:amounts`, `${base}:expiries`] as const
  }
  /**
   * With Sentinel, an admission counts once a replica holds it: one only the primary had would be
   * gone after a failover, and its nonce could be admitted again. One no replica acknowledged is
   * taken back (the request has not run: the same payment may be sent again) and answered 503.
   */
  const replicated = async (payment: Payment, record: ReserveRecord | undefined, acknowledged: () => Promise<void>) => {
    try {
      await acknowledged()
    } catch (error) {
      const { from, nonce } = payment.authorization
      // the primary may be gone too: then so is the admission, or a replica has it and the nonce stays used (fail closed)
      await Promise.all([
        redis.del(nonceKeyOf(from, nonce), ...(record ? [record.key] : [])),
        scripted.endReservations(...keysOf(from), '', '', nonce.toLowerCase()),
      ]).catch(() => undefined)
      throw new PaymentUnavailableError(`payment admission not replicated: ${firstLine(error)}`, { cause: error })
    }
  }
  const failed = (error: unknown) => {
    if (error instanceof PaymentUnavailableError || error instanceof PaymentRefused) return error
    return new PaymentUnavailableError(`reservation store unavailable: ${(error as Error).message}`, { cause: error })
  }

  const attempt = async (payment: Payment, { balance, block }: Balance, record: ReserveRecord | undefined) => {
    const a = payment.authorization
    const t = Date.now()
    // the nonce claim and the reservation outlive validBefore: by then the payment is settled or can never be
    const expiresAt = Number(a.validBefore) * 1000 + NONCE_MARGIN_MS
    const [kind, detail, held] = await scripted.reservePayment(
      record ? '4' : '3',
      nonceKeyOf(a.from, a.nonce),
      ...keysOf(a.from),
      ...(record ? [record.key] : []),
      a.nonce.toLowerCase(),
      a.value.toString(),
      capped(balance),
      block.toString(),
      String(Math.max(1, expiresAt - t)),
      String(expiresAt),
      String(t),
      ...(record ? [record.value, String(record.ttlMs)] : []),
    )
    return { kind, detail, held: BigInt(held ?? '0') }
  }

  /** Ends the reservations whose authorizations are used on chain, read with the balance at one block. */
  async function prune(payer: Address): Promise<Balance> {
    const [amounts, expiries] = keysOf(payer)
    const fields = await redis.zrange(expiries, 0, PRUNE_AT_MOST - 1)
    // one state for all: the balance then holds every transfer whose reservation ends here
    const { balance, used } = await chain.snapshot(payer, fields as Hex[], await chain.latestBlock())
    const gone = fields.filter((_, i) => used[i])
    await scripted.endReservations(amounts, expiries, balance.block.toString(), capped(balance.balance), ...gone)
    return balance
  }

  return {
    /** Ends the reservation of a payment that will not be charged (its request was answered 400 or more). */
    async release(payer: Address, nonce: Hex, log: Pick<Logger, 'warn'>) {
      try {
        await scripted.endReservations(...keysOf(payer), '', '', nonce.toLowerCase())
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
            payer,
          )
        }
        for (let pruned = false; ; pruned = true) {
          // before the script goes out: its acknowledgement must come on the connection it went out on
          const acknowledged = acknowledgement?.()
          const { kind, detail, held } = await attempt(payment, balance, record)
          if (kind === 'ok') {
            if (acknowledged) await replicated(payment, record, acknowledged)
            return { kind: 'ok' }
          }
          if (kind === 'used') return { kind: 'used' }
          if (kind === 'record') return { kind: 'record', existing: detail }
          // short: a balance that alone does not cover the payment is refused at once (a payer who
          // holds nothing costs one read); else the reservations of settled payments end, and the
          // payment is tried once more with the balance read for that
          const value = payment.authorization.value
          if (held < value || pruned) throw insufficient(payer, held, BigInt(detail), value)
          balance = await prune(payer)
        }
      } catch (error) {
        throw failed(error)
      }
    },
  }
}

export type Reservations = ReturnType<typeof createReservations>

/**
 * The refusal of a payment the payer cannot cover. It counts against the payer when their balance
 * alone covers it (their unsettled payments hold it back); a payer who holds less than one
 * payment costs nothing to make, so that refusal counts against the client address instead.
 */
export const insufficient = (payer: Address, balance: bigint, reserved: bigint, value: bigint) =>
  new PaymentRefused(
    'insufficient_funds',
    `insufficient funds: ${payer} holds ${balance}, of which ${reserved} is reserved by unsettled payments; the payment is ${value}`,
    balance >= value ? payer : undefined,
  )
