import { adminService } from '@ats/admin/service'
import { identityHeaders } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { marketDataService } from '@ats/market-data/service'
import { startUpstreams } from '@ats/market-data/testing'
import { baseTestEnv, startService, testInfra, testInternalToken } from '@ats/service-kit/testing'
import { tradingService } from '@ats/trading/service'
import tap, { type Test } from 'tap'
import { agentService } from '../src/service.ts'

export { eventually } from '@ats/service-kit/testing'
export const adminKey = 'atsk_agentTestBootstrapKey-0000000000'

/** What the gateway adds to a paid request of `payer`. */
export const payerHeaders = (payer: string) => ({ [identityHeaders.internalToken]: testInternalToken, [identityHeaders.ownerId]: payer })
/** What the gateway adds to a request of an API key. */
export const keyHeaders = (keyId: string, tier = 'readonly', wallet?: string) => ({
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.ownerId]: keyId,
  [identityHeaders.keyId]: keyId,
  [identityHeaders.tier]: tier,
  ...(wallet ? { 'x-ats-key-wallet': wallet } : {}),
})

/** Calls an agent API process as `payer` (through no gateway): JSON in, JSON out. */
export const payerCall = (url: string, payer: string) => async (path: string, body?: unknown) => {
  const res = await fetch(`${url}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { ...payerHeaders(payer), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  return (await res.json()) as any
}

export interface StackOptions<A = undefined> {
  agentEnv?: NodeJS.ProcessEnv
  marketEnv?: NodeJS.ProcessEnv
  tradingEnv?: NodeJS.ProcessEnv
  /** start no agent (a test starts its own, e.g. as a child process) */
  noAgent?: boolean
  /**
   * started with the services, given the agent's settings, and returned as `alongside`: a worker
   * process takes seconds to load, which need not wait for the services to start
   */
  alongside?: (agentEnv: NodeJS.ProcessEnv) => Promise<A>
}

let fileDevnet: ReturnType<typeof startTestDevnet> | undefined

/**
 * One devnet for all the stacks of a test file, stopped when the file ends: deploying one
 * takes seconds. A file's tests run one at a time, so each still has the chain to itself;
 * its assertions about the chain are relative (nonces, blocks since it started).
 */
export const devnetOfFile = () => (fileDevnet ??= startTestDevnet(tap))

/**
 * The agent with what its tools call: admin, trading (server wallet: devnet account 0) and
 * market-data on the file's devnet, one database and NATS namespace, plus the fake public APIs
 * market-data can be pointed at (only the internet is replaced). `call` speaks as the gateway.
 */
export async function startStack<A = undefined>(t: Test, options: StackOptions<A> = {}) {
  const { devnet, chainEnv, publicClient } = await devnetOfFile()
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ...chainEnv }
  const agentEnv = { ...env, AGENT_ACK_WAIT_MS: '2000', ...options.agentEnv }
  const started = options.alongside?.(agentEnv)
  // awaited once the services are up; should one of them fail first, it must not go unhandled
  started?.catch(() => undefined)
  // the fake APIs are closed before market-data (teardowns run last first): a request they hold
  // ('hang') ends at once instead of holding market-data's close until SOURCE_TIMEOUT_MS
  let closeUpstreams: (() => unknown) | undefined
  const stopUpstreams = async () => {
    const close = closeUpstreams
    closeUpstreams = undefined
    await close?.()
  }
  const upstreams = await startUpstreams({ teardown: (fn: () => unknown) => (closeUpstreams = fn) } as unknown as Test)
  t.teardown(stopUpstreams)
  const admin = await startService(t, adminService, { ...env, ADMIN_API_KEY: adminKey, SETTLEMENT_ENABLED: 'false' })
  const trading = await startService(t, tradingService, {
    ...env,
    SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey,
    ...options.tradingEnv,
  })
  await startService(t, marketDataService, {
    ...env,
    REDIS_URL: (await testInfra()).redisUrl,
    COINGECKO_URL: upstreams.base.coingecko,
    POLYMARKET_GAMMA_URL: upstreams.base.gamma,
    GECKOTERMINAL_URL: upstreams.base.geckoterminal,
    ...options.marketEnv,
  })
  t.teardown(stopUpstreams)
  const agent = options.noAgent ? undefined : await startService(t, agentService, agentEnv)

  const call = async (path: string, init: { method?: string; body?: unknown; headers: Record<string, string> }) => {
    const res = await fetch(`${agent!.url}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { ...init.headers, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as any) : undefined }
  }
  const adminCall = async (path: string, method: string, body?: unknown) => {
    const res = await fetch(`${admin.url}${path}`, {
      method,
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        [identityHeaders.keyId]: 'key_admin',
        [identityHeaders.tier]: 'admin',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  /** trading's approvals as an admin key decides them (POST /approvals/:id/approve or reject) */
  const decide = async (approvalId: string, decision: 'approve' | 'reject', body?: unknown) => {
    const res = await fetch(`${trading.url}/approvals/${approvalId}/${decision}`, {
      method: 'POST',
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        [identityHeaders.keyId]: 'key_admin',
        [identityHeaders.tier]: 'admin',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const alongside = (await started) as A
  return {
    devnet,
    publicClient,
    env,
    agentEnv,
    upstreams,
    agent,
    call,
    adminCall,
    decide,
    serverWallet: devnet.accounts[0]!.address,
    alongside,
  }
}

export type Stack = Awaited<ReturnType<typeof startStack>>

/** Polls a job of `payer` until it is finished (or `status`), and returns it. */
export async function waitForJob(
  call: Stack['call'],
  payer: string,
  jobId: string,
  until = ['complete', 'failed', 'cancelled'],
  timeoutMs = 20_000,
) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const res = await call(`/agent/job/${jobId}`, { headers: payerHeaders(payer) })
    if (until.includes(res.body?.status)) return res.body
    if (Date.now() > deadline) throw new Error(`job ${jobId} still ${res.body?.status} after ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}
