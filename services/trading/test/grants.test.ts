import { erc20Abi } from '@ats/chain'
import { startTestDevnet } from '@ats/devnet'
import { readFileSync } from 'node:fs'
import t from 'tap'
import {
  BaseError,
  ContractFunctionRevertedError,
  concatHex,
  createWalletClient,
  http,
  maxUint256,
  numberToHex,
  parseUnits,
  zeroAddress,
  type Abi,
  type Address,
  type Hex,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'

/**
 * TradeGrants (contracts/TradeGrants.sol) on a real devnet with the real Uniswap V3 and Algebra
 * routers: what the owner grants is all the delegate can do, and every way past it reverts.
 */
const artifact = JSON.parse(readFileSync(new URL('../artifacts/TradeGrants.json', import.meta.url), 'utf8')) as { abi: Abi; bytecode: Hex }
const { devnet, publicClient } = await startTestDevnet(t)
const book = devnet.book
const token = (symbol: string) => book.tokens.find((x) => x.symbol === symbol)!.address
const [USDC, WETH, ARB] = [token('USDC'), token('WETH'), token('ARB')]
const clientOf = (index: number) =>
  createWalletClient({
    account: privateKeyToAccount(devnet.accounts[index]!.privateKey),
    chain: publicClient.chain!,
    transport: http(devnet.rpcUrl),
  })
const owner = clientOf(3)
const delegate = clientOf(4)
const stranger = clientOf(5)
const ownerAddress = owner.account.address

const deployHash = await owner.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode })
const grants = (await publicClient.waitForTransactionReceipt({ hash: deployHash })).contractAddress!
const UNISWAP = 1
const ALGEBRA = 2
const usdc = (amount: string) => parseUnits(amount, 6)
const uniswapPath = (a: Address, fee: number, b: Address) => concatHex([a, numberToHex(fee, { size: 3 }), b])
const algebraPath = (a: Address, b: Address) => concatHex([a, zeroAddress, b])
const balanceOf = (tokenAddress: Address, who: Address) =>
  publicClient.readContract({ address: tokenAddress, abi: erc20Abi, functionName: 'balanceOf', args: [who] })
const now = async () => (await publicClient.getBlock()).timestamp
/** mines a block at `timestamp`: the calls after it run at that time */
async function advanceTo(timestamp: bigint) {
  await publicClient.request({ method: 'evm_setNextBlockTimestamp' as never, params: [numberToHex(timestamp)] as never })
  await publicClient.request({ method: 'evm_mine' as never, params: [] as never })
}
const mined = async (hash: Hex) => {
  const receipt = await publicClient.waitForTransactionReceipt({ hash })
  if (receipt.status !== 'success') throw new Error(`${hash} reverted`)
  return receipt
}

/** the custom error a call reverts with (its name and arguments), or 'no revert' */
async function revertOf(call: () => Promise<unknown>): Promise<string> {
  try {
    await call()
    return 'no revert'
  } catch (error) {
    const reverted = error instanceof BaseError ? error.walk((e) => e instanceof ContractFunctionRevertedError) : undefined
    if (reverted instanceof ContractFunctionRevertedError) {
      return reverted.data ? `${reverted.data.errorName}(${(reverted.data.args ?? []).join(',')})` : (reverted.reason ?? 'reverted')
    }
    return `reverted: ${(error as Error).message.split('\n')[0]}`
  }
}

/** the owner's grant of `limit` USDC a day into WETH on both routers; answers its id */
async function grantUsdc(
  limit: bigint,
  { expiresIn = 86_400n * 30n, tokensOut = [WETH] as Address[], delegateAddress = delegate.account.address } = {},
) {
  const expiry = (await now()) + expiresIn
  const args = [
    delegateAddress,
    USDC,
    limit,
    86_400,
    expiry,
    [book.uniswapV3.swapRouter02, book.algebra.swapRouter],
    [UNISWAP, ALGEBRA],
    tokensOut,
  ] as const
  const { result, request } = await publicClient.simulateContract({
    account: owner.account,
    address: grants,
    abi: artifact.abi,
    functionName: 'grant',
    args,
  })
  await mined(await owner.writeContract(request))
  return result as Hex
}

const swap = (
  from: typeof delegate,
  id: Hex,
  {
    router = book.uniswapV3.swapRouter02 as Address,
    path = uniswapPath(USDC, 500, WETH),
    amountIn = usdc('30'),
    minOut = 1n,
    deadline = maxUint256,
  } = {},
) =>
  publicClient
    .simulateContract({
      account: from.account,
      address: grants,
      abi: artifact.abi,
      functionName: 'swap',
      args: [id, router, path, amountIn, minOut, deadline],
    })
    .then(async ({ request }) => mined(await from.writeContract(request)))

await mined(await owner.writeContract({ address: USDC, abi: erc20Abi, functionName: 'approve', args: [grants, maxUint256] }))

t.test('the delegate swaps the owner’s USDC on both DEXes; the WETH arrives in the owner’s wallet and nothing stays behind', async (t) => {
  const id = await grantUsdc(usdc('100'))
  const [usdcBefore, wethBefore, delegateWeth] = [
    await balanceOf(USDC, ownerAddress),
    await balanceOf(WETH, ownerAddress),
    await balanceOf(WETH, delegate.account.address),
  ]
  await swap(delegate, id)
  await swap(delegate, id, { router: book.algebra.swapRouter, path: algebraPath(USDC, WETH), amountIn: usdc('20') })
  t.equal(await balanceOf(USDC, ownerAddress), usdcBefore - usdc('50'), '50 USDC left the owner')
  const received = (await balanceOf(WETH, ownerAddress)) - wethBefore
  t.ok(received > parseUnits('0.015', 18) && received < parseUnits('0.02', 18), `about 50 / 3000 WETH arrived (${received})`)
  t.equal(await balanceOf(WETH, delegate.account.address), delegateWeth, 'the delegate received nothing')
  t.equal(await balanceOf(USDC, grants), 0n, 'the contract holds no USDC')
  t.equal(await balanceOf(WETH, grants), 0n, 'the contract holds no WETH')
  const [left] = (await publicClient.readContract({ address: grants, abi: artifact.abi, functionName: 'remaining', args: [id] })) as [
    bigint,
    bigint,
  ]
  t.equal(left, usdc('50'), '50 of the day’s 100 remain')
})

t.test('more than the period’s amount reverts, and the amount renews the next day', async (t) => {
  const id = await grantUsdc(usdc('100'))
  t.equal(
    await revertOf(() => swap(delegate, id, { amountIn: usdc('200') })),
    `PeriodLimitExceeded(${usdc('100')},${(await remainingOf(id))[1]})`,
    '200 at once',
  )
  await swap(delegate, id, { amountIn: usdc('60') })
  const [, renewsAt] = await remainingOf(id)
  t.equal(
    await revertOf(() => swap(delegate, id, { amountIn: usdc('60') })),
    `PeriodLimitExceeded(${usdc('40')},${renewsAt})`,
    '60 more in the same day',
  )
  await advanceTo(renewsAt)
  await swap(delegate, id, { amountIn: usdc('60') })
  t.equal((await remainingOf(id))[0], usdc('40'), 'the next day renews the amount')
})

t.test('every way past the grant reverts', async (t) => {
  const id = await grantUsdc(usdc('100'))
  const usdcBefore = await balanceOf(USDC, ownerAddress)
  t.equal(await revertOf(() => swap(stranger, id)), 'NotDelegate()', 'someone else than the delegate')
  t.equal(
    await revertOf(() => swap(delegate, id, { router: book.uniswapV3.quoterV2 as Address })),
    `RouterNotAllowed(${book.uniswapV3.quoterV2})`,
    'a contract that is not a granted router',
  )
  t.equal(
    await revertOf(() => swap(delegate, id, { path: uniswapPath(USDC, 3000, ARB) })),
    `TokenNotAllowed(${ARB})`,
    'into a token not granted',
  )
  t.equal(
    await revertOf(() => swap(delegate, id, { path: uniswapPath(WETH, 500, USDC) })),
    `TokenNotAllowed(${WETH})`,
    'spending another token',
  )
  t.equal(await revertOf(() => swap(delegate, id, { path: concatHex([USDC, WETH]) })), 'InvalidSwap(path)', 'a malformed path')
  t.equal(await revertOf(() => swap(delegate, id, { deadline: 1n })), 'InvalidSwap(deadline passed)', 'after its deadline')
  // the output goes to the owner whatever the delegate wants: the only ways to another address fail
  t.equal(
    await revertOf(() =>
      delegate.writeContract({
        address: USDC,
        abi: erc20Abi,
        functionName: 'transferFrom',
        args: [ownerAddress, delegate.account.address, usdc('1')],
      }),
    ),
    'Panic(17)',
    'the delegate cannot move the owner’s tokens itself (the allowance is the contract’s: the token’s allowance underflows)',
  )
  t.match(
    await revertOf(() => swap(delegate, id, { minOut: parseUnits('1', 18) })),
    'Error(Too little received)',
    'a minimum the swap cannot pay reverts in the router',
  )
  t.equal(await balanceOf(USDC, ownerAddress), usdcBefore, 'the owner lost nothing')
})

t.test('a revoked or expired grant, or one the owner did not make, cannot be used', async (t) => {
  const revoked = await grantUsdc(usdc('100'))
  t.equal(
    await revertOf(() => stranger.writeContract({ address: grants, abi: artifact.abi, functionName: 'revoke', args: [revoked] })),
    'NotOwner()',
  )
  await mined(await owner.writeContract({ address: grants, abi: artifact.abi, functionName: 'revoke', args: [revoked] }))
  t.equal(await revertOf(() => swap(delegate, revoked)), `GrantRevoked(${revoked})`, 'revoked')
  const expiring = await grantUsdc(usdc('100'), { expiresIn: 60n })
  const [g] = [
    (await publicClient.readContract({ address: grants, abi: artifact.abi, functionName: 'grants', args: [expiring] })) as unknown[],
  ]
  const expiry = g[6] as bigint
  await advanceTo(expiry)
  t.equal(await revertOf(() => swap(delegate, expiring)), `GrantExpired(${expiring},${expiry})`, 'expired')
  const unknown = `0x${'11'.repeat(32)}` as Hex
  t.equal(await revertOf(() => swap(delegate, unknown)), `NoGrant(${unknown})`, 'never granted')
})

t.test('a grant that could not be kept is refused when made', async (t) => {
  const expiry = (await now()) + 3600n
  const routers = [book.uniswapV3.swapRouter02]
  const attempt = (args: readonly unknown[]) => () =>
    publicClient.simulateContract({ account: owner.account, address: grants, abi: artifact.abi, functionName: 'grant', args })
  t.equal(
    await revertOf(attempt([delegate.account.address, USDC, 0n, 86_400, expiry, routers, [UNISWAP], [WETH]])),
    'InvalidGrant(limit is 0)',
  )
  t.equal(
    await revertOf(attempt([delegate.account.address, USDC, 1n, 86_400, 1n, routers, [UNISWAP], [WETH]])),
    'InvalidGrant(expiry is not in the future)',
  )
  t.equal(
    await revertOf(attempt([delegate.account.address, USDC, 1n, 86_400, expiry, routers, [7], [WETH]])),
    'InvalidGrant(unknown router kind)',
  )
  t.equal(
    await revertOf(attempt([delegate.account.address, USDC, 1n, 86_400, expiry, routers, [UNISWAP], [USDC]])),
    'InvalidGrant(token out)',
  )
})

async function remainingOf(id: Hex) {
  return (await publicClient.readContract({ address: grants, abi: artifact.abi, functionName: 'remaining', args: [id] })) as [
    bigint,
    bigint,
  ]
}
