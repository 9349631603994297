import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { createChainClients, eip3009Abi, erc20Abi, transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { identityHeaders, natsChannels, type PaymentCharged } from '@ats/contracts'
import { startTestDevnet, type Devnet } from '@ats/devnet'
import { openBucket } from '@ats/service-kit'
import {
  baseTestEnv,
  eventually,
  scrapeMetric,
  startService,
  startServiceProcess,
  testInfra,
  testInternalToken,
} from '@ats/service-kit/testing'

export { eventually }
import { connect } from 'nats'
import tap, { type Test } from 'tap'
import { createWalletClient, http, toHex, type Address } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { adminService } from '../src/service.ts'

/**
 * Admin on its own, as the gateway sees it: a fresh database and NATS namespace, charged
 * payments published straight to the payments stream, the HTTP API called with the internal
 * token and an admin identity.
 */

/** what the gateway adds to a request of an admin key */
export const adminHeaders = {
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.tier]: 'admin',
  [identityHeaders.keyId]: 'key_test_admin',
}

/**
 * Calls admin's HTTP API as the gateway does for a route without a key: the internal token
 * alone, the body as JSON. Answers the status and the parsed body.
 */
export function internalCall(url: string) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
}

export const devnetChainId = 31337
/** the network as the client named it in its payment */
export const devnetNetwork = 'eip155:31337'

/** A fresh address that holds nothing: a payTo whose balance a test can read to the unit. */
export const freshAddress = (): Address => privateKeyToAccount(generatePrivateKey()).address

export interface ChargeOverrides {
  payTo?: Address
  value?: bigint
  validAfter?: bigint
  validBefore?: bigint
  nonce?: `0x${string}`
  route?: string
  chargedAt?: number
}

/**
 * A charged payment as a gateway publishes it: an EIP-3009 TransferWithAuthorization of
 * `value` (10000 by default) USDC base units from `payer` to `payTo`, signed by the payer for
 * the USDC at `asset`, valid for a minute.
 */
export async function signCharge(asset: Address, payer: PrivateKeyAccount, overrides: ChargeOverrides = {}): Promise<PaymentCharged> {
  const now = BigInt(Math.floor(Date.now() / 1000))
  const authorization = {
    from: payer.address,
    to: overrides.payTo ?? freshAddress(),
    value: overrides.value ?? 10_000n,
    validAfter: overrides.validAfter ?? now - 5n,
    validBefore: overrides.validBefore ?? now + 60n,
    nonce: overrides.nonce ?? toHex(randomBytes(32)),
  }
  const signature = await payer.signTypedData({
    domain: usdcDomain(devnetChainId, asset),
    types: transferWithAuthorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: authorization,
  })
  const route = overrides.route ?? '/agent/skills'
  return {
    payer: payer.address,
    payTo: authorization.to,
    asset,
    chainId: devnetChainId,
    network: devnetNetwork,
    x402Version: 1,
    authorization: {
      from: authorization.from,
      to: authorization.to,
      value: String(authorization.value),
      validAfter: String(authorization.validAfter),
      validBefore: String(authorization.validBefore),
      nonce: authorization.nonce,
    },
    signature,
    method: 'GET',
    route,
    resource: `http://gateway.test${route}`,
    requestId: `req-${randomBytes(4).toString('hex')}`,
    chargedAt: overrides.chargedAt ?? Date.now(),
  }
}

export interface RecentPayment {
  payer: string
  amount: string
  route: string
  paidAt: number
  requestId: string
  settlement: 'pending' | 'settling' | 'settled' | 'failed' | 'skipped' | 'voided'
  txHash: string | null
  settleError: string | null
  jobId: string | null
  voidReason: string | null
}

/** A filter of recent payments by their settlement state. */
export const inState = (state: RecentPayment['settlement']) => (p: RecentPayment) => p.settlement === state

const adminEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url))

export interface AdminOptions {
  /** run admin as a child process (its pid returned), so a test can SIGKILL it */
  process?: boolean
  /** the environment of an earlier admin (same database and namespace): a restarted admin */
  env?: NodeJS.ProcessEnv
}

/**
 * Admin on a fresh database and namespace, with a NATS connection of the test's own to publish
 * charges on (as a gateway does) and to look at the stream and the blocked-payers bucket.
 */
export async function startAdmin(t: Test, extra: NodeJS.ProcessEnv = {}, options: AdminOptions = {}) {
  const env: NodeJS.ProcessEnv = options.env ?? { ...(await baseTestEnv(t)), ...extra }
  // a child process (`tsx src/server.ts`) when the test kills it; pid is set then
  const svc: { url: string; pid?: number } = options.process
    ? await startServiceProcess(t, adminEntry, env)
    : await startService(t, adminService, env)
  const payments = natsChannels(env.NATS_NAMESPACE!).admin.payments

  const nc = await connect({ servers: (await testInfra()).natsUrl })
  t.teardown(() => nc.close())
  const js = nc.jetstream()
  const jsm = await nc.jetstreamManager()
  const blockedPayers = await openBucket(nc, payments.blockedPayers)

  const call = async (method: string, path: string) => {
    const res = await fetch(`${svc.url}${path}`, { method, headers: adminHeaders })
    return { status: res.status, body: (await res.json()) as any }
  }

  /** GET /admin/revenue, which must answer 200 */
  const revenue = async () => {
    const res = await call('GET', '/admin/revenue')
    if (res.status !== 200) throw new Error(`GET /admin/revenue answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body as {
      totalUsdc: string
      totalUsd: string
      uniquePayers: number
      requestCount: number
      recentPayments: RecentPayment[]
      settlements: Record<string, { count: number; totalUsdc: string }>
      backlog: { count: number; oldestPaidAt: number | null; lagMs: number }
    } & Record<string, unknown>
  }

  /** the recent payments once `done` says they are all there */
  const paymentsWhen = (what: string, done: (payments: RecentPayment[]) => boolean, timeoutMs?: number) =>
    eventually(
      what,
      async () => {
        const { recentPayments } = await revenue()
        return done(recentPayments) ? recentPayments : undefined
      },
      timeoutMs,
    )

  return {
    svc,
    env,
    payments,
    nc,
    jsm,
    blockedPayers,
    call,
    revenue,
    paymentsWhen,
    /** ats_payments_total on admin's /metrics, by state */
    paymentsCounted: () => scrapeMetric(svc.url, 'ats_payments_total'),
    /** publishes one PaymentsCharged batch to the payments stream, as a gateway does */
    publish: (charges: PaymentCharged[]) => js.publish(payments.charged.subject, payments.charged.message.encode({ charges })),
  }
}

let devnet: Promise<Devnet> | undefined
let funding: Promise<unknown> = Promise.resolve()

/**
 * One devnet per test file, stopped when the file ends: it is infrastructure, like Postgres
 * (starting one takes ~5 s). Tests stay apart by using fresh payers and a fresh payTo each.
 */
function sharedDevnet(): Promise<Devnet> {
  devnet ??= startTestDevnet(tap).then((started) => started.devnet)
  return devnet
}

/**
 * The devnet's USDC: balances, and fresh payers funded from devnet account 1 (they need no
 * ETH: the server wallet, devnet account 0, pays the gas of settlement).
 */
export async function devnetUsdc() {
  const net = await sharedDevnet()
  const usdc = net.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const { publicClient } = createChainClients({ rpcUrl: net.rpcUrl, chainId: devnetChainId })
  const funder = createWalletClient({ account: privateKeyToAccount(net.accounts[1]!.privateKey), transport: http(net.rpcUrl) })
  const balanceOf = (owner: Address) =>
    publicClient.readContract({ address: usdc, abi: eip3009Abi, functionName: 'balanceOf', args: [owner] })

  /** Sends `amount` USDC base units from devnet account 1 to `to` (one transfer at a time: they share its nonces). */
  const fund = (to: Address, amount: bigint) => {
    const sent = funding.then(async () => {
      const hash = await funder.writeContract({ chain: null, address: usdc, abi: erc20Abi, functionName: 'transfer', args: [to, amount] })
      await publicClient.waitForTransactionReceipt({ hash })
    })
    funding = sent.catch(() => undefined)
    return sent
  }

  /** A new account holding `amount` USDC base units and nothing else. */
  const fundedPayer = async (amount: bigint) => {
    const account = privateKeyToAccount(generatePrivateKey())
    await fund(account.address, amount)
    return account
  }

  return {
    devnet: net,
    usdc,
    publicClient,
    serverWallet: net.accounts[0]!.address,
    balanceOf,
    fund,
    fundedPayer,
    env: {
      RPC_URL: net.rpcUrl,
      CHAIN_ID: String(devnetChainId),
      ADDRESS_BOOK: net.addressBookPath!,
      SERVER_WALLET_PRIVATE_KEY: net.accounts[0]!.privateKey,
    },
  }
}

/** Admin settling on the devnet from the server wallet (devnet account 0), looking for due payments every 100 ms. */
export async function startSettlingAdmin(t: Test, extra: NodeJS.ProcessEnv = {}) {
  const chain = await devnetUsdc()
  const admin = await startAdmin(t, { ...chain.env, SETTLEMENT_INTERVAL_MS: '100', ...extra })
  return { ...admin, chain }
}
