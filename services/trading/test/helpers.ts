import { adminService } from '@ats/admin/service'
import { erc20Abi } from '@ats/chain'
import { identityHeaders, isAwaitingApproval, type AwaitingApproval, type SwapResult } from '@ats/contracts'
import { startTestDevnet } from '@ats/devnet'
import { baseTestEnv, startService, testInternalToken } from '@ats/service-kit/testing'
import type { Test } from 'tap'
import type { Address } from 'viem'
import { tradingService } from '../src/service.ts'

export { eventually } from '@ats/service-kit/testing'

/** The swap an execute over NATS answered; throws when it was held for approval instead. */
export function swapOf(answer: SwapResult | AwaitingApproval): SwapResult {
  if (isAwaitingApproval(answer)) throw new Error(`the swap was held for approval ${answer.approval.id}`)
  return answer
}

/** What the gateway adds to a request of an API key. */
export const keyHeaders = (keyId: string, tier = 'readwrite') => ({
  [identityHeaders.internalToken]: testInternalToken,
  [identityHeaders.tier]: tier,
  [identityHeaders.keyId]: keyId,
  [identityHeaders.ownerId]: keyId,
})

export interface TradingOptions {
  /** give trading the server wallet (devnet account 0); true by default */
  wallet?: boolean
  env?: NodeJS.ProcessEnv
}

/**
 * A devnet of the test's own, admin (spend policies live on its keys) and trading, on a
 * fresh database and NATS namespace. `call` speaks to trading as the gateway would.
 */
export async function startTrading(t: Test, { wallet = true, env = {} }: TradingOptions = {}) {
  const { devnet, chainEnv, publicClient } = await startTestDevnet(t)
  const base = await baseTestEnv(t)
  const admin = await startService(t, adminService, { ...base, ...chainEnv, SETTLEMENT_ENABLED: 'false' })
  const trading = await startService(t, tradingService, {
    ...base,
    ...chainEnv,
    ...(wallet ? { SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey } : {}),
    ...env,
  })
  const token = (symbol: string) => devnet.book.tokens.find((t) => t.symbol === symbol)!
  const balanceOf = (symbol: string, owner: Address) =>
    publicClient.readContract({ address: token(symbol).address, abi: erc20Abi, functionName: 'balanceOf', args: [owner] })
  const serverWallet = devnet.accounts[0]!.address

  const call = async (
    method: string,
    path: string,
    { body, keyId = defaultKey.id, headers = {} }: { body?: unknown; keyId?: string; headers?: Record<string, string> } = {},
  ) => {
    const res = await fetch(`${trading.url}${path}`, {
      method,
      headers: { ...keyHeaders(keyId), ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as any) : undefined }
  }

  /** An API key made through admin's own route, with an optional spend policy and bound wallet. */
  const createKey = async (policy?: unknown, wallet?: Address): Promise<{ id: string }> => {
    const res = await fetch(`${admin.url}/admin/keys`, {
      method: 'POST',
      headers: { ...keyHeaders('key_test_admin', 'admin'), 'content-type': 'application/json' },
      body: JSON.stringify({ tier: 'readwrite', label: 'trader', ...(policy ? { policy } : {}), ...(wallet ? { wallet } : {}) }),
    })
    if (res.status !== 201) throw new Error(`could not create a key: ${res.status} ${await res.text()}`)
    return (await res.json()) as { id: string }
  }

  // the key the calls are made with unless they name another: admin knows it, as the gateway's keys;
  // its policy lifts the default caps ($500 a swap and a day) for the tests' larger swaps
  const defaultKey = await createKey({ maxUsdPerSwap: 1_000_000, maxUsdPerDay: 10_000_000 })

  /** another trading process on the same database and namespace, spending from the server wallet, with `env` on top */
  const replica = (t: Test, env: NodeJS.ProcessEnv) =>
    startService(t, tradingService, { ...base, ...chainEnv, SERVER_WALLET_PRIVATE_KEY: devnet.accounts[0]!.privateKey, ...env })

  return { devnet, admin, trading, base, chainEnv, publicClient, token, balanceOf, serverWallet, call, createKey, replica }
}
