// Paying with prepaid credit at the edge: who the wallet is (a SIGN-IN-WITH-X header, or a
// session token from one), the debit before the request is proxied, and what is reported after.
import { creditHeaders, generatedIdempotencyKey, type CreditDebit } from '@ats/contracts'
import { BadRequest, firstLine, type Logger } from '@ats/service-kit'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Address } from 'viem'
import { CreditUnavailable, InsufficientCredit } from '../errors.ts'
import type { CreditPublisher } from './creditPublisher.ts'
import type { CreditStore } from './creditStore.ts'
import { SESSION_EXPIRES_HEADER, SESSION_TOKEN_HEADER, type Session, type Sessions } from './sessions.ts'
import { SIGN_IN_WITH_X, type SignIn } from './signIn.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** the credit that pays this request: the wallet, the hold (id = request id) and whether its service reports usage */
    credit: { wallet: Address; amount: bigint; metered: boolean; route: string } | null
  }
}

/** the answer header saying what credit is left after this request's debit (USDC base units) */
export const CREDIT_AVAILABLE_HEADER = 'ats-credit-available'

const sessionBearer = /^Bearer\s+(atcs_\S*)\s*$/i

/**
 * How a request pays with credit, if it does: a sign-in header, or a session token as its bearer
 * (or in x-api-key, where Anthropic's SDKs put their key).
 */
export function creditCredentials(
  request: FastifyRequest,
): { kind: 'sign-in'; header: string } | { kind: 'session'; token: string } | undefined {
  const header = request.headers[SIGN_IN_WITH_X]
  if (typeof header === 'string') return { kind: 'sign-in', header }
  const { authorization, 'x-api-key': apiKey } = request.headers
  const token = authorization
    ? sessionBearer.exec(authorization)?.[1]
    : typeof apiKey === 'string' && apiKey.startsWith('atcs_')
      ? apiKey
      : undefined
  return token === undefined ? undefined : { kind: 'session', token }
}

/** credit-paid requests handed to the proxy: a metered one answered before (a limit, say) reports its hold unused */
const forwarded = new WeakSet<object>()

/** The headers the service gets for a credit-paid request: the wallet, and for metered work the hold. */
export function creditHeadersOf(request: Pick<FastifyRequest, 'credit' | 'id'>): Record<string, string> {
  const paid = request.credit
  if (!paid) return {}
  forwarded.add(request)
  const wallet = { [creditHeaders.wallet]: paid.wallet.toLowerCase() }
  return paid.metered ? { ...wallet, [creditHeaders.hold]: request.id, [creditHeaders.holdAmount]: paid.amount.toString() } : wallet
}

export interface CreditGuardDeps {
  store: CreditStore
  publisher: CreditPublisher
  signIn: SignIn
  sessions: Sessions
  log: Logger
  /** PUBLIC_URL: the origin sign-ins must name; unset, the gateway names itself http://localhost:<port> */
  publicUrl: string | undefined
  port: number
  /** what a metered request holds (CREDIT_METERED_HOLD) */
  meteredHold: bigint
}

/** Why a debit was refused: the credit is short. `available` is what the wallet has. */
export interface CreditShort {
  wallet: Address
  available: bigint
  price: bigint
}

/** how long a withdrawal's key takes nothing more from the credit in Redis (the ledger records it once for good) */
const withdrawalIdTtlMs = 7 * 86_400_000

/** `amount` of a withdrawal's JSON body (USDC base units), or 'all' when there is none */
function withdrawalAmount(body: Buffer | null): bigint | 'all' {
  if (!body || body.length === 0) return 'all'
  let parsed: unknown
  try {
    parsed = JSON.parse(body.toString('utf8'))
  } catch {
    throw new BadRequest('body must be JSON: {"amount": "<USDC base units>"} or {}')
  }
  const amount = (parsed as { amount?: unknown } | null)?.amount
  if (amount === undefined) return 'all'
  if (typeof amount !== 'string' || !/^[1-9][0-9]{0,14}$/.test(amount)) {
    throw new BadRequest('amount must be a whole number of USDC base units above 0, as a string')
  }
  return BigInt(amount)
}

export function createCreditGuard({ store, publisher, signIn, sessions, publicUrl, port, meteredHold }: CreditGuardDeps) {
  // as the 402's resource: never from the client's Host header
  const originOf = (request: FastifyRequest) => publicUrl ?? `http://localhost:${request.socket.localPort ?? port}`

  /**
   * The wallet of the request's credentials. A sign-in also opens a session, whose token the
   * answer carries (ATS-Session-Token, ATS-Session-Expires), so the next requests need no signature.
   */
  async function signedIn(request: FastifyRequest, reply: FastifyReply, header: string): Promise<Session> {
    const session = await sessions.issue(await signIn.verify(header, originOf(request)))
    reply.header(SESSION_TOKEN_HEADER, session.token).header(SESSION_EXPIRES_HEADER, new Date(session.expiresAt).toISOString())
    return session
  }
  /** Gives a debit back to the wallet's copy in Redis; a failure is logged, never thrown (the copy then shows less than the ledger until it is rebuilt). */
  const giveBack = (request: FastifyRequest, wallet: Address, id: string) =>
    store.giveBack(wallet, id).catch((e: Error) => request.log.error({ err: e }, 'a debit could not be given back'))

  async function walletOf(request: FastifyRequest, reply: FastifyReply): Promise<Address | undefined> {
    const credentials = creditCredentials(request)
    if (!credentials) return undefined
    if (credentials.kind === 'session') return sessions.resolve(credentials.token)
    return (await signedIn(request, reply, credentials.header)).wallet
  }

  /**
   * Takes a movement from the wallet's credit in Redis and has the ledger told of it before the
   * request goes on; given back (503) when it cannot be told. A repeated id takes nothing more.
   */
  async function take(
    request: FastifyRequest,
    reply: FastifyReply,
    {
      wallet,
      id,
      kind,
      amount,
      route,
      ttlMs,
    }: Omit<CreditDebit, 'amount' | 'at' | 'wallet'> & { wallet: Address; amount: bigint | 'all'; ttlMs?: number },
  ): Promise<{ short: CreditShort } | { amount: bigint }> {
    const outcome = await store.debit(wallet, id, amount, ttlMs)
    if (outcome.kind === 'short') return { short: { wallet, available: outcome.available, price: amount === 'all' ? 1n : amount } }
    if (outcome.kind === 'replayed') return { amount: outcome.amount }
    const debit: CreditDebit = { id, wallet: wallet.toLowerCase(), kind, amount: outcome.amount.toString(), route, at: Date.now() }
    try {
      await publisher.debit(debit)
    } catch (error) {
      await giveBack(request, wallet, id)
      throw new CreditUnavailable(`the credit debit could not be recorded (${firstLine(error)})`)
    }
    reply.header(CREDIT_AVAILABLE_HEADER, outcome.available.toString())
    return { amount: outcome.amount }
  }

  /**
   * Takes `amount` from the wallet's credit for this request (id: the request id) before it is
   * proxied, so requests at once on any number of gateways never spend more than the credit.
   * Metered work is a hold the ledger hears of at once (the service reports what it used); a
   * route's price is told to the ledger as a debit once the answer is known (`answered`), and only
   * when it is below 400. Returns the shortfall when the credit does not cover it.
   */
  async function pay(
    request: FastifyRequest,
    reply: FastifyReply,
    { wallet, amount, metered, route }: { wallet: Address; amount: bigint; metered: boolean; route: string },
  ): Promise<CreditShort | undefined> {
    if (metered) {
      const taken = await take(request, reply, { wallet, id: request.id, kind: 'hold', amount, route })
      if ('short' in taken) return taken.short
    } else {
      const outcome = await store.debit(wallet, request.id, amount)
      if (outcome.kind === 'short') return { wallet, available: outcome.available, price: amount }
      if (outcome.kind === 'debited') reply.header(CREDIT_AVAILABLE_HEADER, outcome.available.toString())
    }
    // the proxy names the wallet (and a metered request's hold) to the service: creditHeadersOf
    request.credit = { wallet, amount, metered, route }
    request.identity = { ownerId: wallet }
    return undefined
  }

  /**
   * POST /credit/withdraw, signed in: the amount asked (all that is available when none is) is
   * taken from the credit under the Idempotency-Key (sent, or made and answered), then admin pays
   * what the ledger recorded under that key. A repeat takes nothing more: admin answers the first
   * result. A request with an API key is passed on untouched (admin refuses it).
   */
  async function withdrawal(request: FastifyRequest, reply: FastifyReply) {
    const paid = request.credit
    if (!paid || request.method !== 'POST' || request.url.split('?')[0] !== '/credit/withdraw') return
    request.headers['idempotency-key'] ??= generatedIdempotencyKey()
    const key = request.headers['idempotency-key']
    if (typeof key !== 'string' || !/^[A-Za-z0-9_:-]{1,128}$/.test(key)) {
      throw new BadRequest('Idempotency-Key must be 1-128 characters of A-Z a-z 0-9 _ - :')
    }
    reply.header('idempotency-key', key)
    const amount = withdrawalAmount(request.bodyBytes)
    const taken = await take(request, reply, {
      wallet: paid.wallet,
      id: key,
      kind: 'withdraw',
      amount,
      route: 'POST /credit/withdraw',
      ttlMs: withdrawalIdTtlMs,
    })
    if ('short' in taken) {
      throw new InsufficientCredit(
        paid.wallet,
        taken.short.available.toString(),
        'withdrawal is',
        amount === 'all' ? 'at least 1' : amount.toString(),
      )
    }
  }

  return {
    /** the sign-in challenge a 402 carries (extensions["sign-in-with-x"]) */
    signInExtension: (request: FastifyRequest, path: string) => signIn.extension(originOf(request), path),
    meteredHold,
    walletOf,
    pay,
    withdrawal,
    /**
     * The paid routes' onSend, before the answer leaves. A route's price is kept only when the
     * service answered below 400 (as x402 charges are): then the debit is published to the ledger
     * (batched) before the answer goes; if it cannot be, the credit is given back and the answer
     * becomes 503, so nothing is served that the ledger did not record. An answer of 400 or more
     * gives the credit back, and the ledger never hears of it. Metered work's services report
     * their own usage; a metered request the gateway answered itself (never forwarded) reports its
     * hold unused.
     */
    async answered(request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
      const paid = request.credit
      if (!paid || paid.amount === 0n) return payload
      const wallet = paid.wallet.toLowerCase()
      if (paid.metered) {
        if (!forwarded.has(request)) {
          const reason = `answered ${reply.statusCode} by the gateway`
          const usage = { inputTokens: 0, outputTokens: 0 }
          await publisher.usage({ hold: request.id, wallet, amount: '0', usage, outcome: 'failed', reason, at: Date.now() })
        }
        return payload
      }
      if (reply.statusCode >= 400) {
        await giveBack(request, paid.wallet, request.id)
        return payload
      }
      try {
        await publisher.debit({ id: request.id, wallet, kind: 'debit', amount: paid.amount.toString(), route: paid.route, at: Date.now() })
        return payload
      } catch (error) {
        await giveBack(request, paid.wallet, request.id)
        request.log.error({ err: error }, 'a credit debit could not be recorded: not charged, answered 503')
        reply.code(503).type('application/json').removeHeader('content-length').removeHeader('content-encoding')
        return JSON.stringify({
          error: 'the credit debit could not be recorded, so this answer is not given (not charged); try again shortly',
        })
      }
    },
  }
}

export type CreditGuard = ReturnType<typeof createCreditGuard>
