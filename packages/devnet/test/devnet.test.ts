import t from 'tap'
import { createServer } from 'node:net'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createPublicClient, createWalletClient, http, maxUint256, parseAbi, parseUnits, formatUnits, zeroAddress } from 'viem'
import { mnemonicToAccount, privateKeyToAccount } from 'viem/accounts'
import { anvilChain } from '@ats/chain'
import {
  MULTICALL3_ADDRESS,
  addressBookFor,
  algebraQuoterV2Abi,
  algebraSwapRouterAbi,
  arbitrumOneTokens,
  uniswapQuoterV2Abi,
  uniswapSwapRouter02Abi,
} from '@ats/chain'
import {
  startAnvil,
  startDevnet,
  deployDevnet,
  devAccounts,
  tokenBySymbol,
  DEV_MNEMONIC,
  aavePoolAbi,
  gmxReaderAbi,
  eip3009Abi,
  listTokensByLogs,
  SEEDED_LENDING,
  type DevnetAddressBook,
} from '../src/index.ts'

// Second default anvil account, so the swap does not touch the deployer's balances.
const TRADER_KEY = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'

const tokenAbi = parseAbi([
  'function deposit() payable',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function balanceOf(address) view returns (uint256)',
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
])

const scratch = mkdtempSync(join(tmpdir(), 'devnet-test-'))
t.teardown(() => rmSync(scratch, { recursive: true, force: true }))

t.test('the ten funded accounts are the default anvil accounts of the test mnemonic', async (t) => {
  const accounts = devAccounts()
  t.equal(accounts.length, 10)
  for (const [i, account] of accounts.entries()) {
    t.equal(account.address, mnemonicToAccount(DEV_MNEMONIC, { addressIndex: i }).address, `account ${i}`)
    t.equal(privateKeyToAccount(account.privateKey).address, account.address, `key ${i}`)
  }
  t.equal(accounts[1]!.privateKey, TRADER_KEY)
})

t.test('devnet: every token, funded accounts, address book; Uniswap V3 and Algebra quote and swap WETH -> USDC', async (t) => {
  const addressBookPath = join(scratch, 'address-book.json')
  const devnet = await startDevnet({ port: 0, addressBookPath })
  t.teardown(() => devnet.stop())
  const { book, timings } = devnet
  t.comment(
    `start + deploy + fund took ${timings.totalMs} ms (anvil ${timings.anvilMs}, deploy ${timings.deployMs}, fund ${timings.fundMs})`,
  )
  t.ok(timings.totalMs < 20_000, 'ready in under 20 s')
  t.comment(JSON.stringify({ ...book, devnet: undefined }))
  t.equal(book.chainId, 31337)
  t.equal(book.name, 'devnet')
  t.match(devnet.rpcUrl, /^http:\/\/127\.0\.0\.1:\d+$/)

  // The book on disk is what services get for chain 31337.
  t.equal(devnet.addressBookPath, addressBookPath)
  t.same(addressBookFor({ chainId: 31337, addressBookPath }), book)
  t.equal(book.devnet?.rpcUrl, devnet.rpcUrl)
  t.equal(book.devnet?.accounts.length, 10)

  const transport = http(devnet.rpcUrl)
  const client = createPublicClient({ chain: anvilChain, transport, pollingInterval: 20 })
  const trader = createWalletClient({ account: privateKeyToAccount(TRADER_KEY), chain: anvilChain, transport })
  const WETH = tokenBySymbol(book.tokens, 'WETH')
  const USDC = tokenBySymbol(book.tokens, 'USDC')
  const oneWeth = parseUnits('1', 18)

  // Every Arbitrum One token, deployed with its symbol, name and decimals.
  t.same(
    book.tokens.map(({ symbol, name, decimals }) => ({ symbol, name, decimals })),
    arbitrumOneTokens.map(({ symbol, name, decimals }) => ({ symbol, name, decimals })),
  )
  for (const token of book.tokens) {
    const [name, symbol, decimals] = await Promise.all(
      (['name', 'symbol', 'decimals'] as const).map((functionName) =>
        client.readContract({ address: token.address, abi: tokenAbi, functionName }),
      ),
    )
    t.same({ name, symbol, decimals }, { name: token.name, symbol: token.symbol, decimals: token.decimals }, `${token.symbol} on chain`)
  }

  // Every default account holds every token (the deployer, the first, also keeps what seeding the pools left).
  const expected: Record<string, bigint> = { USDC: parseUnits('1000000', 6), WETH: parseUnits('100', 18), WBTC: parseUnits('10', 8) }
  for (const account of devnet.accounts) {
    const held = await Promise.all(
      book.tokens.map((token) =>
        client.readContract({ address: token.address, abi: tokenAbi, functionName: 'balanceOf', args: [account.address] }),
      ),
    )
    const isDeployer = account === devnet.accounts[0]
    const funding = (token: { symbol: string; decimals: number }) => expected[token.symbol] ?? parseUnits('100000', token.decimals)
    t.same(
      Object.fromEntries(book.tokens.map((token, i) => [token.symbol, isDeployer ? held[i]! >= funding(token) : held[i]])),
      Object.fromEntries(book.tokens.map((token) => [token.symbol, isDeployer ? true : funding(token)])),
      `${account.address} is funded`,
    )
  }

  const { result: quote } = await client.simulateContract({
    address: book.uniswapV3.quoterV2,
    abi: uniswapQuoterV2Abi,
    functionName: 'quoteExactInputSingle',
    args: [{ tokenIn: WETH, tokenOut: USDC, amountIn: oneWeth, fee: 500, sqrtPriceLimitX96: 0n }],
  })
  const [amountOut] = quote
  t.comment(`QuoterV2: 1 WETH -> ${formatUnits(amountOut, 6)} USDC`)
  t.ok(amountOut > parseUnits('2850', 6) && amountOut < parseUnits('3150', 6), 'quote is ~3000 USDC (within 5%)')

  const { result: algebraQuote } = await client.simulateContract({
    address: book.algebra.quoterV2,
    abi: algebraQuoterV2Abi,
    functionName: 'quoteExactInputSingle',
    args: [{ tokenIn: WETH, tokenOut: USDC, deployer: zeroAddress, amountIn: oneWeth, limitSqrtPrice: 0n }],
  })
  const [algebraOut, , , , , algebraFee] = algebraQuote
  t.comment(`Algebra QuoterV2: 1 WETH -> ${formatUnits(algebraOut, 6)} USDC (fee ${algebraFee / 1e4}%)`)
  t.ok(algebraOut > parseUnits('2850', 6) && algebraOut < parseUnits('3150', 6), 'Algebra quote is ~3000 USDC (within 5%)')

  // Every seeded pair, on both DEXes, quotes a small trade within 2% of its intended price, both ways.
  const pairs = [
    { a: 'WETH', b: 'USDC', price: '3000', amountA: '0.1', uniswap: 'WETH_USDC_500', fee: 500, algebra: 'WETH_USDC' },
    { a: 'WBTC', b: 'USDC', price: '60000', amountA: '0.01', uniswap: 'WBTC_USDC_3000', fee: 3000, algebra: 'WBTC_USDC' },
    { a: 'ARB', b: 'USDC', price: '0.80', amountA: '1000', uniswap: 'ARB_USDC_3000', fee: 3000, algebra: 'ARB_USDC' },
    { a: 'WETH', b: 'ARB', price: '3750', amountA: '0.1', uniswap: 'WETH_ARB_3000', fee: 3000, algebra: 'WETH_ARB' },
    { a: 'GMX', b: 'WETH', price: '0.01', amountA: '10', uniswap: 'GMX_WETH_10000', fee: 10000, algebra: 'GMX_WETH' },
    { a: 'USDT', b: 'USDC', price: '1', amountA: '1000', uniswap: 'USDT_USDC_500', fee: 500, algebra: 'USDT_USDC' },
    { a: 'LINK', b: 'USDC', price: '15', amountA: '100', uniswap: 'LINK_USDC_3000', fee: 3000, algebra: 'LINK_USDC' },
  ] as const
  t.same(Object.keys(book.uniswapV3.pools).sort(), pairs.map((p) => p.uniswap).sort(), 'Uniswap V3 pool keys')
  t.same(Object.keys(book.algebra.pools).sort(), pairs.map((p) => p.algebra).sort(), 'Algebra pool keys')
  const poolAddresses = [...Object.values(book.uniswapV3.pools), ...Object.values(book.algebra.pools)]
  t.equal(new Set(poolAddresses).size, 2 * pairs.length, 'a distinct pool per pair on each DEX')
  for (const pool of poolAddresses) t.ok((await client.getCode({ address: pool }))?.length, `pool ${pool} has code`)
  const tokenOf = (symbol: string) => book.tokens.find((token) => token.symbol === symbol)!
  const within2Percent = (out: bigint, expectedOut: bigint) => out * 100n >= expectedOut * 98n && out * 100n <= expectedOut * 102n
  for (const pair of pairs) {
    const a = tokenOf(pair.a)
    const b = tokenOf(pair.b)
    const priceE18 = parseUnits(pair.price, 18) // whole B per whole A, × 1e18
    const inA = parseUnits(pair.amountA, a.decimals)
    const outB = (inA * priceE18 * 10n ** BigInt(b.decimals)) / (10n ** 18n * 10n ** BigInt(a.decimals))
    // A -> B for inA should give ~outB; B -> A for outB should give ~inA.
    for (const [tokenIn, tokenOut, amountIn, expectedOut] of [
      [a, b, inA, outB],
      [b, a, outB, inA],
    ] as const) {
      const { result: uni } = await client.simulateContract({
        address: book.uniswapV3.quoterV2,
        abi: uniswapQuoterV2Abi,
        functionName: 'quoteExactInputSingle',
        args: [{ tokenIn: tokenIn.address, tokenOut: tokenOut.address, amountIn, fee: pair.fee, sqrtPriceLimitX96: 0n }],
      })
      const { result: alg } = await client.simulateContract({
        address: book.algebra.quoterV2,
        abi: algebraQuoterV2Abi,
        functionName: 'quoteExactInputSingle',
        args: [{ tokenIn: tokenIn.address, tokenOut: tokenOut.address, deployer: zeroAddress, amountIn, limitSqrtPrice: 0n }],
      })
      const trade = `${formatUnits(amountIn, tokenIn.decimals)} ${tokenIn.symbol} -> ${tokenOut.symbol}`
      t.comment(
        `${trade}: Uniswap V3 ${formatUnits(uni[0], tokenOut.decimals)}, Algebra ${formatUnits(alg[0], tokenOut.decimals)} (intended ${formatUnits(expectedOut, tokenOut.decimals)})`,
      )
      t.ok(within2Percent(uni[0], expectedOut), `Uniswap V3 ${pair.uniswap}: ${trade} within 2% of ${pair.price}`)
      t.ok(within2Percent(alg[0], expectedOut), `Algebra ${pair.algebra}: ${trade} within 2% of ${pair.price}`)
    }
  }

  const confirm = async (hash: `0x${string}`) => {
    const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 20 })
    t.equal(receipt.status, 'success')
  }
  const balances = async () => ({
    weth: await client.readContract({ address: WETH, abi: tokenAbi, functionName: 'balanceOf', args: [trader.account.address] }),
    usdc: await client.readContract({ address: USDC, abi: tokenAbi, functionName: 'balanceOf', args: [trader.account.address] }),
  })
  await confirm(
    await trader.writeContract({ address: WETH, abi: tokenAbi, functionName: 'approve', args: [book.uniswapV3.swapRouter02, oneWeth] }),
  )
  const before = await balances()
  await confirm(
    await trader.writeContract({
      address: book.uniswapV3.swapRouter02,
      abi: uniswapSwapRouter02Abi,
      functionName: 'exactInputSingle',
      args: [
        {
          tokenIn: WETH,
          tokenOut: USDC,
          fee: 500,
          recipient: trader.account.address,
          amountIn: oneWeth,
          amountOutMinimum: (amountOut * 99n) / 100n,
          sqrtPriceLimitX96: 0n,
        },
      ],
    }),
  )
  const after = await balances()
  t.equal(before.weth - after.weth, oneWeth, 'spent 1 WETH')
  t.equal(after.usdc - before.usdc, amountOut, 'received exactly the quoted USDC')

  // The same through Algebra's SwapRouter, quoted again now.
  const { result: algebraQuoteNow } = await client.simulateContract({
    address: book.algebra.quoterV2,
    abi: algebraQuoterV2Abi,
    functionName: 'quoteExactInputSingle',
    args: [{ tokenIn: WETH, tokenOut: USDC, deployer: zeroAddress, amountIn: oneWeth, limitSqrtPrice: 0n }],
  })
  const [algebraAmountOut] = algebraQuoteNow
  await confirm(
    await trader.writeContract({ address: WETH, abi: tokenAbi, functionName: 'approve', args: [book.algebra.swapRouter, oneWeth] }),
  )
  const beforeAlgebra = await balances()
  await confirm(
    await trader.writeContract({
      address: book.algebra.swapRouter,
      abi: algebraSwapRouterAbi,
      functionName: 'exactInputSingle',
      args: [
        {
          tokenIn: WETH,
          tokenOut: USDC,
          deployer: zeroAddress,
          recipient: trader.account.address,
          deadline: maxUint256,
          amountIn: oneWeth,
          amountOutMinimum: (algebraAmountOut * 99n) / 100n,
          limitSqrtPrice: 0n,
        },
      ],
    }),
  )
  const afterAlgebra = await balances()
  t.comment(`Algebra SwapRouter: 1 WETH -> ${formatUnits(afterAlgebra.usdc - beforeAlgebra.usdc, 6)} USDC`)
  t.equal(beforeAlgebra.weth - afterAlgebra.weth, oneWeth, 'Algebra: spent 1 WETH')
  t.equal(afterAlgebra.usdc - beforeAlgebra.usdc, algebraAmountOut, 'Algebra: received exactly the quoted USDC')

  // Positions: the book's Aave pool and GMX reader answer for the server wallet (account 0).
  const server = devnet.accounts[0]!.address
  const [collateral, debt, , , , healthFactor] = await client.readContract({
    address: book.aaveV3.pool,
    abi: aavePoolAbi,
    functionName: 'getUserAccountData',
    args: [server],
  })
  t.same([collateral, debt, healthFactor], [SEEDED_LENDING.totalCollateralBase, SEEDED_LENDING.totalDebtBase, SEEDED_LENDING.healthFactor])
  const perps = await client.readContract({
    address: book.gmxV2.reader,
    abi: gmxReaderAbi,
    functionName: 'getAccountPositions',
    args: [book.gmxV2.dataStore, server, 0n, 10n],
  })
  t.equal(perps.length, 1, 'one perpetual position')
  t.equal(perps[0]?.flags.isLong, true)

  // NFTs: two collections, the second flagged as spam by the book.
  t.equal(book.nfts.collections.length, 2)
  t.same(book.nfts.spam, [book.nfts.collections[1]])
  t.same(await listTokensByLogs(client, book.nfts.collections[0]!, server), [1n, 2n, 3n])
  t.same(await listTokensByLogs(client, book.nfts.collections[0]!, devnet.accounts[1]!.address), [4n, 5n])

  // USDC is the EIP-3009 token x402 settles on.
  t.equal(await client.readContract({ address: USDC, abi: eip3009Abi, functionName: 'version' }), '2')

  await devnet.stop()
  t.notOk(existsSync(addressBookPath), 'stopping removes the address book it wrote')
  await t.rejects(client.getChainId(), 'anvil is stopped')
})

t.test('deployment is deterministic: a fresh anvil gives the same address book', async (t) => {
  const books: DevnetAddressBook[] = []
  for (let i = 0; i < 2; i++) {
    const anvil = await startAnvil({ port: 0 })
    try {
      books.push(await deployDevnet(anvil.rpcUrl))
    } finally {
      await anvil.stop()
    }
  }
  t.same(books[0], books[1])
})

t.test('a snapshot start is the fresh chain: same book, balances, nonces and block; only faster', async (t) => {
  // accounts: 4, a count no other test uses: the first start deploys and saves unless an earlier run did, the second loads
  const read = async (rpcUrl: string, book: DevnetAddressBook) => {
    const client = createPublicClient({ chain: anvilChain, transport: http(rpcUrl) })
    const holders = devAccounts(4).map((account) => account.address)
    return {
      block: await client.getBlockNumber(),
      nonce: await client.getTransactionCount({ address: holders[0]! }),
      balances: await Promise.all(
        book.tokens.flatMap((token) =>
          holders.map((holder) =>
            client.readContract({ address: token.address, abi: tokenAbi, functionName: 'balanceOf', args: [holder] }),
          ),
        ),
      ),
      code: await client.getCode({ address: book.uniswapV3.swapRouter02 }),
      multicall: await client.getCode({ address: MULTICALL3_ADDRESS }),
    }
  }
  const fresh = await startDevnet({ port: 0, addressBookPath: false, accounts: 4 })
  const expected = await read(fresh.rpcUrl, fresh.book)
  await fresh.stop()
  t.ok((expected.multicall?.length ?? 0) > 2, 'Multicall3 (aggregate3) at its Arbitrum One address')

  const starts = []
  for (let i = 0; i < 2; i++) {
    const devnet = await startDevnet({ port: 0, addressBookPath: false, accounts: 4, snapshot: true })
    starts.push({ book: devnet.book, state: await read(devnet.rpcUrl, devnet.book), timings: devnet.timings })
    await devnet.stop()
  }
  for (const [i, start] of starts.entries()) {
    t.same({ ...start.book, devnet: undefined }, { ...fresh.book, devnet: undefined }, `start ${i + 1}: the same address book`)
    t.same(start.state, expected, `start ${i + 1}: the same balances, deployer nonce, block and code`)
  }
  t.equal(starts[1]!.timings.deployMs, 0, 'the second start deployed nothing: it loaded the saved state')
  t.comment(`fresh ${fresh.timings.totalMs} ms; from the snapshot ${starts[1]!.timings.totalMs} ms`)

  const off = process.env.ATS_DEVNET_SNAPSHOTS
  process.env.ATS_DEVNET_SNAPSHOTS = '0'
  t.teardown(() => {
    if (off === undefined) delete process.env.ATS_DEVNET_SNAPSHOTS
    else process.env.ATS_DEVNET_SNAPSHOTS = off
  })
  const forced = await startDevnet({ port: 0, addressBookPath: false, accounts: 4, snapshot: true })
  t.ok(forced.timings.deployMs > 0, 'ATS_DEVNET_SNAPSHOTS=0 deploys afresh')
  await forced.stop()
})

t.test('clear errors', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => blocker.close(() => resolve())))
  const { port } = blocker.address() as { port: number }
  await t.rejects(startAnvil({ port }), new RegExp(`port 127\\.0\\.0\\.1:${port} is not free`))

  const saved = process.env.ANVIL_BIN
  process.env.ANVIL_BIN = '/nonexistent/anvil'
  t.teardown(() => {
    if (saved === undefined) delete process.env.ANVIL_BIN
    else process.env.ANVIL_BIN = saved
  })
  await t.rejects(startAnvil({ port: 0 }), /anvil: failed to start .*ENOENT/)
})
