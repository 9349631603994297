import { natsChannels } from '@ats/contracts'
import { callEndpoint } from '@ats/service-kit'
import { baseTestEnv, scrapeMetric, startService } from '@ats/service-kit/testing'
import { connect } from 'nats'
import t from 'tap'
import { createWalletClient, http, parseUnits, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { tradingService } from '../src/service.ts'
import { keyHeaders, startTrading, swapOf } from './helpers.ts'

/** Swaps from the server wallet (devnet account 0) on one devnet: executions, idempotency, nonces, spend policies, the launchpad. */
const fleet = await startTrading(t)
const { call, publicClient, serverWallet } = fleet
const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
/** ats_swaps_total on trading's /metrics, by `outcome,via` */
const swapsCounted = () => scrapeMetric(fleet.trading.url, 'ats_swaps_total')

t.test('an execute on each DEX is a mined swap whose balances moved by the reported amounts', async (t) => {
  for (const dex of ['uniswap', 'camelot']) {
    const [usdcBefore, wethBefore] = [await fleet.balanceOf('USDC', serverWallet), await fleet.balanceOf('WETH', serverWallet)]
    const res = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '3000000000', dex } })
    t.equal(res.status, 200, dex)
    t.match(res.body, { success: true, dex, tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '3000000000', route: ['USDC', 'WETH'] })
    const receipt = await publicClient.getTransactionReceipt({ hash: res.body.hash })
    t.equal(receipt.status, 'success', `${dex}: ${res.body.hash} is mined`)
    t.equal(receipt.from.toLowerCase(), serverWallet.toLowerCase())
    t.equal(await fleet.balanceOf('USDC', serverWallet), usdcBefore - 3_000_000_000n, `${dex}: 3000 USDC left the wallet`)
    t.equal(await fleet.balanceOf('WETH', serverWallet), wethBefore + BigInt(res.body.amountOut), `${dex}: the reported WETH arrived`)
    t.ok(BigInt(res.body.amountOut) >= BigInt(res.body.amountOutMinimum))
    t.ok(BigInt(res.body.amountOut) > parseUnits('0.95', 18), `${dex}: about 1 WETH (${res.body.amountOut})`)
  }
})

t.test('every execution is recorded for its key', async (t) => {
  const { id: recorded } = await fleet.createKey()
  const { id: other } = await fleet.createKey()
  const res = await call('POST', '/swap/execute', {
    body: { tokenIn: 'WETH', tokenOut: 'ARB', amountIn: parseUnits('0.01', 18).toString() },
    keyId: recorded,
  })
  t.equal(res.status, 200)
  const list = await call('GET', '/swap/executions', { keyId: recorded })
  t.equal(list.body.executions.length, 1)
  const [row] = list.body.executions
  t.match(row, {
    id: res.body.executionId,
    status: 'success',
    dex: 'uniswap',
    tokenIn: 'WETH',
    tokenOut: 'ARB',
    amountIn: '10000000000000000',
    amountOut: res.body.amountOut,
    hash: res.body.hash,
    requestedBy: { keyId: recorded, jobId: null, automationRunId: null },
  })
  t.ok(row.usdValue > 25 && row.usdValue < 35, `0.01 WETH valued at about $30 (${row.usdValue})`)
  t.equal((await call('GET', `/swap/executions/${row.id}`, { keyId: recorded })).status, 200)
  t.equal((await call('GET', `/swap/executions/${row.id}`, { keyId: other })).status, 404, "another key's execution is not found")
})

t.test('10 concurrent executions from one wallet are all mined, on distinct nonces', async (t) => {
  const before = await nonceOf()
  const results = await Promise.all(
    Array.from({ length: 10 }, (_, i) =>
      call('POST', '/swap/execute', {
        body: { tokenIn: 'USDC', tokenOut: i % 2 ? 'WETH' : 'ARB', amountIn: String(10_000_000 + i), dex: i % 3 ? 'uniswap' : 'camelot' },
      }),
    ),
  )
  t.same(
    results.map((r) => r.status),
    Array(10).fill(200),
  )
  t.same(
    results.map((r) => r.body.success),
    Array(10).fill(true),
  )
  const receipts = await Promise.all(results.map((r) => publicClient.getTransactionReceipt({ hash: r.body.hash })))
  t.same(
    receipts.map((r) => r.status),
    Array(10).fill('success'),
  )
  const nonces = await Promise.all(results.map(async (r) => (await publicClient.getTransaction({ hash: r.body.hash })).nonce))
  t.equal(new Set(nonces).size, 10, 'ten distinct nonces')
  // ten swaps, and an approval of ARB? no: USDC was approved to both routers by the first test
  t.equal((await nonceOf()) - before, 10, 'exactly ten transactions')
})

t.test('the same Idempotency-Key sent 5 times at once makes exactly one transaction', async (t) => {
  const before = await nonceOf()
  const counted = await swapsCounted()
  const body = { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '5000000' }
  const results = await Promise.all(
    Array.from({ length: 5 }, () => call('POST', '/swap/execute', { body, headers: { 'idempotency-key': 'order-5-at-once' } })),
  )
  t.same(
    results.map((r) => r.status),
    Array(5).fill(200),
  )
  t.equal(new Set(results.map((r) => r.body.hash)).size, 1, 'one hash for all five')
  t.equal(results.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 4, 'four answers are replays')
  t.equal((await nonceOf()) - before, 1, 'one transaction on chain')

  const later = await call('POST', '/swap/execute', { body, headers: { 'idempotency-key': 'order-5-at-once' } })
  t.equal(later.body.hash, results[0]!.body.hash, 'a later repeat gets the first result')
  const other = await call('POST', '/swap/execute', {
    body: { ...body, amountIn: '6000000' },
    headers: { 'idempotency-key': 'order-5-at-once' },
  })
  t.equal(other.status, 409)
  t.match(other.body.error, /idempotency key order-5-at-once was used with a different request/)
  const { id: someoneElse } = await fleet.createKey()
  const otherKey = await call('POST', '/swap/execute', { body, keyId: someoneElse, headers: { 'idempotency-key': 'order-5-at-once' } })
  t.equal(otherKey.status, 200)
  t.not(otherKey.body.hash, results[0]!.body.hash, 'keys are per API key: another key swaps on its own')
  t.equal((await nonceOf()) - before, 2)
  t.same(await swapsCounted(), { ...counted, 'success,http': counted['success,http']! + 2 }, 'on /metrics the two swaps, not their replays')
})

t.test('over NATS an execute carries an idempotency key and the job that asked', async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
  const request = {
    tokenIn: 'USDC',
    tokenOut: 'ARB',
    amountIn: '2000000',
    slippageBps: 100,
    idempotencyKey: 'job:j1:step:1',
    jobId: 'job_j1',
  }
  const { id: agentKey } = await fleet.createKey()
  const identity = { keyId: agentKey, ownerId: agentKey }
  const before = await nonceOf()
  const counted = await swapsCounted()
  const [first, second] = await Promise.all([
    callEndpoint(nc, execute, request, { identity, timeoutMs: 30_000 }).then(swapOf),
    callEndpoint(nc, execute, request, { identity, timeoutMs: 30_000 }).then(swapOf),
  ])
  t.equal(first.success, true)
  t.equal(second.hash, first.hash, 'the retried step does not swap twice')
  t.equal((await nonceOf()) - before, 1)
  t.same(await swapsCounted(), { ...counted, 'success,nats': counted['success,nats']! + 1 }, 'counted once, as come over NATS')
  const list = await call('GET', '/swap/executions', { keyId: agentKey })
  t.match(list.body.executions[0], { requestedBy: { keyId: agentKey, jobId: 'job_j1' } })
})

t.test('over NATS without an API key, only a payer on the agent allowlist swaps, within its policy', async (t) => {
  const nc = await connect({ servers: fleet.base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
  const payer = fleet.devnet.accounts[3]!.address
  const request = (key: string, amountIn = '1000000') => ({
    tokenIn: 'USDC',
    tokenOut: 'ARB',
    amountIn,
    slippageBps: 50,
    idempotencyKey: key,
    jobId: 'job_p1',
  })
  await t.rejects(callEndpoint(nc, execute, request('p:1'), { identity: { ownerId: payer }, timeoutMs: 30_000 }), {
    statusCode: 403,
    message: new RegExp(
      `payer ${payer} may not swap from the server wallet: an admin allowlists payers with PUT /admin/agent-payers/:address`,
    ),
  })
  await t.rejects(callEndpoint(nc, execute, request('p:2'), { timeoutMs: 30_000 }), {
    statusCode: 403,
    message: /needs an API key or an allowlisted payer/,
  })

  const allow = await fetch(`${fleet.admin.url}/admin/agent-payers/${payer}`, {
    method: 'PUT',
    headers: { ...keyHeaders('key_test_admin', 'admin'), 'content-type': 'application/json' },
    body: JSON.stringify({ policy: { maxUsdPerSwap: 5, maxUsdPerDay: 6 } }),
  })
  t.equal(allow.status, 200)
  const before = await nonceOf()
  const swapped = swapOf(await callEndpoint(nc, execute, request('p:3', '4000000'), { identity: { ownerId: payer }, timeoutMs: 30_000 }))
  t.equal(swapped.success, true)
  t.equal((await nonceOf()) - before, 1, 'one swap (the router was approved before)')
  await t.rejects(callEndpoint(nc, execute, request('p:4', '6000000'), { identity: { ownerId: payer }, timeoutMs: 30_000 }), {
    statusCode: 403,
    message: new RegExp(
      `refused by the spend policy of payer ${payer}: this swap is worth \\$6\\.00, over its limit of \\$5\\.00 per swap`,
    ),
  })
  await t.rejects(callEndpoint(nc, execute, request('p:5', '3000000'), { identity: { ownerId: payer }, timeoutMs: 30_000 }), {
    statusCode: 403,
    message: /would bring today's swaps and launches \(UTC\) to \$7\.00, over its limit of \$6\.00 per day/,
  })
})

t.test(
  "over NATS a recipient must be the owner's own wallet or on its allowedRecipients: 403 before anything is sent otherwise",
  async (t) => {
    const nc = await connect({ servers: fleet.base.NATS_URL! })
    t.teardown(() => nc.close())
    const { execute } = natsChannels(fleet.base.NATS_NAMESPACE!).trading
    const allowed = fleet.devnet.accounts[4]!.address
    const stranger = fleet.devnet.accounts[5]!.address
    const { id: keyId } = await fleet.createKey({ allowedRecipients: [allowed] })
    const identity = { keyId, ownerId: keyId }
    const request = (key: string, recipient: string) => ({
      tokenIn: 'USDC',
      tokenOut: 'ARB',
      amountIn: '1000000',
      slippageBps: 50,
      recipient,
      idempotencyKey: key,
    })
    const before = await nonceOf()
    await t.rejects(callEndpoint(nc, execute, request('r:1', stranger), { identity, timeoutMs: 30_000 }), {
      statusCode: 403,
      message: `recipient ${stranger} is not allowed for key ${keyId}: the server wallet pays out only to its bound wallet (it has none) or to a recipient an admin allowed for it (allowedRecipients in its spend policy)`,
    })
    t.equal(await nonceOf(), before, 'nothing sent')
    const arbBefore = await fleet.balanceOf('ARB', allowed)
    const paid = swapOf(await callEndpoint(nc, execute, request('r:2', allowed.toLowerCase()), { identity, timeoutMs: 30_000 }))
    t.equal(paid.success, true)
    t.equal((await fleet.balanceOf('ARB', allowed)) - arbBefore, BigInt(paid.amountOut), 'the allowed recipient received what it bought')
  },
)

t.test('when admin does not answer, no swap is made for a key or a payer: 503', async (t) => {
  // a namespace of its own: no admin serves its policy lookups
  const base = await baseTestEnv(t)
  const alone = await startService(t, tradingService, {
    ...base,
    ...fleet.chainEnv,
    SERVER_WALLET_PRIVATE_KEY: fleet.devnet.accounts[0]!.privateKey,
  })
  const before = await nonceOf()
  const body = { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000' }
  const keyed = await fetch(`${alone.url}/swap/execute`, {
    method: 'POST',
    headers: { ...keyHeaders('key_test'), 'x-ats-internal-token': base.INTERNAL_TOKEN!, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  t.equal(keyed.status, 503)
  const nc = await connect({ servers: base.NATS_URL! })
  t.teardown(() => nc.close())
  const { execute } = natsChannels(base.NATS_NAMESPACE!).trading
  await t.rejects(
    callEndpoint(
      nc,
      execute,
      { ...body, slippageBps: 50, idempotencyKey: 'alone:1' },
      { identity: { ownerId: fleet.devnet.accounts[3]!.address }, timeoutMs: 30_000 },
    ),
    {
      statusCode: 503,
      message: /admin/,
    },
  )
  t.equal(await nonceOf(), before, 'nothing was sent')
})

t.test('a swap that reverts on chain answers success: false with its hash', async (t) => {
  // Hold the chain's automine, let the service send a zero-slippage swap, then front-run it
  // with a large swap of another account that pays a higher tip, and mine both.
  const rival = privateKeyToAccount(fleet.devnet.accounts[2]!.privateKey as Hex)
  const prepared = await call('POST', '/swap/prepare', {
    body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '300000000000', from: rival.address },
  })
  const wallet = createWalletClient({ account: rival, transport: http(fleet.devnet.rpcUrl), chain: publicClient.chain })
  const [approval, swap] = prepared.body.transactions
  await publicClient.waitForTransactionReceipt({
    hash: await wallet.sendTransaction({ to: approval.to, data: approval.data, chain: null }),
    pollingInterval: 50,
  })

  const before = await nonceOf()
  await publicClient.request({ method: 'evm_setAutomine' as any, params: [false] as any })
  t.teardown(() => publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any }))
  const pending = call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000000', slippageBps: 0 } })
  for (let i = 0; i < 200 && (await publicClient.getTransactionCount({ address: serverWallet, blockTag: 'pending' })) === before; i++) {
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  await wallet.sendTransaction({
    to: swap.to,
    data: swap.data,
    gas: BigInt(swap.gas),
    maxPriorityFeePerGas: parseUnits('100', 9),
    maxFeePerGas: parseUnits('200', 9),
    chain: null,
  })
  await publicClient.request({ method: 'evm_mine' as any, params: [] as any })
  await publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any })
  const res = await pending
  t.equal(res.status, 200)
  t.equal(res.body.success, false)
  t.equal(res.body.amountOut, '0')
  const receipt = await publicClient.getTransactionReceipt({ hash: res.body.hash })
  t.equal(receipt.status, 'reverted', `${res.body.hash} reverted on chain`)
  const row = await call('GET', `/swap/executions/${res.body.executionId}`)
  t.equal(row.body.status, 'reverted')
})

t.test('a swap not mined in time answers 504; the same Idempotency-Key later picks up that transaction, not a new one', async (t) => {
  // a replica of the service on the same database, with a short receipt timeout
  const impatient = await fleet.replica(t, { RECEIPT_TIMEOUT_MS: '1000' })
  const { id: keyId } = await fleet.createKey()
  const send = () =>
    fetch(`${impatient.url}/swap/execute`, {
      method: 'POST',
      headers: { ...keyHeaders(keyId), 'content-type': 'application/json', 'idempotency-key': 'slow-block' },
      body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '7000000' }),
    })
  const before = await nonceOf()
  await publicClient.request({ method: 'evm_setAutomine' as any, params: [false] as any })
  t.teardown(() => publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any }))
  const first = await send()
  t.equal(first.status, 504)
  t.match(
    ((await first.json()) as { error: string }).error,
    /was sent but not mined within 1000 ms; repeat the request with the same Idempotency-Key/,
  )
  await publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any })
  await publicClient.request({ method: 'evm_mine' as any, params: [] as any })
  const second = await send()
  t.equal(second.status, 200)
  const body = (await second.json()) as { success: boolean; hash: `0x${string}` }
  t.equal(body.success, true)
  t.equal((await publicClient.getTransaction({ hash: body.hash })).nonce, before, 'the transaction signed by the first try')
  t.equal((await nonceOf()) - before, 1, 'one transaction in all')
})

t.test('spend policies: per swap, per day and allowed tokens, checked before anything is sent', async (t) => {
  const capped = await fleet.createKey({ maxUsdPerSwap: 5 })
  const before = await nonceOf()
  const big = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' }, keyId: capped.id })
  t.equal(big.status, 403)
  t.match(big.body.error, /spend policy of key .*: this swap is worth \$50\.00, over its limit of \$5\.00 per swap/)
  const bigWeth = await call('POST', '/swap/execute', {
    body: { tokenIn: 'WETH', tokenOut: 'USDC', amountIn: parseUnits('0.02', 18).toString() },
    keyId: capped.id,
  })
  t.equal(bigWeth.status, 403, 'a non-stable input is valued through its USDC quote ($60)')
  t.equal(await nonceOf(), before, 'the chain shows no transaction')
  const small = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '4000000' }, keyId: capped.id })
  t.equal(small.status, 200, 'under the cap it swaps')

  const daily = await fleet.createKey({ maxUsdPerDay: 30 })
  const first = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '20000000' }, keyId: daily.id })
  t.equal(first.status, 200)
  const second = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '20000000' }, keyId: daily.id })
  t.equal(second.status, 403)
  t.match(second.body.error, /would bring today's swaps and launches \(UTC\) to \$40\.00, over its limit of \$30\.00 per day/)

  const tokens = await fleet.createKey({ allowedTokens: ['USDC', 'weth'] })
  t.equal(
    (await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }, keyId: tokens.id })).status,
    200,
  )
  const arb = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000' }, keyId: tokens.id })
  t.equal(arb.status, 403)
  t.match(arb.body.error, /ARB is not among its allowed tokens \(USDC, weth\)/)

  const unknown = await call('POST', '/swap/execute', {
    body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' },
    keyId: 'key_never_made',
  })
  t.equal(unknown.status, 403, 'a key admin does not know (or revoked) swaps nothing: the policy check fails closed')
  t.match(unknown.body.error, /API key key_never_made is revoked or unknown/)
  t.equal((await nonceOf()) - before, 3, 'only the three swaps within their limits were sent')
})

t.test('bad executes are 400s; no server wallet is 503', async (t) => {
  const missing = await call('POST', '/swap/execute', { body: { tokenIn: 'USDC' } })
  t.equal(missing.status, 400)
  t.match(missing.body.error, /Missing required params: tokenOut, amountIn \(body\)/)
  const cases: Array<[object, RegExp]> = [
    [{ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1', slippageBps: 6000 }, /slippageBps must be <= 5000/],
    [{ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: 'lots' }, /amountIn must be a positive integer/],
    [{ tokenIn: 'USDC', tokenOut: 'DOGE', amountIn: '1' }, /unknown token "DOGE"/],
    [{ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1', dex: 'curve' }, /allowed values: uniswap, camelot/],
  ]
  for (const [body, error] of cases) {
    const res = await call('POST', '/swap/execute', { body })
    t.equal(res.status, 400, JSON.stringify(body))
    t.match(res.body.error, error)
  }
  const badKey = await call('POST', '/swap/execute', {
    body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1' },
    headers: { 'idempotency-key': 'é' },
  })
  t.equal(badKey.status, 400)

  const base = await baseTestEnv(t)
  const walletless = await startService(t, tradingService, { ...base, ...fleet.chainEnv })
  const res = await fetch(`${walletless.url}/swap/execute`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-ats-internal-token': base.INTERNAL_TOKEN!,
      'x-ats-key-id': 'key_test',
      'x-ats-key-tier': 'readwrite',
    },
    body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }),
  })
  t.equal(res.status, 503)
  t.same(await res.json(), { error: 'server wallet not configured' })
  const quote = await fetch(`${walletless.url}/swap/quote?tokenIn=USDC&tokenOut=WETH&amountIn=1000000`, {
    headers: { 'x-ats-internal-token': base.INTERNAL_TOKEN!, 'x-ats-key-id': 'key_test', 'x-ats-key-tier': 'readwrite' },
  })
  t.equal(quote.status, 200, 'quotes need no wallet')
})

t.test('the launchpad deploys an ERC-20 the chain reads back as asked', async (t) => {
  const { id: launcher } = await fleet.createKey()
  const { id: other } = await fleet.createKey()
  const body = { name: 'Agent Coin', symbol: 'AGENT', supply: '1000000' }
  const res = await call('POST', '/launchpad/tokens', { body, keyId: launcher, headers: { 'idempotency-key': 'launch-1' } })
  t.equal(res.status, 201)
  t.match(res.body, {
    name: 'Agent Coin',
    symbol: 'AGENT',
    decimals: 18,
    supply: parseUnits('1000000', 18).toString(),
    holder: serverWallet,
    chainId: 31337,
  })
  const receipt = await publicClient.getTransactionReceipt({ hash: res.body.hash })
  t.equal(receipt.contractAddress?.toLowerCase(), res.body.address.toLowerCase())
  const token = { address: res.body.address, abi: (await import('@ats/chain')).erc20Abi } as const
  t.equal(await publicClient.readContract({ ...token, functionName: 'name' }), 'Agent Coin')
  t.equal(await publicClient.readContract({ ...token, functionName: 'symbol' }), 'AGENT')
  t.equal(await publicClient.readContract({ ...token, functionName: 'totalSupply' }), parseUnits('1000000', 18))
  t.equal(await publicClient.readContract({ ...token, functionName: 'balanceOf', args: [serverWallet] }), parseUnits('1000000', 18))

  const again = await call('POST', '/launchpad/tokens', { body, keyId: launcher, headers: { 'idempotency-key': 'launch-1' } })
  t.equal(again.body.address, res.body.address, 'the same key launches once')
  const one = await call('GET', `/launchpad/tokens/${res.body.address}`, { keyId: launcher })
  t.match(one.body, { address: res.body.address, name: 'Agent Coin', symbol: 'AGENT', supply: parseUnits('1000000', 18).toString() })
  const list = await call('GET', '/launchpad/tokens', { keyId: launcher })
  t.same(
    list.body.tokens.map((x: { address: string }) => x.address),
    [res.body.address],
  )
  t.equal((await call('GET', `/launchpad/tokens/${res.body.address}`, { keyId: other })).status, 404)
  const bad = await call('POST', '/launchpad/tokens', { body: { name: 'X', symbol: 'no spaces', supply: '1' } })
  t.equal(bad.status, 400)
  const zero = await call('POST', '/launchpad/tokens', { body: { name: 'X', symbol: 'X', supply: '0' } })
  t.equal(zero.status, 400)
  t.match(zero.body.error, /supply must be a positive integer/)
})
