import { randomBytes } from 'node:crypto'
import { creditHeaders, identityHeaders, natsChannels, type CreditAdjusted, type CreditDebit, type CreditUsage } from '@ats/contracts'
import { testInternalToken } from '@ats/service-kit/testing'
import pg from 'pg'
import type { Test } from 'tap'
import type { Address } from 'viem'
import type { PrivateKeyAccount } from 'viem/accounts'
import { eventually, freshAddress, signCharge, startAdmin } from './helpers.ts'

/**
 * Prepaid credit in admin, driven as the gateways and metered services drive it: debits and usage
 * reports published to the credit stream, top-ups answered through the route with the payment the
 * gateway verified, their payments charged on the payments stream and settled in the table (as the
 * settler would), GET /credit and POST /credit/withdraw with the identity headers the gateway sets.
 */
export async function startCreditAdmin(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const admin = await startAdmin(t, { SETTLEMENT_ENABLED: 'false', CREDIT_SWEEP_MS: '50', ...extra })
  const ns = admin.env.NATS_NAMESPACE!
  const channels = natsChannels(ns).admin
  const credit = channels.credit
  const js = admin.nc.jetstream()
  const sql = new pg.Pool({ connectionString: admin.env.DATABASE_URL, options: '-c search_path=admin', max: 2 })
  t.teardown(() => sql.end())

  const headersOf = (wallet?: string, extraHeaders: Record<string, string> = {}) => ({
    [identityHeaders.internalToken]: testInternalToken,
    ...(wallet ? { [creditHeaders.wallet]: wallet.toLowerCase() } : {}),
    ...extraHeaders,
  })

  const call = async (method: string, path: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${admin.svc.url}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    return { status: res.status, headers: res.headers, body: (await res.json()) as any }
  }

  /** GET /credit signed in with the wallet */
  const account = async (wallet: string) => {
    const res = await call('GET', '/credit', headersOf(wallet))
    if (res.status !== 200) throw new Error(`GET /credit answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body as { wallet: string; available: string; balance: string; held: string; pendingTopUps: any[]; recent: any[] }
  }

  const availableBecomes = (wallet: string, available: bigint, what = `available ${available}`) =>
    eventually(what, async () => {
      const a = await account(wallet)
      return a.available === String(available) ? a : undefined
    })

  let debitBatch = 0
  /** one CreditDebits message, as a gateway publishes it (each call a new message id) */
  const publishDebits = (debits: CreditDebit[]) =>
    js.publish(credit.debited.subject, credit.debited.message.encode({ debits }), {
      msgID: `test-debits-${++debitBatch}-${randomBytes(4).toString('hex')}`,
    })

  const debit = (
    wallet: string,
    amount: bigint,
    kind: CreditDebit['kind'] = 'debit',
    id = `req-${randomBytes(6).toString('hex')}`,
  ): CreditDebit => ({
    id,
    wallet: wallet as Address,
    kind,
    amount: String(amount),
    route: 'GET /agent/skills',
    at: Date.now(),
  })

  const publishUsage = (u: CreditUsage) => js.publish(credit.usage.subject, credit.usage.message.encode(u), { msgID: `usage-${u.hold}` })

  const usage = (wallet: string, hold: string, amount: bigint, outcome: CreditUsage['outcome'] = 'complete'): CreditUsage => ({
    hold,
    wallet: wallet as Address,
    amount: String(amount),
    usage: { model: 'ats-agent', inputTokens: 10, outputTokens: 20 },
    outcome,
    at: Date.now(),
  })

  /** admin.credit.snapshot, as a gateway rebuilding its copy asks it */
  const snapshot = async (wallet: string) => {
    const reply = await admin.nc.request(
      channels.creditSnapshot.subject,
      channels.creditSnapshot.request.encode({ wallet: wallet as Address }),
      {
        timeout: 10_000,
      },
    )
    if (reply.headers?.get('Nats-Service-Error-Code')) throw new Error(`snapshot refused: ${reply.headers.get('Nats-Service-Error')}`)
    return channels.creditSnapshot.reply.decode(reply.data)
  }

  /** every adjustment on the stream so far, oldest first */
  const adjustments = async (): Promise<CreditAdjusted[]> => {
    const info = await admin.jsm.streams.info(credit.stream)
    const out: CreditAdjusted[] = []
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await admin.jsm.streams.getMessage(credit.stream, { seq }).catch(() => undefined)
      if (m?.subject === credit.adjusted.subject) out.push(credit.adjusted.message.decode(m.data))
    }
    return out
  }

  /** the webhook events of a type admin's outbox recorded */
  const events = async (type: string) =>
    (
      await sql.query<{ owner: { wallet?: string }; data: Record<string, unknown> }>(
        'SELECT owner, data FROM event_outbox WHERE type = $1 ORDER BY created_at',
        [type],
      )
    ).rows

  /**
   * A top-up as it happens through the gateway: POST /credit/topup answered with the verified
   * payment, the payment charged on the payments stream; `settle()` marks it settled as the
   * settler does when its transfer is mined.
   */
  const topUp = async (payer: PrivateKeyAccount, amount: bigint) => {
    const charge = await signCharge(freshAddress(), payer, { value: amount, route: '/credit/topup' })
    const nonce = charge.authorization.nonce.toLowerCase()
    const answer = await call(
      'POST',
      `/credit/topup?amount=${amount}`,
      headersOf(undefined, { [identityHeaders.payment]: `${payer.address.toLowerCase()}:${nonce}` }),
    )
    await admin.publish([{ ...charge, method: 'POST' }])
    await eventually('the top-up payment recorded', async () =>
      (await sql.query('SELECT 1 FROM payments WHERE nonce = $1', [nonce])).rowCount ? true : undefined,
    )
    const settle = async (state: 'settled' | 'failed' = 'settled') => {
      await sql.query(`UPDATE payments SET state = $2, tx_hash = $3, settled_at = now() WHERE nonce = $1`, [
        nonce,
        state,
        state === 'settled' ? `0x${randomBytes(32).toString('hex')}` : null,
      ])
    }
    return { answer, nonce, settle }
  }

  /** a wallet with `amount` of spendable credit (a settled top-up) */
  const funded = async (payer: PrivateKeyAccount, amount: bigint) => {
    const { settle } = await topUp(payer, amount)
    await settle()
    await availableBecomes(payer.address, amount, 'the top-up credited')
    return payer.address.toLowerCase()
  }

  return {
    ...admin,
    credit,
    sql,
    call,
    headersOf,
    account,
    availableBecomes,
    publishDebits,
    debit,
    publishUsage,
    usage,
    snapshot,
    adjustments,
    events,
    topUp,
    funded,
  }
}
