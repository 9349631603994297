import { erc20Abi } from '@ats/chain'
import { coreAssets } from '@ats/contracts'
import { localArtifact, sqrtPriceX96, sortTokens } from '@ats/devnet'
import { gatewayService } from '@ats/gateway/service'
import { startService } from '@ats/service-kit/testing'
import { tradingService } from '@ats/trading/service'
import t from 'tap'
import { createWalletClient, http, maxUint256, parseAbi, parseUnits, type Address, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { eventually, startTradingFleet } from './fleet.ts'
// in this process too (a process spends ~2.5 s of CPU loading the fleet's modules): approvals,
// automations, orders (TWAP and stop orders), grants and the kill switch, each module with a fleet
// of its own inside its test, runnable alone
import './trading/approvals.ts'
import './trading/automation.ts'
import './trading/grants.ts'
import './trading/orders.ts'
import './trading/walletControl.ts'

/**
 * Market data, swaps, positions and the launchpad through the gateway on the devnet, with keys
 * made by admin, as a client sees them; and what a key may spend from the server wallet. One
 * fleet for the file (market-data beside trading): each test uses keys of its own, and the tests
 * that stop automining put it back.
 */
t.test('market data, swaps, positions and the launchpad as a client sees them', async (t) => {
  // a key launches at most 2 tokens a day unless its policy says otherwise (the spending tests)
  const fleet = await startTradingFleet(t, { tradingEnv: { LAUNCH_DEFAULT_PER_DAY: '2' }, marketData: true })

  // market data
  {
    const { request, createKey, devnet } = fleet
    /** Market data through the gateway on the devnet, with keys made by admin, as a client sees it. */
    const reader = await createKey('readonly', 'dashboard')
    const holder = devnet.accounts[0]!.address
    const usdc = devnet.book.tokens.find((token) => token.symbol === 'USDC')!.address

    t.test('every market-data route answers the spec shape through the gateway with a readonly key', async (t) => {
      const prices = await request('/market/prices', { key: reader.key })
      t.equal(prices.status, 200)
      t.same(Object.keys(prices.body.prices).sort(), [...coreAssets].sort())
      t.match(prices.body.prices.ETH, { price: Number, change24h: Number })
      t.type(prices.body.cached, 'boolean')

      const trending = await request('/market/trending', { key: reader.key })
      t.equal(trending.status, 200)
      t.ok(trending.body.trending.length <= 10)
      t.match(trending.body.trending[0], { name: String, basePrice: String, volume24h: String, change24h: String })

      const nfts = await request(`/nfts/${holder}`, { key: reader.key })
      t.equal(nfts.status, 200)
      t.match(nfts.body.nfts[0], {
        contractAddress: String,
        tokenId: String,
        name: String,
        collection: String,
        imageUrl: String,
        isSpam: false,
      })
      const hidden = await request(`/nfts/${holder}?includeHidden=true`, { key: reader.key })
      t.ok(hidden.body.nfts.length > nfts.body.nfts.length, 'spam shows with includeHidden=true')

      const top = await request('/predictions/top?limit=5', { key: reader.key })
      t.equal(top.status, 200)
      t.equal(top.body.markets.length, 5)
      const one = await request(`/predictions/${top.body.markets[0].conditionId}`, { key: reader.key })
      t.same(one.body.market, top.body.markets[0])
      const search = await request('/predictions/search?q=bitcoin', { key: reader.key })
      t.equal(search.status, 200)
      t.ok(Array.isArray(search.body.markets))

      const chains = await request('/bridge/chains', { key: reader.key })
      t.ok(chains.body.chains.length > 1)
      const quote = await request(
        `/bridge/quote?toChainId=10&fromToken=${usdc}&toToken=0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85&amount=50000000&userAddress=${holder}`,
        { key: reader.key },
      )
      t.equal(quote.status, 200, JSON.stringify(quote.body))
      t.match(quote.body, { fromChainId: 42161, toChainId: 10, fromAmount: '50000000' })
    })

    t.test('through the gateway: no key 401, bad input 400 {error} that says what is wrong, unknown market 404', async (t) => {
      t.equal((await request('/market/prices')).status, 401)
      const bad = await request('/nfts/not-an-address', { key: reader.key })
      t.equal(bad.status, 400)
      t.type(bad.body.error, 'string')
      const missing = await request('/bridge/quote', { key: reader.key })
      t.equal(missing.status, 400)
      t.equal(missing.body.error, 'Missing required params: toChainId, fromToken, toToken, amount, userAddress (querystring)')
      t.equal((await request('/predictions/search', { key: reader.key })).status, 400)
      t.equal((await request(`/predictions/0x${'0'.repeat(64)}`, { key: reader.key })).status, 404)
    })
  }

  // swaps, positions and the launchpad
  {
    /** Swaps, positions and the launchpad through the gateway, with keys made by admin, as a client sees them. */
    const { request, createKey, publicClient, serverWallet } = fleet
    const trader = await createKey('readwrite', 'trader')
    const reader = await createKey('readonly', 'dashboard')
    const token = (symbol: string) => fleet.devnet.book.tokens.find((x) => x.symbol === symbol)!.address
    const balanceOf = (symbol: string, owner: Address) =>
      publicClient.readContract({ address: token(symbol), abi: erc20Abi, functionName: 'balanceOf', args: [owner] })

    t.test('quotes on both DEXes through the gateway; readonly keys may not swap', async (t) => {
      for (const dex of ['uniswap', 'camelot']) {
        const res = await request(`/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1000000000000000000&dex=${dex}`, { key: trader.key })
        t.equal(res.status, 200, dex)
        t.ok(BigInt(res.body.amountOut) > 0n, `${dex}: amountOut ${res.body.amountOut}`)
        t.ok(res.headers.get('x-request-id'))
      }
      const missing = await request('/swap/quote?tokenIn=WETH', { key: trader.key })
      t.equal(missing.status, 400)
      t.match(missing.body.error, /Missing required params: tokenOut, amountIn/)
      t.equal((await request('/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1', { key: reader.key })).status, 403)
      t.equal((await request('/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1')).status, 401)
    })

    t.test('an execute through the gateway is a mined swap that moved the reported amounts', async (t) => {
      for (const dex of ['uniswap', 'camelot']) {
        const before = await balanceOf('ARB', serverWallet)
        const res = await request('/swap/execute', {
          method: 'POST',
          key: trader.key,
          body: { tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '8000000', dex },
          headers: { 'idempotency-key': `e2e-${dex}` },
        })
        t.equal(res.status, 200, dex)
        t.equal(res.body.success, true)
        t.equal((await publicClient.getTransactionReceipt({ hash: res.body.hash })).status, 'success')
        t.equal(
          await balanceOf('ARB', serverWallet),
          before + BigInt(res.body.amountOut),
          `${dex}: ~10 ARB arrived (${res.body.amountOut})`,
        )
      }
    })

    t.test('positions for a readonly key', async (t) => {
      const res = await request('/portfolio/positions', { key: reader.key })
      t.equal(res.status, 200)
      t.equal(res.body.aave.totalCollateralBase, parseUnits('10000', 8).toString())
      t.equal(res.body.gmx[0].side, 'long')
    })

    t.test('a key capped at $5 a swap gets 403 for a $50 swap, and the chain shows no transaction', async (t) => {
      const created = await request('/admin/keys', {
        method: 'POST',
        key: 'atsk_gatewayTestBootstrapKey-00000000',
        body: { tier: 'readwrite', label: 'capped bot', policy: { maxUsdPerSwap: 5 } },
      })
      t.equal(created.status, 201)
      const nonce = await publicClient.getTransactionCount({ address: serverWallet })
      const res = await request('/swap/execute', {
        method: 'POST',
        key: created.body.key,
        body: { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '50000000' },
      })
      t.equal(res.status, 403)
      t.match(res.body.error, /over its limit of \$5\.00 per swap/)
      t.equal(await publicClient.getTransactionCount({ address: serverWallet }), nonce)
    })

    t.test('a launched token reads back from the chain', async (t) => {
      const res = await request('/launchpad/tokens', {
        method: 'POST',
        key: trader.key,
        body: { name: 'Gateway Token', symbol: 'GATE', supply: '21000000', decimals: 8 },
      })
      t.equal(res.status, 201)
      const read = await request(`/launchpad/tokens/${res.body.address}`, { key: trader.key })
      t.match(read.body, { name: 'Gateway Token', symbol: 'GATE', decimals: 8, supply: '2100000000000000' })
      t.equal(
        await publicClient.readContract({ address: res.body.address, abi: erc20Abi, functionName: 'totalSupply' }),
        2_100_000_000_000_000n,
      )
    })

    t.test('without a server wallet an execute through the gateway is 503, and quotes still work', async (t) => {
      // a second trading service without SERVER_WALLET_PRIVATE_KEY, behind a gateway of its own
      const trading = await startService(t, tradingService, fleet.tradingEnv)
      const gateway = await startService(t, gatewayService, { ...fleet.gatewayEnv, TRADING_URL: trading.url })
      const call = (path: string, init: RequestInit = {}) =>
        fetch(`${gateway.url}${path}`, { ...init, headers: { authorization: `Bearer ${trader.key}`, 'content-type': 'application/json' } })
      const res = await call('/swap/execute', {
        method: 'POST',
        body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }),
      })
      t.equal(res.status, 503)
      t.same(await res.json(), { error: 'server wallet not configured' })
      t.equal((await call('/swap/quote?tokenIn=USDC&tokenOut=WETH&amountIn=1000000')).status, 200)
    })
  }

  // what a key may spend
  {
    /**
     * What a key may spend from the server wallet: a token that calls itself "USDC" (valued by address,
     * not by its symbol), launches (counted as spends), and retries of a spend (a generated
     * Idempotency-Key; the gateway outwaits trading).
     */
    const { request, publicClient, serverWallet, devnet } = fleet
    const adminKey = 'atsk_gatewayTestBootstrapKey-00000000'
    const weth = devnet.book.tokens.find((x) => x.symbol === 'WETH')!.address
    const nonceOf = () => publicClient.getTransactionCount({ address: serverWallet })
    const keyWith = async (policy?: object) => {
      const res = await request('/admin/keys', {
        method: 'POST',
        key: adminKey,
        body: { tier: 'readwrite', label: 'spender', ...(policy ? { policy } : {}) },
      })
      if (res.status !== 201) throw new Error(`could not create a key: ${res.status} ${JSON.stringify(res.body)}`)
      return res.body.key as string
    }
    const execute = (key: string, body: object, headers: Record<string, string> = {}) =>
      request('/swap/execute', { method: 'POST', key, body, headers })

    const npmAbi = parseAbi([
      'function createAndInitializePoolIfNecessary(address token0, address token1, uint24 fee, uint160 sqrtPriceX96) payable returns (address pool)',
      'struct MintParams { address token0; address token1; uint24 fee; int24 tickLower; int24 tickUpper; uint256 amount0Desired; uint256 amount1Desired; uint256 amount0Min; uint256 amount1Min; address recipient; uint256 deadline; }',
      'function mint(MintParams params) payable returns (uint256 tokenId, uint128 liquidity, uint256 amount0, uint256 amount1)',
      'function approve(address spender, uint256 amount) returns (bool)',
    ])

    /**
     * The attack on symbols: a token whose symbol() is "USDC" (DevToken, 6 decimals) and a
     * Uniswap V3 pool of it against WETH priced so that 0.1 WETH buys a few cents' worth of it.
     */
    async function fakeUsdcPool(): Promise<Address> {
      const attacker = privateKeyToAccount(devnet.accounts[5]!.privateKey)
      const wallet = createWalletClient({ account: attacker, transport: http(devnet.rpcUrl) })
      const write = (call: {
        address: Address
        abi: typeof npmAbi | ReturnType<typeof parseAbi>
        functionName: string
        args: readonly unknown[]
      }) => wallet.writeContract({ ...call, chain: null } as Parameters<typeof wallet.writeContract>[0])
      const mined = async (hash: Hex) => {
        const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
        if (receipt.status !== 'success') {
          // the reason, for the record: the same call replayed on the block before (failed once in CI, 2026-11-27, not since)
          const tx = await publicClient.getTransaction({ hash })
          const reason = await publicClient
            .call({ account: tx.from, to: tx.to, data: tx.input, blockNumber: receipt.blockNumber - 1n })
            .then(
              () => 'the replay does not revert',
              (error: Error & { shortMessage?: string }) => error.shortMessage ?? error.message,
            )
          throw new Error(`attacker transaction ${hash} reverted (gas ${receipt.gasUsed} of ${tx.gas}): ${reason}`)
        }
        return receipt
      }
      const { abi, bytecode } = localArtifact('DevToken')
      const fake = (await mined(await wallet.deployContract({ abi, bytecode, args: ['USD Coin', 'USDC', 6], chain: null })))
        .contractAddress!
      const fakeAmount = 10_000n // 0.01 "USDC" against 10 WETH: 0.1 WETH buys about 0.0001 of it
      const wethAmount = parseUnits('10', 18)
      await mined(
        await write({
          address: fake,
          abi: parseAbi(['function mint(address to, uint256 amount)']),
          functionName: 'mint',
          args: [attacker.address, fakeAmount],
        }),
      )
      const npm = devnet.book.uniswapV3.positionManager
      for (const token of [fake, weth])
        await mined(await write({ address: token, abi: npmAbi, functionName: 'approve', args: [npm, maxUint256] }))
      const [token0, token1] = sortTokens(fake, weth)
      const [amount0, amount1] = token0 === fake ? [fakeAmount, wethAmount] : [wethAmount, fakeAmount]
      const price = sqrtPriceX96(weth, wethAmount, fake, fakeAmount)
      await mined(
        await write({ address: npm, abi: npmAbi, functionName: 'createAndInitializePoolIfNecessary', args: [token0, token1, 3000, price] }),
      )
      const mint = {
        token0,
        token1,
        fee: 3000,
        tickLower: -887220,
        tickUpper: 887220,
        amount0Desired: amount0,
        amount1Desired: amount1,
        amount0Min: 0n,
        amount1Min: 0n,
      }
      await mined(
        await write({
          address: npm,
          abi: npmAbi,
          functionName: 'mint',
          args: [{ ...mint, recipient: attacker.address, deadline: maxUint256 }],
        }),
      )
      return fake
    }

    t.test(
      'a token whose symbol() is "USDC" is neither the allowed USDC nor worth $1: a $1 key cannot swap server WETH into it',
      async (t) => {
        const fake = await fakeUsdcPool()
        const tenthWeth = { tokenIn: 'WETH', tokenOut: fake, amountIn: parseUnits('0.1', 18).toString() }
        const quote = await request(`/swap/quote?tokenIn=WETH&tokenOut=${fake}&amountIn=${tenthWeth.amountIn}`, { key: await keyWith() })
        t.equal(quote.status, 200, 'the pool quotes')
        t.equal(quote.body.tokenOut, 'USDC', 'the token calls itself USDC')
        t.ok(BigInt(quote.body.amountOut) < 1_000_000n, `0.1 WETH buys less than one of it (${quote.body.amountOut})`)

        const before = await nonceOf()
        // the attack: matched by symbol and valued at $1 a "USDC", this swap would pass allowedTokens and a $1 cap
        const probe = await keyWith({ maxUsdPerSwap: 1, maxUsdPerDay: 1, allowedTokens: ['WETH', 'USDC'] })
        const refused = await execute(probe, tenthWeth)
        t.equal(refused.status, 403)
        t.match(
          refused.body.error,
          new RegExp(`"USDC" at ${fake} \\(not in this chain's address book\\) is not among its allowed tokens \\(WETH, USDC\\)`, 'i'),
        )
        // an admin who allows the token by address still gets a swap valued by what it spends: WETH at its reference price
        const byAddress = await keyWith({ maxUsdPerSwap: 1, allowedTokens: ['WETH', fake] })
        const valued = await execute(byAddress, tenthWeth)
        t.equal(valued.status, 403)
        t.match(valued.body.error, /this swap is worth \$3\d\d\.\d\d, over its limit of \$1\.00 per swap/)
        // without allowedTokens, a token outside the address book has no trusted price under a USD cap
        const capped = await keyWith({ maxUsdPerSwap: 1 })
        const unpriced = await execute(capped, tenthWeth)
        t.equal(unpriced.status, 403)
        t.match(unpriced.body.error, /"USDC" at 0x[0-9a-fA-F]{40} \(not in this chain's address book\) has no trusted USD price/)
        t.equal(await nonceOf(), before, 'the chain shows no transaction')
        // the real USDC stays allowed by its symbol, and is worth a dollar
        const real = await execute(probe, { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '500000' })
        t.equal(real.status, 200, 'the address book USDC is the USDC of allowedTokens')
      },
    )

    t.test('launches count against the key: its USD caps (their gas) and its launches per day', async (t) => {
      const tiny = await keyWith({ maxUsdPerDay: 0.01 })
      const before = await nonceOf()
      const body = { name: 'Cheap Coin', symbol: 'CHEAP', supply: '1000' }
      const refused = await request('/launchpad/tokens', { method: 'POST', key: tiny, body })
      t.equal(refused.status, 403)
      t.match(
        refused.body.error,
        /this launch's gas is worth \$\d+\.\d\d, over its limit of \$0\.01 per day|this launch's gas \(\$\d+\.\d\d\) would bring today's swaps and launches \(UTC\) to \$\d+\.\d\d, over its limit of \$0\.01 per day/,
      )
      t.equal(await nonceOf(), before, 'nothing was deployed')

      const launcher = await keyWith()
      for (const symbol of ['ONE', 'TWO']) {
        const res = await request('/launchpad/tokens', { method: 'POST', key: launcher, body: { ...body, symbol } })
        t.equal(res.status, 201, symbol)
      }
      const third = await request('/launchpad/tokens', { method: 'POST', key: launcher, body: { ...body, symbol: 'THREE' } })
      t.equal(third.status, 403)
      t.match(third.body.error, /it has launched 2 tokens today \(UTC\), the default limit of 2 launches per day \(its policy sets none\)/)
      const own = await keyWith({ maxLaunchesPerDay: 0 })
      const none = await request('/launchpad/tokens', { method: 'POST', key: own, body })
      t.equal(none.status, 403)
      t.match(none.body.error, /it has launched 0 tokens today \(UTC\), its limit of 0 launches per day/)
      t.equal(await nonceOf(), before + 2, 'two deployments in all')
    })

    t.test('an execute without an Idempotency-Key answers with a generated one; repeating with it does not swap again', async (t) => {
      const key = await keyWith()
      const body = { tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '2000000' }
      const before = await nonceOf()
      const first = await execute(key, body)
      t.equal(first.status, 200)
      const generated = first.headers.get('idempotency-key')
      t.ok(generated, 'the answer names the key it ran under')
      t.equal(first.body.idempotencyKey, generated, 'in the body too')
      const again = await execute(key, body, { 'idempotency-key': generated! })
      t.equal(again.status, 200)
      t.equal(again.headers.get('idempotent-replayed'), 'true')
      t.same([again.body.executionId, again.body.hash], [first.body.executionId, first.body.hash], 'the first result')
      t.equal(await nonceOf(), before + 1, 'one swap')
      const other = await execute(key, { ...body, amountIn: '3000000' }, { 'idempotency-key': generated! })
      t.equal(other.status, 409, 'the key belongs to the first request')
    })

    t.test('the gateway waits for a spend longer than for other routes: no 504 while the swap goes on', async (t) => {
      // a gateway that gives other routes 100 ms; its spending routes keep SPEND_TIMEOUT_MS
      const gateway = await startService(t, gatewayService, { ...fleet.gatewayEnv, UPSTREAM_TIMEOUT_MS: '100' })
      const key = await keyWith()
      const before = await nonceOf()
      await publicClient.request({ method: 'evm_setAutomine' as any, params: [false] as any })
      t.teardown(() => publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any }))
      const started = Date.now()
      const answer = fetch(`${gateway.url}/swap/execute`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1000000' }),
      })
      // the swap is sent and waits to be mined, well past UPSTREAM_TIMEOUT_MS: undici's timers tick
      // about once a second, so a 100 ms wait ends by about 1 s (before the fix: 504 at ~0.9 s)
      await eventually('the swap to be pending, past 2 s', async () => {
        const pending = await publicClient.getTransactionCount({ address: serverWallet, blockTag: 'pending' })
        return pending > before && Date.now() - started > 2000 ? true : undefined
      })
      await publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any })
      await publicClient.request({ method: 'evm_mine' as any, params: [] as any })
      const res = await answer
      t.equal(res.status, 200, 'the answer, not a 504')
      t.equal(((await res.json()) as { success: boolean }).success, true)
      t.equal(await nonceOf(), before + 1)
    })

    t.test('a spend the gateway gives up on answers 504 with the key it runs under; repeating with it swaps once', async (t) => {
      const gateway = await startService(t, gatewayService, { ...fleet.gatewayEnv, UPSTREAM_TIMEOUT_MS: '100', SPEND_TIMEOUT_MS: '1000' })
      const key = await keyWith()
      const send = (headers: Record<string, string> = {}) =>
        fetch(`${gateway.url}/swap/execute`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ tokenIn: 'USDC', tokenOut: 'WETH', amountIn: '1500000' }),
        })
      const before = await nonceOf()
      await publicClient.request({ method: 'evm_setAutomine' as any, params: [false] as any })
      t.teardown(() => publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any }))
      const first = await send()
      t.equal(first.status, 504, 'the gateway stopped waiting; the swap goes on')
      const generated = first.headers.get('idempotency-key')
      t.match(generated, /^gen_/, 'the gateway named the key the swap runs under')
      await publicClient.request({ method: 'evm_setAutomine' as any, params: [true] as any })
      await publicClient.request({ method: 'evm_mine' as any, params: [] as any })
      const again = await send({ 'idempotency-key': generated! })
      t.equal(again.status, 200)
      const body = (await again.json()) as { success: boolean; hash: Hex; idempotencyKey: string }
      t.equal(body.success, true)
      t.equal(body.idempotencyKey, generated)
      t.equal((await publicClient.getTransaction({ hash: body.hash })).nonce, before, 'the transaction the first try sent')
      t.equal(await nonceOf(), before + 1, 'one swap in all')
    })
  }
})
