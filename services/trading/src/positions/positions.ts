import { aavePoolAbi, gmxReaderAbi, gmxReaderMarketAbi, type AddressBook, type Token } from '@ats/chain'
import type { Positions } from '@ats/contracts'
import { getAddress, type Address, type PublicClient } from 'viem'
import type { Quoter } from '../swaps/quotes.ts'

const zeroLending = { totalCollateralBase: '0', totalDebtBase: '0', availableBorrowsBase: '0', healthFactor: '0', ltv: '0' }
/** GMX keeps USD with 30 decimals; USDC has 6. */
const USDC_TO_GMX_USD = 10n ** 24n

/**
 * Lending and perp positions, read with the protocols' own ABIs: Aave V3 Pool
 * getUserAccountData and GMX V2 Reader getAccountPositions (the first 100). entryPrice is
 * sizeInUsd ÷ sizeInTokens per whole index token; pnl is valued at the DEX mid price of the
 * index token in USDC (fees and funding not counted).
 */
export function createPositions({
  client,
  book,
  quoter,
  tokens,
  wallet,
}: {
  client: PublicClient
  book: () => AddressBook
  quoter: Quoter
  tokens: (address: Address) => Token | undefined
  /** whose positions when no address is given: the server wallet (a 503 without one) */
  wallet: () => Address
}) {
  async function indexTokenOf(market: Address): Promise<Token | undefined> {
    const known = tokens(market) // the devnet's markets are keyed by their index token
    if (known) return known
    const gmx = book().gmxV2
    if (!gmx) return undefined
    try {
      const props = await client.readContract({
        address: gmx.reader,
        abi: gmxReaderMarketAbi,
        functionName: 'getMarket',
        args: [gmx.dataStore, market],
      })
      return tokens(props.indexToken)
    } catch {
      return undefined
    }
  }

  /** USD (30 decimals) of one whole index token at the mid price, or undefined without a route to USDC */
  async function priceOf(token: Token): Promise<bigint | undefined> {
    if (token.symbol === 'USDC') return 10n ** 30n
    try {
      const q = await quoter.quote({ tokenIn: token.address, tokenOut: 'USDC', amountIn: (10n ** BigInt(token.decimals)).toString() })
      return q.spotAmountOut * USDC_TO_GMX_USD
    } catch {
      return undefined
    }
  }

  return async function positionsOf(of?: string): Promise<Positions> {
    const address = of ? getAddress(of) : wallet()
    const { aaveV3, gmxV2 } = book()
    const [lending, perps] = await Promise.all([
      aaveV3
        ? client.readContract({ address: aaveV3.pool, abi: aavePoolAbi, functionName: 'getUserAccountData', args: [address] })
        : undefined,
      gmxV2
        ? client.readContract({
            address: gmxV2.reader,
            abi: gmxReaderAbi,
            functionName: 'getAccountPositions',
            args: [gmxV2.dataStore, address, 0n, 100n],
          })
        : [],
    ])
    const gmx = await Promise.all(
      perps.map(async (position) => {
        const { sizeInUsd, sizeInTokens, collateralAmount } = position.numbers
        const index = await indexTokenOf(position.addresses.market)
        const unit = index ? 10n ** BigInt(index.decimals) : undefined
        const entryPrice = unit && sizeInTokens > 0n ? (sizeInUsd * unit) / sizeInTokens : 0n
        const price = index ? await priceOf(index) : undefined
        const value = price !== undefined && unit ? (sizeInTokens * price) / unit : undefined
        const pnl = value === undefined ? 0n : position.flags.isLong ? value - sizeInUsd : sizeInUsd - value
        return {
          market: getAddress(position.addresses.market),
          side: position.flags.isLong ? ('long' as const) : ('short' as const),
          size: sizeInUsd.toString(),
          collateral: collateralAmount.toString(),
          collateralToken: getAddress(position.addresses.collateralToken),
          entryPrice: entryPrice.toString(),
          pnl: pnl.toString(),
        }
      }),
    )
    const aave = lending
      ? {
          totalCollateralBase: lending[0].toString(),
          totalDebtBase: lending[1].toString(),
          availableBorrowsBase: lending[2].toString(),
          healthFactor: lending[5].toString(),
          ltv: lending[4].toString(),
        }
      : zeroLending
    return { address: getAddress(address), aave, gmx }
  }
}
