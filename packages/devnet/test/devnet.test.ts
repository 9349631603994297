import t from 'tap'
import { createServer } from 'node:net'
import { createPublicClient, createWalletClient, http, parseAbi, parseUnits, formatUnits, zeroAddress } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { anvil as anvilChain } from 'viem/chains'
import { startAnvil, deployDevnet, type AddressBook } from '../src/index.ts'

// Second default anvil account, so the swap does not touch the deployer's balances.
const TRADER_KEY = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'

const quoterAbi = parseAbi([
  'struct QuoteExactInputSingleParams { address tokenIn; address tokenOut; uint256 amountIn; uint24 fee; uint160 sqrtPriceLimitX96; }',
  'function quoteExactInputSingle(QuoteExactInputSingleParams params) returns (uint256 amountOut, uint160 sqrtPriceX96After, uint32 initializedTicksCrossed, uint256 gasEstimate)',
])
const routerAbi = parseAbi([
  'struct ExactInputSingleParams { address tokenIn; address tokenOut; uint24 fee; address recipient; uint256 amountIn; uint256 amountOutMinimum; uint160 sqrtPriceLimitX96; }',
  'function exactInputSingle(ExactInputSingleParams params) payable returns (uint256 amountOut)',
])
const algebraQuoterAbi = parseAbi([
  'struct QuoteExactInputSingleParams { address tokenIn; address tokenOut; address deployer; uint256 amountIn; uint160 limitSqrtPrice; }',
  'function quoteExactInputSingle(QuoteExactInputSingleParams params) returns (uint256 amountOut, uint256 amountIn, uint160 sqrtPriceX96After, uint32 initializedTicksCrossed, uint256 gasEstimate, uint16 fee)',
])
const tokenAbi = parseAbi([
  'function deposit() payable',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function balanceOf(address) view returns (uint256)',
])

t.test('anvil + devnet: Uniswap V3 quote and swap, Algebra quote, WETH -> USDC', async (t) => {
  const started = performance.now()
  const anvil = await startAnvil({ port: 8601 })
  t.teardown(() => anvil.stop())
  const book = await deployDevnet(anvil.rpcUrl)
  t.comment(`start + deploy took ${Math.round(performance.now() - started)} ms`)
  t.comment(JSON.stringify(book))
  t.equal(book.chainId, 31337)

  const transport = http(anvil.rpcUrl)
  const client = createPublicClient({ chain: anvilChain, transport, pollingInterval: 20 })
  const trader = createWalletClient({ account: privateKeyToAccount(TRADER_KEY), chain: anvilChain, transport })
  const { WETH, USDC } = book.tokens
  const oneWeth = parseUnits('1', 18)

  const { result: quote } = await client.simulateContract({
    address: book.uniswapV3.quoterV2,
    abi: quoterAbi,
    functionName: 'quoteExactInputSingle',
    args: [{ tokenIn: WETH, tokenOut: USDC, amountIn: oneWeth, fee: 500, sqrtPriceLimitX96: 0n }],
  })
  const [amountOut] = quote
  t.comment(`QuoterV2: 1 WETH -> ${formatUnits(amountOut, 6)} USDC`)
  t.ok(amountOut > parseUnits('2850', 6) && amountOut < parseUnits('3150', 6), 'quote is ~3000 USDC (within 5%)')

  const { result: algebraQuote } = await client.simulateContract({
    address: book.algebra.quoterV2,
    abi: algebraQuoterAbi,
    functionName: 'quoteExactInputSingle',
    args: [{ tokenIn: WETH, tokenOut: USDC, deployer: zeroAddress, amountIn: oneWeth, limitSqrtPrice: 0n }],
  })
  const [algebraOut, , , , , algebraFee] = algebraQuote
  t.comment(`Algebra QuoterV2: 1 WETH -> ${formatUnits(algebraOut, 6)} USDC (fee ${algebraFee / 1e4}%)`)
  t.ok(algebraOut > parseUnits('2850', 6) && algebraOut < parseUnits('3150', 6), 'Algebra quote is ~3000 USDC (within 5%)')

  const confirm = async (hash: `0x${string}`) => {
    const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 20 })
    t.equal(receipt.status, 'success')
  }
  const balances = async () => ({
    weth: await client.readContract({ address: WETH, abi: tokenAbi, functionName: 'balanceOf', args: [trader.account.address] }),
    usdc: await client.readContract({ address: USDC, abi: tokenAbi, functionName: 'balanceOf', args: [trader.account.address] }),
  })
  await confirm(await trader.writeContract({ address: WETH, abi: tokenAbi, functionName: 'deposit', value: oneWeth }))
  await confirm(
    await trader.writeContract({ address: WETH, abi: tokenAbi, functionName: 'approve', args: [book.uniswapV3.swapRouter02, oneWeth] }),
  )
  const before = await balances()
  await confirm(
    await trader.writeContract({
      address: book.uniswapV3.swapRouter02,
      abi: routerAbi,
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
})

t.test('deployment is deterministic: a fresh anvil gives the same address book', async (t) => {
  const books: AddressBook[] = []
  for (const port of [8602, 8603]) {
    const anvil = await startAnvil({ port })
    try {
      books.push(await deployDevnet(anvil.rpcUrl))
    } finally {
      await anvil.stop()
    }
  }
  t.same(books[0], books[1])
})

t.test('clear errors', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(8604, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => blocker.close(() => resolve())))
  await t.rejects(startAnvil({ port: 8604 }), /port 127\.0\.0\.1:8604 is not free/)

  const saved = process.env.ANVIL_BIN
  process.env.ANVIL_BIN = '/nonexistent/anvil'
  t.teardown(() => {
    if (saved === undefined) delete process.env.ANVIL_BIN
    else process.env.ANVIL_BIN = saved
  })
  await t.rejects(startAnvil({ port: 8605 }), /anvil: failed to start .*ENOENT/)
})
