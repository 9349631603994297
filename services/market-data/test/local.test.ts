import { algebraSwapRouterAbi, uniswapSwapRouter02Abi, type AddressBook } from '@ats/chain'
import type { Logger } from '@ats/service-kit'
import t from 'tap'
import { createWalletClient, erc20Abi, erc721Abi, http, maxUint256, parseUnits, zeroAddress, type Address, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { anvilChain } from '@ats/chain'
import { logNfts } from '../src/local/nfts.ts'
import { devnetPools } from '../src/local/pools.ts'
import { poolPrices } from '../src/local/prices.ts'
import { poolTrending, swapIndexer } from '../src/local/trending.ts'
import { migratedDb, startTestDevnet } from './helpers.ts'

/** The local sources against a devnet of this file's own: prices first, then swaps move them. */
const { devnet, publicClient } = await startTestDevnet(t)
const book = () => devnet.book
const pools = devnetPools(publicClient, book)
const token = (symbol: string) => devnet.book.tokens.find((candidate) => candidate.symbol === symbol)!
const HOUR = 3600_000

function spyLog() {
  const warnings: string[] = []
  const none = () => {}
  const log = {
    level: 'warn',
    warn: (_: unknown, message: string) => warnings.push(message),
    info: none,
    error: none,
    debug: none,
    trace: none,
    fatal: none,
  } as unknown as Logger
  log.child = () => log
  return { log, warnings }
}

const near = (actual: number, expected: number, tolerance = 0.01) => Math.abs(actual - expected) <= Math.abs(expected) * tolerance

t.test('the pools of both DEXes are named base first: the dollar, else WETH, is the quote', async (t) => {
  const list = await pools.list()
  t.equal(list.length, 14)
  const pairs = ['WETH / USDC', 'WBTC / USDC', 'ARB / USDC', 'ARB / WETH', 'GMX / WETH', 'USDT / USDC', 'LINK / USDC']
  const fees = ['0.05%', '0.3%', '0.3%', '0.3%', '1%', '0.05%', '0.3%']
  t.same(
    list.map((pool) => [pool.dex, pool.name]),
    [...pairs.map((pair, i) => ['uniswap', `${pair} ${fees[i]}`]), ...pairs.map((pair) => ['camelot', pair])],
  )
  for (const pool of list) {
    t.ok(pool.token0.address.toLowerCase() < pool.token1.address.toLowerCase(), `${pool.name}: token0 sorts first`)
    t.same(
      [pool.base.symbol, pool.quote.symbol],
      pool.name
        .split(' ')
        .filter((word) => word !== '/')
        .slice(0, 2),
    )
  }
  t.same(
    list.filter((pool) => pool.dex === 'camelot').map((pool) => pool.fee),
    Array(7).fill('dynamic'),
  )
  t.equal(list.find((pool) => pool.name === 'WETH / USDC 0.05%')?.address, devnet.book.uniswapV3.pools.WETH_USDC_500)
})

t.test('prices of the seven core assets come from the pools: USDC is the dollar, GMX goes through WETH', async (t) => {
  const { db } = await migratedDb(t)
  const prices = await poolPrices({ db, pools, log: spyLog().log }).prices()
  const seeded = { ETH: 3000, BTC: 60000, USDC: 1, USDT: 1, ARB: 0.8, GMX: 30, LINK: 15 }
  t.same(Object.keys(prices).sort(), Object.keys(seeded).sort())
  for (const [asset, price] of Object.entries(seeded)) {
    const entry = prices[asset as keyof typeof seeded]!
    t.ok(near(entry.price, price), `${asset} ${entry.price} is about ${price}`)
    t.equal(entry.change24h, 0, `${asset}: no history, no change`)
  }
  t.equal(prices.USDC!.price, 1, 'USDC is 1 by definition')
})

t.test('change24h: against the latest sample at or before 24 hours ago; a younger history against its oldest sample', async (t) => {
  const { db } = await migratedDb(t)
  const now = Date.now()
  const at = (ms: number) => new Date(now - ms)
  await db.priceSample.createMany({
    data: [
      { asset: 'ETH', bucket: at(30 * HOUR), price: 2000 },
      { asset: 'ETH', bucket: at(24 * HOUR), price: 2500 },
      { asset: 'ETH', bucket: at(23 * HOUR), price: 2800 },
      { asset: 'BTC', bucket: at(2 * HOUR), price: 50000 },
      { asset: 'BTC', bucket: at(1 * HOUR), price: 55000 },
    ],
  })
  const prices = await poolPrices({ db, pools, log: spyLog().log, now: () => now }).prices()
  t.ok(near(prices.ETH!.change24h, (prices.ETH!.price / 2500 - 1) * 100, 1e-9), `ETH against 2500: ${prices.ETH!.change24h}`)
  t.ok(near(prices.ETH!.change24h, 20), 'about +20%')
  t.ok(near(prices.BTC!.change24h, (prices.BTC!.price / 50000 - 1) * 100, 1e-9), `BTC against its oldest sample: ${prices.BTC!.change24h}`)
  t.equal(prices.ARB!.change24h, 0, 'no sample: 0')
})

t.test('record samples every asset and pool once per bucket, however often it runs', async (t) => {
  const { db } = await migratedDb(t)
  const interval = 300_000
  let now = Math.floor(Date.now() / interval) * interval + 1000
  const source = poolPrices({ db, pools, log: spyLog().log, now: () => now })
  await source.record(interval)
  now += 60_000
  await source.record(interval)
  const samples = await db.priceSample.findMany()
  t.equal(samples.length, 7 + 14, 'seven assets and fourteen pools')
  t.ok(
    samples.every((sample) => sample.bucket.getTime() === now - 61_000),
    'all in the bucket of the first call',
  )
  const wethUsdc = samples.find((sample) => sample.asset === `pool:${devnet.book.uniswapV3.pools.WETH_USDC_500}`)
  t.ok(wethUsdc && near(wethUsdc.price, 3000), 'a pool is sampled at its pair price (USDC per WETH)')
  t.ok(near(samples.find((sample) => sample.asset === 'BTC')!.price, 60000))
  now += interval
  await source.record(interval)
  t.equal(await db.priceSample.count(), 2 * 21, 'the next bucket gets its own samples')
})

t.test('an asset whose pool is missing is left out and logged; the rest are priced', async (t) => {
  const { db } = await migratedDb(t)
  const { LINK_USDC_3000: _u, ...uniswap } = devnet.book.uniswapV3.pools
  const { LINK_USDC: _a, ...algebra } = devnet.book.algebra.pools
  const partial: AddressBook = {
    ...devnet.book,
    uniswapV3: { ...devnet.book.uniswapV3, pools: uniswap },
    algebra: { ...devnet.book.algebra, pools: algebra },
  }
  const { log, warnings } = spyLog()
  const prices = await poolPrices({ db, pools: devnetPools(publicClient, () => partial), log }).prices()
  t.same(Object.keys(prices).sort(), ['ARB', 'BTC', 'ETH', 'GMX', 'USDC', 'USDT'])
  t.match(warnings, [/no pool prices these assets/])
})

t.test('NFTs: what an account holds of each collection, spam flagged, and a transfer moves a token', async (t) => {
  const [apes, spam] = devnet.book.nfts.collections as [Address, Address]
  const owner = devnet.accounts[0]!
  const receiver = devnet.accounts[5]!.address
  const nfts = logNfts({ client: publicClient, book })
  const listed = await nfts.nftsOf(owner.address, {})
  t.equal(listed.pageKey, undefined, 'all on one page')
  t.same(
    listed.nfts.map(({ contractAddress, tokenId, name, collection, imageUrl, isSpam }) => ({
      contractAddress,
      tokenId,
      name,
      collection,
      imageUrl,
      isSpam,
    })),
    [
      ...['1', '2', '3'].map((id) => ({
        contractAddress: spam,
        tokenId: id,
        name: `Claim Free ETH #${id}`,
        collection: 'Claim Free ETH',
        imageUrl: `https://devnet.invalid/collection/${id}`,
        isSpam: true,
      })),
      ...['1', '2', '3'].map((id) => ({
        contractAddress: apes,
        tokenId: id,
        name: `Devnet Apes #${id}`,
        collection: 'Devnet Apes',
        imageUrl: `https://devnet.invalid/collection/${id}`,
        isSpam: false,
      })),
    ],
    'by collection, then token id',
  )

  const wallet = createWalletClient({ account: privateKeyToAccount(owner.privateKey), chain: anvilChain, transport: http(devnet.rpcUrl) })
  const hash = await wallet.writeContract({
    address: apes,
    abi: erc721Abi,
    functionName: 'transferFrom',
    args: [owner.address, receiver, 2n],
  })
  t.equal((await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })).status, 'success')
  const apesOf = async (address: Address) =>
    (await nfts.nftsOf(address, {})).nfts.filter((nft) => nft.contractAddress === apes).map((nft) => nft.tokenId)
  t.same(await apesOf(owner.address), ['1', '3'], 'the sender no longer lists token 2')
  t.same(await apesOf(receiver), ['2'], 'the receiver does')

  const flagged = await logNfts({ client: publicClient, book, extraSpam: [apes.toLowerCase() as Address] }).nftsOf(owner.address, {})
  t.ok(
    flagged.nfts.every((nft) => nft.isSpam),
    'extraSpam flags a collection, whatever its case',
  )
  const { nfts: _, ...withoutNfts } = devnet.book
  t.same(
    await logNfts({ client: publicClient, book: () => withoutNfts }).nftsOf(owner.address, {}),
    { nfts: [] },
    'a book without collections lists none',
  )
})

const trader = devnet.accounts[2]!
const wallet = createWalletClient({ account: privateKeyToAccount(trader.privateKey), chain: anvilChain, transport: http(devnet.rpcUrl) })
const confirm = async (hash: Hex) => {
  const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
  if (receipt.status !== 'success') throw new Error(`${hash} reverted`)
}
const balanceOf = (address: Address) =>
  publicClient.readContract({ address, abi: erc20Abi, functionName: 'balanceOf', args: [trader.address] })

/** Swaps through the DEX's router; returns what came out. */
async function swap(dex: 'uniswap' | 'camelot', tokenIn: Address, tokenOut: Address, amountIn: bigint, fee = 0): Promise<bigint> {
  const router = dex === 'uniswap' ? devnet.book.uniswapV3.swapRouter02 : devnet.book.algebra.swapRouter
  await confirm(await wallet.writeContract({ address: tokenIn, abi: erc20Abi, functionName: 'approve', args: [router, maxUint256] }))
  const before = await balanceOf(tokenOut)
  const common = { tokenIn, tokenOut, recipient: trader.address, amountIn, amountOutMinimum: 0n }
  await confirm(
    dex === 'uniswap'
      ? await wallet.writeContract({
          address: router,
          abi: uniswapSwapRouter02Abi,
          functionName: 'exactInputSingle',
          args: [{ ...common, fee, sqrtPriceLimitX96: 0n }],
        })
      : await wallet.writeContract({
          address: router,
          abi: algebraSwapRouterAbi,
          functionName: 'exactInputSingle',
          args: [{ ...common, deployer: zeroAddress, deadline: maxUint256, limitSqrtPrice: 0n }],
        }),
  )
  return (await balanceOf(tokenOut)) - before
}

async function drain(indexer: { round(): Promise<boolean> }) {
  let rounds = 1
  while (await indexer.round()) rounds++
  return rounds
}

t.test('trending: after real swaps the indexer stores them and the busiest pool leads, by USD volume of its quote side', async (t) => {
  const { db } = await migratedDb(t)
  const { log } = spyLog()
  const indexer = swapIndexer({ db, client: publicClient, pools, chainId: 31337, log, chunkBlocks: 10 })
  const trending = poolTrending({ db, pools, chainId: 31337, log })

  t.ok((await drain(indexer)) > 1, 'a chunk per round until the head')
  const quiet = await trending.trending(20)
  t.equal(quiet.length, 14)
  t.ok(
    quiet.every((pool) => pool.volume24h === '0.00'),
    'no swaps yet',
  )
  t.same(
    quiet.map((pool) => pool.name),
    quiet.map((pool) => pool.name).sort(),
    'equal volumes: by name',
  )

  const usdcOut = await swap('uniswap', token('LINK').address, token('USDC').address, parseUnits('1000', 18), 3000)
  await swap('camelot', token('WETH').address, token('ARB').address, parseUnits('1', 18))
  await swap('uniswap', token('USDC').address, token('WETH').address, parseUnits('100', 6), 500)
  // a swap older than 24 hours is not counted
  await db.swapEvent.create({
    data: {
      chainId: 31337,
      blockNumber: 1_000_000_000n,
      logIndex: 0,
      pool: devnet.book.uniswapV3.pools.WETH_USDC_500,
      txHash: `0x${'1'.repeat(64)}`,
      amount0: '1000000000000000000000',
      amount1: '-3000000000000',
      at: new Date(Date.now() - 25 * HOUR),
    },
  })
  const linkPool = devnet.book.uniswapV3.pools.LINK_USDC_3000
  await db.priceSample.create({ data: { asset: `pool:${linkPool}`, bucket: new Date(Date.now() - 24 * HOUR), price: 12 } })

  await drain(indexer)
  t.equal(await db.swapEvent.count({ where: { at: { gt: new Date(Date.now() - HOUR) } } }), 3, 'the three swaps are stored')
  const snapshot = await pools.snapshot()
  const top = await trending.trending(10)
  t.equal(top.length, 10, 'at most limit pools')
  t.same(
    top.slice(0, 3).map((pool) => [pool.name, pool.dex]),
    [
      ['LINK / USDC 0.3%', 'uniswap'],
      ['ARB / WETH', 'camelot'],
      ['WETH / USDC 0.05%', 'uniswap'],
    ],
  )
  const [link, arb, weth] = top as [(typeof top)[number], (typeof top)[number], (typeof top)[number]]
  t.equal(link.address, linkPool)
  t.equal(link.volume24h, (Number(usdcOut) / 1e6).toFixed(2), 'the USDC the swap paid out')
  const wethUsd = snapshot.usd(token('WETH').address)!
  t.ok(Math.abs(Number(arb.volume24h) - wethUsd) < 0.01, `the 1 WETH paid in, at $${wethUsd}: ${arb.volume24h}`)
  t.equal(weth.volume24h, '100.00', 'the 100 USDC paid in; the day-old swap is not counted')
  t.ok(near(Number(link.basePrice), snapshot.usd(token('LINK').address)!, 1e-3), `LINK at ${link.basePrice}`)
  const linkNow = snapshot.pools.find((pool) => pool.address === linkPool)!.pairPrice
  t.ok(Math.abs(Number(link.change24h) - (linkNow / 12 - 1) * 100) < 0.01, `change24h against the sample of 12: ${link.change24h}`)
  t.equal(arb.change24h, '0.00', 'no history: 0')
  t.ok(top.slice(3).every((pool) => pool.volume24h === '0.00'))
})

t.test('indexing is idempotent: run again, or by two indexers at once, each swap is stored once', async (t) => {
  const { db } = await migratedDb(t)
  const { log, warnings } = spyLog()
  const one = swapIndexer({ db, client: publicClient, pools, chainId: 31337, log, chunkBlocks: 25 })
  const two = swapIndexer({ db, client: publicClient, pools, chainId: 31337, log, chunkBlocks: 40 })
  await Promise.all([drain(one), drain(two)])
  const head = await publicClient.getBlockNumber({ cacheTime: 0 })
  t.equal(await db.swapEvent.count(), 3)
  t.equal((await db.indexCursor.findUnique({ where: { name: 'swaps:31337' } }))?.nextBlock, head + 1n, 'the cursor is past the head')
  t.equal(await drain(one), 1, 'nothing more to do')
  t.equal(await db.swapEvent.count(), 3)

  // a devnet restarted under the indexer: its head is below the cursor
  await db.indexCursor.update({ where: { name: 'swaps:31337' }, data: { nextBlock: head + 1000n } })
  await drain(one)
  t.match(warnings, [/restarted/])
  t.equal(await db.swapEvent.count(), 3, 'indexed again from block 0')
  t.equal((await db.indexCursor.findUnique({ where: { name: 'swaps:31337' } }))?.nextBlock, head + 1n)
})
