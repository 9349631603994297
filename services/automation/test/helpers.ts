import { adminService } from '@ats/admin/service'
import { marketDataService } from '@ats/market-data/service'
import { erc20Abi } from '@ats/chain'
import { identityHeaders } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { fileURLToPath } from 'node:url'
import { baseTestEnv, startService, startServiceProcess, testInternalToken } from '@ats/service-kit/testing'
import { tradingService } from '@ats/trading/service'
import type { Test } from 'tap'
import { getAddress, type Address } from 'viem'
import { automationService } from '../src/service.ts'

export { eventually } from '@ats/service-kit/testing'
export const adminKey = 'atsk_automationTestBootstrapKey-00000'
const serverEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url))

/** What the gateway adds to a request of an API key. */
export const keyHeaders = (keyId: string, wallet?: string) => ({
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.ownerId]: keyId,
  [identityHeaders.keyId]: keyId,
  [identityHeaders.tier]: 'readwrite',
  ...(wallet ? { [identityHeaders.wallet]: wallet } : {}),
})

/**
 * The automation service with what its runs call: admin (key policies) and trading (server
 * wallet: devnet account 0) on a devnet, one database and NATS namespace; with `marketEnv`,
 * market-data too (the prices stop orders watch). `schedulers` automation replicas share them:
 * the first in this process (`url`), the others as child processes.
 */
export async function startAutomationStack(
  t: Test,
  options: { schedulers?: number; env?: NodeJS.ProcessEnv; tradingEnv?: NodeJS.ProcessEnv; marketEnv?: NodeJS.ProcessEnv } = {},
) {
  const { devnet, chainEnv, publicClient } = await startTestDevnet(t)
  const env: NodeJS.ProcessEnv = { ...(await baseTestEnv(t)), ...chainEnv }
  // started together: neither needs the other to start, and each waits on its database and NATS
  const [admin, trading] = await Promise.all([
    startService(t, adminService, { ...env, ADMIN_API_KEY: adminKey, SETTLEMENT_ENABLED: 'false' }),
    startService(t, tradingService, { ...env, SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey, ...options.tradingEnv }),
    options.marketEnv ? startService(t, marketDataService, { ...env, ...options.marketEnv }) : undefined,
  ])
  const automationEnv = { ...env, AUTOMATION_MIN_INTERVAL_MS: '1000', AUTOMATION_TICK_MS: '100', ...options.env }
  const schedulers: Array<{ url: string }> = [await startService(t, automationService, automationEnv)]
  // the others as processes of their own, as replicas run: each its own connections, clock and event loop
  const replicas = Array.from({ length: (options.schedulers ?? 1) - 1 }, () =>
    startServiceProcess(t, serverEntry, { ...automationEnv, LOG_LEVEL: 'warn' }),
  )
  schedulers.push(...(await Promise.all(replicas)))

  const call = async (path: string, init: { method?: string; body?: unknown; headers: Record<string, string>; via?: number }) => {
    const res = await fetch(`${schedulers[init.via ?? 0]!.url}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { ...init.headers, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    })
    const text = await res.text()
    return { status: res.status, body: text ? (JSON.parse(text) as any) : undefined }
  }
  /** A real API key (trading asks admin for its spend policy): its id. */
  const createKey = async (wallet?: string, policy?: Record<string, unknown>) => {
    const res = await fetch(`${admin.url}/admin/keys`, {
      method: 'POST',
      headers: {
        [identityHeaders.internalToken]: testInternalToken,
        [identityHeaders.keyId]: 'key_admin',
        [identityHeaders.tier]: 'admin',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ tier: 'readwrite', label: 'automation test', ...(wallet ? { wallet } : {}), ...(policy ? { policy } : {}) }),
    })
    const body = (await res.json()) as { id: string }
    if (res.status !== 201) throw new Error(`no key: ${JSON.stringify(body)}`)
    return body.id
  }
  const token = (symbol: string) => getAddress(devnet.book.tokens.find((entry) => entry.symbol === symbol)!.address as Address)
  const balanceOf = (symbol: string, owner: Address) =>
    publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

  /** The swaps the server wallet sent (to either DEX router) in blocks after `from`. */
  async function swapsSince(from: bigint) {
    const routers = [devnet.book.uniswapV3.swapRouter02, devnet.book.algebra.swapRouter].map((a) => getAddress(a as Address))
    const latest = await publicClient.getBlockNumber({ cacheTime: 0 })
    const hashes: string[] = []
    for (let n = from + 1n; n <= latest; n++) {
      const block = await publicClient.getBlock({ blockNumber: n, includeTransactions: true })
      for (const tx of block.transactions) {
        if (getAddress(tx.from) === getAddress(devnet.accounts[0]!.address) && tx.to && routers.includes(getAddress(tx.to)))
          hashes.push(tx.hash)
      }
    }
    return hashes
  }

  return {
    devnet,
    publicClient,
    env,
    automationEnv,
    schedulers,
    url: schedulers[0]!.url,
    tradingUrl: trading.url,
    call,
    createKey,
    token,
    balanceOf,
    swapsSince,
  }
}
