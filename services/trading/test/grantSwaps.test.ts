import { erc20Abi } from '@ats/chain'
import { devAccounts } from '@ats/devnet'
import t, { type Test } from 'tap'
import { createWalletClient, http, type Address, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { eventually, keyHeaders, startTrading } from './helpers.ts'

/**
 * Swaps from a user's own wallet under the grant it made on chain: trading prepares the grant,
 * the user sends it, and /swap/execute with `from` swaps the user's tokens through TradeGrants
 * from the delegate signer; the server wallet neither pays nor receives.
 */
const [, , , userAccount, delegateAccount] = devAccounts()
const fleet = await startTrading(t, { env: { GRANT_DELEGATE_PRIVATE_KEY: delegateAccount!.privateKey } })
const { call, publicClient, serverWallet, balanceOf } = fleet
const user = createWalletClient({
  account: privateKeyToAccount(userAccount!.privateKey as Hex),
  chain: publicClient.chain!,
  transport: http(fleet.devnet.rpcUrl),
})
const wallet = user.account.address
const { id: boundKey } = await fleet.createKey(undefined, wallet)
const { id: otherKey } = await fleet.createKey()

/** sends the prepared transactions from the user's wallet, in order, each mined */
async function sendAll(t: Test, transactions: Array<{ to: Address; data: Hex; from: Address }>) {
  for (const tx of transactions) {
    t.equal(tx.from.toLowerCase(), wallet.toLowerCase(), `${tx.to}: sent by the wallet`)
    const hash = await user.sendTransaction({ to: tx.to, data: tx.data })
    const receipt = await publicClient.waitForTransactionReceipt({ hash })
    if (receipt.status !== 'success') throw new Error(`${hash} reverted`)
  }
}

const swapFromWallet = (amountIn: string, keyId = boundKey, extra: Record<string, unknown> = {}) =>
  call('POST', '/swap/execute', { body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn, from: wallet, ...extra }, keyId })

t.test('without a grant the swap is refused in words, and nothing moves', async (t) => {
  const res = await swapFromWallet('30000000')
  t.equal(res.status, 403)
  t.match(res.body.error, /no grant lets the service swap USDC from 0x[0-9a-fA-F]{40}: make one with POST \/grants\/prepare/)
})

t.test('a grant prepared, sent by the wallet, and listed with what remains', async (t) => {
  const prepared = await call('POST', '/grants/prepare', {
    body: { wallet, tokenIn: 'USDC', amountPerPeriod: '100000000', period: 'day', tokensOut: ['WETH'], dexes: ['uniswap', 'camelot'] },
    keyId: boundKey,
  })
  t.equal(prepared.status, 200, JSON.stringify(prepared.body))
  t.same(
    prepared.body.transactions.map((tx: { kind: string }) => tx.kind),
    ['approval', 'grant'],
  )
  t.match(prepared.body.transactions[1].description, /paid out to 0x[0-9a-fA-F]{40} only/)
  await sendAll(t, prepared.body.transactions)
  const listed = await call('GET', '/grants', { keyId: boundKey })
  t.equal(listed.status, 200)
  t.equal(listed.body.grants.length, 1)
  t.match(listed.body.grants[0], {
    status: 'active',
    tokenIn: 'USDC',
    tokensOut: ['WETH'],
    dexes: ['uniswap', 'camelot'],
    amountPerPeriod: '100000000',
    remaining: '100000000',
    periodSeconds: 86_400,
  })
  const unbound = await call('GET', '/grants', { keyId: otherKey })
  t.equal(unbound.status, 400, 'a key bound to no wallet names the wallet')
})

t.test('the bound key swaps 30 USDC from the wallet: the WETH arrives there, the server wallet does not move', async (t) => {
  const before = {
    userUsdc: await balanceOf('USDC', wallet),
    userWeth: await balanceOf('WETH', wallet),
    serverUsdc: await balanceOf('USDC', serverWallet),
    serverWeth: await balanceOf('WETH', serverWallet),
    serverEth: await publicClient.getBalance({ address: serverWallet }),
  }
  for (const dex of ['uniswap', 'camelot']) {
    const res = await swapFromWallet('15000000', boundKey, { dex })
    t.equal(res.status, 200, JSON.stringify(res.body))
    t.match(res.body, { success: true, dex, from: wallet, grantId: /^0x[0-9a-f]{64}$/ })
    const receipt = await publicClient.getTransactionReceipt({ hash: res.body.hash })
    t.equal(receipt.from.toLowerCase(), delegateAccount!.address.toLowerCase(), `${dex}: sent by the delegate, not the server wallet`)
  }
  t.equal(await balanceOf('USDC', wallet), before.userUsdc - 30_000_000n, '30 USDC left the wallet')
  t.ok((await balanceOf('WETH', wallet)) > before.userWeth, 'WETH arrived in the wallet')
  t.equal(await balanceOf('USDC', serverWallet), before.serverUsdc, 'server wallet USDC unchanged')
  t.equal(await balanceOf('WETH', serverWallet), before.serverWeth, 'server wallet WETH unchanged')
  t.equal(await publicClient.getBalance({ address: serverWallet }), before.serverEth, 'server wallet ETH unchanged (no gas paid)')
  const listed = await call('GET', '/grants', { keyId: boundKey })
  t.equal(listed.body.grants[0].remaining, '70000000', '70 of 100 USDC remain today')
})

t.test('approvals, idempotency and the kill switch hold swaps from the wallet as they hold the server wallet’s', async (t) => {
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${fleet.admin.url}${path}`, {
      method,
      headers: { ...keyHeaders('key_test_admin', 'admin'), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
  t.equal((await admin('PUT', `/admin/keys/${boundKey}/policy`, { policy: { approvalAboveUsd: 10 } })).status, 200)
  const usdcBefore = await balanceOf('USDC', wallet)
  const held = await swapFromWallet('20000000')
  t.equal(held.status, 202, 'over the key’s approvalAboveUsd: held, nothing sent')
  t.match(held.body.approval.swap, { from: wallet, amountIn: '20000000' })
  t.equal(await balanceOf('USDC', wallet), usdcBefore)
  const approved = await call('POST', `/approvals/${held.body.approval.id}/approve`, {
    keyId: 'key_test_admin',
    headers: keyHeaders('key_test_admin', 'admin'),
  })
  t.equal(approved.status, 200, JSON.stringify(approved.body))
  t.match(approved.body.result, { success: true, from: wallet, amountIn: '20000000' })
  t.equal(await balanceOf('USDC', wallet), usdcBefore - 20_000_000n, 'approved, it swapped from the wallet once')
  t.equal((await admin('PUT', `/admin/keys/${boundKey}/policy`, { policy: null })).status, 200)

  const once = await swapFromWallet('1000000', boundKey, {})
  const headers = { 'idempotency-key': once.body.idempotencyKey }
  const repeat = await call('POST', '/swap/execute', {
    body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000', from: wallet },
    keyId: boundKey,
    headers,
  })
  t.equal(repeat.headers.get('idempotent-replayed'), 'true')
  t.equal(repeat.body.hash, once.body.hash, 'a repeat with its key swaps nothing more')
  t.equal(await balanceOf('USDC', wallet), usdcBefore - 21_000_000n)

  t.equal((await admin('POST', '/admin/wallet/pause', { reason: 'incident 7' })).status, 200)
  const paused = await eventually('trading to see the pause', async () => {
    const res = await swapFromWallet('1000000')
    return res.status === 423 ? res : undefined
  })
  t.match(paused.body.error, /incident 7/)
  t.equal((await admin('POST', '/admin/wallet/resume', {})).status, 200)
  await eventually('trading to see the resume', async () => ((await swapFromWallet('1000000')).status === 200 ? true : undefined))
  t.equal((await call('GET', '/grants', { keyId: boundKey })).body.grants[0].remaining, '48000000', '30 + 20 + 1 + 1 of 100 used')
})

t.test('the refusals a user understands', async (t) => {
  const over = await swapFromWallet('80000000')
  t.equal(over.status, 409)
  t.match(over.body.error, /has 48000000 base units of USDC left this period, the swap needs 80000000; it renews at \d{4}-/)
  const notBound = await swapFromWallet('1000000', otherKey)
  t.equal(notBound.status, 403)
  t.match(notBound.body.error, /is not bound to 0x/)
  const token = await call('POST', '/swap/execute', {
    body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000', from: wallet },
    keyId: boundKey,
  })
  t.equal(token.status, 403)
  t.match(token.body.error, /no active grant of 0x[0-9a-fA-F]{40} allows buying ARB with USDC/)
  const otherToken = await call('POST', '/swap/execute', {
    body: { tokenIn: 'WETH', tokenOut: 'USDC', amountIn: '1000000000000000', from: wallet },
    keyId: boundKey,
  })
  t.equal(otherToken.status, 403, JSON.stringify(otherToken.body))
  t.match(otherToken.body.error, /no grant lets the service swap WETH/)
})

t.test('a revoked grant stops the swaps', async (t) => {
  const listed = await call('GET', '/grants', { keyId: boundKey })
  const id = listed.body.grants[0].id
  const revoke = await call('POST', `/grants/${id}/revoke`, { keyId: boundKey })
  t.equal(revoke.status, 200)
  await sendAll(t, revoke.body.transactions)
  const after = await call('GET', '/grants', { keyId: boundKey })
  t.equal(after.body.grants[0].status, 'revoked')
  const res = await swapFromWallet('1000000')
  t.equal(res.status, 403)
  t.match(res.body.error, /was revoked/)
  const allowance = await publicClient.readContract({
    address: fleet.token('USDC').address,
    abi: erc20Abi,
    functionName: 'allowance',
    args: [wallet, after.body.contract],
  })
  t.ok(allowance > 0n, 'the allowance is the wallet’s to take back; the revoked grant cannot use it')
})
