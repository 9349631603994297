import { randomBytes } from 'node:crypto'
import { eip3009Abi, transferWithAuthorizationTypes, usdcDomain } from '@ats/chain'
import { startTestDevnet } from '@ats/devnet'
import { baseTestEnv, startService, testInfra } from '@ats/service-kit/testing'

export { eventually } from '@ats/service-kit/testing'
import { createWalletClient, erc20Abi, http, toHex, type Address } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import Fastify from 'fastify'
import { once } from 'node:events'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { adminService } from '@ats/admin/service'
import { gatewayService } from '@ats/gateway/service'
import { tradingService } from '@ats/trading/service'
import { agentService } from '@ats/agent/service'
import { automationService } from '@ats/automation/service'
import { marketDataService } from '@ats/market-data/service'
import { startUpstreams } from '@ats/market-data/testing'
import { jsonRequest, type JsonRequestInit } from './jsonRequest.ts'

export const adminKey = 'atsk_gatewayTestBootstrapKey-00000000'
type TestDevnet = Awaited<ReturnType<typeof startTestDevnet>>

/**
 * An echo upstream standing in for the services a test does not start: it answers
 * with what it received, so tests can see what the gateway forwards.
 */
export async function startEcho(t: Test) {
  const app = Fastify()
  app.all('/*', async (request, reply) => {
    // a path the service does not have, to see what the gateway does with a service's 4xx
    if (request.url.includes('/missing')) return reply.code(404).send({ error: `no route ${request.url}` })
    return { path: request.url, headers: request.headers }
  })
  t.teardown(() => app.close())
  return app.listen({ port: 0, host: '127.0.0.1' })
}

/**
 * A local webhook receiver (admin needs WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_ADDRESSES for it): every request it got, in order,
 * recorded when it arrives; `answer` gives the status, and may hold the answer back by resolving later.
 */
export async function startReceiver(t: Test, answer: () => number | Promise<number> = () => 204) {
  const received: Array<{ headers: IncomingHttpHeaders; body: string }> = []
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    received.push({ headers: req.headers, body: Buffer.concat(chunks).toString() })
    res.statusCode = await answer()
    res.end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return { received, url: (path: string) => `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}` }
}

export interface FleetOptions {
  gateways?: number
  gatewayEnv?: NodeJS.ProcessEnv
  adminEnv?: NodeJS.ProcessEnv
  /** where the services the test does not start are: the echo upstream by default */
  otherServices?: string
  /** where the trading service is (otherServices by default) */
  tradingUrl?: string
  /** the database, namespace and internal token to share (a fresh set by default) */
  env?: NodeJS.ProcessEnv
}

/** Admin on a fresh database plus one or more gateways, over real Postgres, NATS and Redis. */
export async function startFleet(t: Test, options: FleetOptions = {}) {
  const env = options.env ?? (await baseTestEnv(t))
  const { redisUrl } = await testInfra()
  const adminEnv = { ...env, ADMIN_API_KEY: adminKey, ...options.adminEnv }
  const admin = await startService(t, adminService, adminEnv)
  const others = options.otherServices ?? (await startEcho(t))
  const gatewayEnv: NodeJS.ProcessEnv = {
    ...env,
    REDIS_URL: redisUrl,
    ADMIN_URL: admin.url,
    AGENT_URL: others,
    TRADING_URL: options.tradingUrl ?? others,
    MARKET_DATA_URL: others,
    AUTOMATION_URL: others,
    ...options.gatewayEnv,
  }
  const gateways: Array<{ url: string }> = []
  for (let i = 0; i < (options.gateways ?? 1); i++) gateways.push(await startService(t, gatewayService, gatewayEnv))
  const gateway = gateways[0]!

  const request = (path: string, init: JsonRequestInit & { via?: number } = {}) =>
    jsonRequest(`${gateways[init.via ?? 0]!.url}${path}`, init)

  const createKey = async (tier: string, label = `${tier} key`, policy?: Record<string, unknown>) => {
    const res = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier, label, ...(policy ? { policy } : {}) } })
    if (res.status !== 201) throw new Error(`could not create a key: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body as { id: string; key: string; tier: string }
  }

  return { admin, adminEnv, gateway, gateways, gatewayEnv, request, createKey }
}

export interface PaymentOverrides {
  /** the signer (default devnet account 1) */
  payer?: PrivateKeyAccount
  value?: bigint
  to?: Address
  validAfter?: bigint
  validBefore?: bigint
  network?: string
}

/**
 * A devnet (on its own port) plus the fleet with payments on: PAY_TO is devnet account 9,
 * the payer devnet account 1, admin settles from account 0. `pay()` signs a fresh v1 X-PAYMENT header by hand.
 */
export async function startPaidFleet(t: Test, options: FleetOptions & { chain?: TestDevnet } = {}) {
  const { devnet, chainEnv: chain, publicClient } = options.chain ?? (await startTestDevnet(t))
  const payTo = devnet.accounts[9]!.address
  const fleet = await startFleet(t, {
    ...options,
    gatewayEnv: { PAY_TO: payTo, ...chain, ...options.gatewayEnv },
    // admin settles on chain from the server wallet, devnet account 0
    adminEnv: { ...chain, SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey, ...options.adminEnv },
  })
  const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey)
  const pay = async (overrides: PaymentOverrides = {}) => {
    const now = BigInt(Math.floor(Date.now() / 1000))
    const signer = overrides.payer ?? payer
    const authorization = {
      from: signer.address,
      to: overrides.to ?? payTo,
      value: overrides.value ?? 10_000n,
      validAfter: overrides.validAfter ?? now - 5n,
      validBefore: overrides.validBefore ?? now + 600n,
      nonce: toHex(randomBytes(32)),
    }
    const signature = await signer.signTypedData({
      domain: usdcDomain(31337, usdc),
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: authorization,
    })
    const header = {
      x402Version: 1,
      scheme: 'exact',
      network: overrides.network ?? 'eip155:31337',
      payload: { signature, authorization: Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, String(v)])) },
    }
    return Buffer.from(JSON.stringify(header)).toString('base64')
  }
  const balanceOf = (owner: Address) =>
    publicClient.readContract({ address: usdc, abi: eip3009Abi, functionName: 'balanceOf', args: [owner] })
  return { ...fleet, devnet, publicClient, payTo, payer, usdc, pay, balanceOf }
}

type FundingFleet = Pick<Awaited<ReturnType<typeof startPaidFleet>>, 'devnet' | 'publicClient' | 'usdc'>

/** Sends `amount` USDC base units of a paid fleet's devnet to `to`, from devnet account 1 (it holds no ETH). */
export async function fundAccount(fleet: FundingFleet, to: Address, amount: bigint): Promise<void> {
  const funder = createWalletClient({
    account: privateKeyToAccount(fleet.devnet.accounts[1]!.privateKey as `0x${string}`),
    transport: http(fleet.devnet.rpcUrl),
  })
  const hash = await funder.writeContract({
    chain: null,
    address: fleet.usdc,
    abi: erc20Abi,
    functionName: 'transfer',
    args: [to, amount],
  })
  await fleet.publicClient.waitForTransactionReceipt({ hash })
}

/** A fresh account holding `amount` USDC base units (fundAccount). */
export async function fundedAccount(fleet: FundingFleet, amount: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey())
  await fundAccount(fleet, account.address, amount)
  return account
}

/** trading's signers on the devnet: the server wallet (account 0) and the delegate that swaps under users’ grants (account 8) */
export const walletKeys = (devnet: { accounts: Array<{ privateKey: string }> }) => ({
  SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey,
  GRANT_DELEGATE_PRIVATE_KEY: devnet.accounts[8]!.privateKey,
})

/**
 * The devnet, admin, trading (server wallet: devnet account 0) and a gateway: swaps, positions
 * and the launchpad through the gateway as a client sees them.
 */
export async function startTradingFleet(t: Test, options: { tradingEnv?: NodeJS.ProcessEnv; marketData?: boolean } = {}) {
  const { devnet, chainEnv: chain, publicClient } = await startTestDevnet(t)
  const env = await baseTestEnv(t)
  // trading's settings without the server wallet, for a second, walletless trading service
  const tradingEnv = { ...env, ...chain, ...options.tradingEnv }
  const trading = await startService(t, tradingService, { ...tradingEnv, ...walletKeys(devnet) })
  // market-data on the same devnet, when a test asks for it (marketData)
  const market = options.marketData
    ? await startService(t, marketDataService, { ...env, ...chain, REDIS_URL: (await testInfra()).redisUrl })
    : undefined
  // the trading service shares the fleet's database and namespace: admin answers its policy lookups
  const gatewayEnv = { ...chain, ...(market ? { MARKET_DATA_URL: market.url } : {}) }
  const fleet = await startFleet(t, { env, tradingUrl: trading.url, gatewayEnv, adminEnv: { ...chain, SETTLEMENT_ENABLED: 'false' } })
  return { ...fleet, devnet, trading, tradingEnv, publicClient, serverWallet: devnet.accounts[0]!.address }
}

/**
 * The whole agent path with payments on: the devnet, admin, trading (server wallet: devnet
 * account 0), market-data, the agent (workers inside) and a gateway with PAY_TO. The payer is
 * devnet account 1 (`pay()`), another payer `pay({ payer })`.
 */
export async function startAgentFleet(
  t: Test,
  options: {
    agentEnv?: NodeJS.ProcessEnv
    marketEnv?: NodeJS.ProcessEnv
    gatewayEnv?: NodeJS.ProcessEnv
    automationEnv?: NodeJS.ProcessEnv
    /** admin's settings (settlement is off by default) */
    adminEnv?: NodeJS.ProcessEnv
    /** how many trading and automation processes (1 each by default); the gateway knows the first */
    replicas?: { trading?: number; automation?: number }
    /** the database (a fresh one by default): e.g. one a backup was restored into */
    databaseUrl?: string
  } = {},
) {
  const chain = await startTestDevnet(t)
  const env = { ...(await baseTestEnv(t)), ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}), ...chain.chainEnv }
  // the public APIs market-data can be pointed at (marketEnv PRICE_SOURCE=coingecko), stood in for locally
  const upstreams = await startUpstreams(t)
  const tradings = []
  for (let i = 0; i < (options.replicas?.trading ?? 1); i++) {
    tradings.push(await startService(t, tradingService, { ...env, ...walletKeys(chain.devnet) }))
  }
  const trading = tradings[0]!
  const market = await startService(t, marketDataService, {
    ...env,
    REDIS_URL: (await testInfra()).redisUrl,
    COINGECKO_URL: upstreams.base.coingecko,
    POLYMARKET_GAMMA_URL: upstreams.base.gamma,
    ...options.marketEnv,
  })
  const agent = await startService(t, agentService, { ...env, ...options.agentEnv })
  // the automation service, when a test asks for it (automationEnv)
  const automations = []
  for (let i = 0; options.automationEnv && i < (options.replicas?.automation ?? 1); i++) {
    automations.push(await startService(t, automationService, { ...env, ...options.automationEnv }))
  }
  const automation = automations[0]
  const fleet = await startPaidFleet(t, {
    chain,
    env,
    tradingUrl: trading.url,
    gatewayEnv: {
      AGENT_URL: agent.url,
      MARKET_DATA_URL: market.url,
      ...(automation ? { AUTOMATION_URL: automation.url } : {}),
      ...options.gatewayEnv,
    },
    adminEnv: { SETTLEMENT_ENABLED: 'false', ...options.adminEnv },
  })
  return { ...fleet, agent, upstreams, tradings, automations, serverWallet: chain.devnet.accounts[0]!.address }
}
