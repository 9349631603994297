// The devnet's bridge source: a documented quote model over bundled chains, for when there is no internet.
import { ARBITRUM_ONE_CHAIN_ID, DEVNET_CHAIN_ID, type AddressBook } from '@ats/chain'
import type { BridgeQuote, BridgeToken, CoreAsset } from '@ats/contracts'
import { formatUnits, getAddress, keccak256, parseUnits, stringToHex } from 'viem'
import { BridgeUnsupported, NoBridgeRoute } from '../errors.ts'
import type { BridgeRequest, BridgeSource, PriceSource } from '../providers/types.ts'
import { modelChains, type ModelChain, type ModelToken } from './bridgeChains.ts'

const ethereum = 1

/**
 * Every constant of the offline bridge quote model (BRIDGE_SOURCE=model): its fees, gas, durations
 * and the core asset that prices each token, as docs/market-data.md ("Bridge: the offline quote model") states them.
 */
export const bridgeModel = {
  bridgeFeeBps: 5n,
  relayerFeeUsd: '0.50',
  gasUsd: new Map<number, string>([
    [ethereum, '3.00'],
    [ARBITRUM_ONE_CHAIN_ID, '0.05'],
    [10, '0.05'],
    [8453, '0.05'],
    [137, '0.02'],
    [56, '0.10'],
    [43114, '0.10'],
  ]),
  durationSeconds: { fromEthereum: 1200, toEthereum: 900, otherwise: 120 },
  bridgedSuffix: /\.[eb]$/,
  priceAsset: new Map<string, CoreAsset>([
    ['ETH', 'ETH'],
    ['WETH', 'ETH'],
    ['BTC', 'BTC'],
    ['WBTC', 'BTC'],
    ['BTCB', 'BTC'],
    ['USDC', 'USDC'],
    ['USDT', 'USDT'],
    ['DAI', 'USDC'],
    ['ARB', 'ARB'],
    ['GMX', 'GMX'],
    ['LINK', 'LINK'],
  ]),
}

type Cost = BridgeQuote['feeCosts'][number]

/** USD amounts are bigints of 10⁻¹⁸ USD. */
const usdDecimals = 18
const usd = (decimal: string) => parseUnits(decimal, usdDecimals)
const showUsd = (amount: bigint) => formatUnits(amount, usdDecimals)
const bps = 10_000n

export function modelBridge({ prices, book, chainId }: { prices: PriceSource; book: () => AddressBook; chainId: number }): BridgeSource {
  const chainOf = (id: number, side: string): ModelChain => {
    const chain = modelChains.find((c) => c.id === id)
    if (chain) return chain
    const devnet =
      id === chainId && chainId === DEVNET_CHAIN_ID ? ` (the devnet stands in for Arbitrum One: use ${ARBITRUM_ONE_CHAIN_ID})` : ''
    throw new BridgeUnsupported(`${side} ${id} is not a chain the bridge knows${devnet}: GET /bridge/chains lists them`)
  }

  /** a token by address or symbol (case-insensitive); on the devnet its own tokens stand in for Arbitrum One's */
  const tokenOf = (chain: ModelChain, ref: string, side: string): ModelToken => {
    const extra = chain.id === ARBITRUM_ONE_CHAIN_ID && chainId === DEVNET_CHAIN_ID ? book().tokens : []
    const wanted = ref.toLowerCase()
    const byAddress = wanted.startsWith('0x')
    const candidates = byAddress ? [...chain.tokens, ...extra] : [...extra, ...chain.tokens]
    const token = candidates.find((t) => (byAddress ? t.address : t.symbol).toLowerCase() === wanted)
    if (!token) {
      const known = [...new Set(candidates.map((t) => t.symbol))].join(', ')
      throw new BridgeUnsupported(`${side} ${ref} is not a token the bridge knows on ${chain.name} (${chain.id}); it knows ${known}`)
    }
    return token
  }

  const priceOf = (token: ModelToken, chain: ModelChain, known: Partial<Record<CoreAsset, { price: number }>>) => {
    const asset = bridgeModel.priceAsset.get(token.symbol.replace(bridgeModel.bridgedSuffix, ''))
    const price = asset ? known[asset]?.price : undefined
    // the shortest decimal of the price, at most 18 places: 3000.1 is 3000.1, not 3000.09999…
    const scaled =
      price !== undefined && Number.isFinite(price) && price > 0
        ? usd(price.toLocaleString('en-US', { useGrouping: false, maximumFractionDigits: usdDecimals }))
        : 0n
    if (scaled === 0n) throw new BridgeUnsupported(`the bridge model has no USD price for ${token.symbol} on ${chain.name} (${chain.id})`)
    return { number: price!, scaled }
  }

  return {
    name: 'model',

    async chains() {
      return modelChains.map(({ id, key, name, nativeToken }) => ({ id, key, name, nativeToken }))
    },

    async quote(request: BridgeRequest): Promise<BridgeQuote> {
      const { fromChainId, toChainId, amount, slippageBps } = request
      if (fromChainId === toChainId)
        throw new BridgeUnsupported(`fromChainId and toChainId are both ${fromChainId}: use /swap/quote for a swap on one chain`)
      const fromChain = chainOf(fromChainId, 'fromChainId')
      const toChain = chainOf(toChainId, 'toChainId')
      const from = tokenOf(fromChain, request.fromToken, 'fromToken')
      const to = tokenOf(toChain, request.toToken, 'toToken')
      const known = await prices.prices()
      const fromPrice = priceOf(from, fromChain, known)
      const toPrice = priceOf(to, toChain, known)

      const value = (amount * fromPrice.scaled) / 10n ** BigInt(from.decimals)
      const bridgeFee = (value * bridgeModel.bridgeFeeBps) / bps
      const relayerFee = usd(bridgeModel.relayerFeeUsd)
      const fees = bridgeFee + relayerFee
      const toAmount = value > fees ? ((value - fees) * 10n ** BigInt(to.decimals)) / toPrice.scaled : 0n
      if (toAmount === 0n) {
        throw new NoBridgeRoute(
          `amount too small: ${showUsd(value)} USD of ${from.symbol} does not cover the fees of ${showUsd(fees)} USD ` +
            `(a bridge fee of ${bridgeModel.bridgeFeeBps} bps and a relayer fee of ${bridgeModel.relayerFeeUsd} USD)`,
        )
      }

      const token = (t: ModelToken, id: number, priceUsd: number): BridgeToken => ({
        chainId: id,
        address: getAddress(t.address),
        symbol: t.symbol,
        decimals: t.decimals,
        priceUsd,
      })
      const cost = (name: string, amountUsd: bigint): Cost => ({ name, amountUsd: showUsd(amountUsd) })
      const { durationSeconds } = bridgeModel
      return {
        id: keccak256(
          stringToHex(
            JSON.stringify([
              fromChainId,
              toChainId,
              from.address.toLowerCase(),
              to.address.toLowerCase(),
              amount.toString(),
              request.userAddress.toLowerCase(),
              slippageBps,
            ]),
          ),
        ),
        source: 'model',
        tool: 'model',
        fromChainId,
        toChainId,
        fromToken: token(from, fromChainId, fromPrice.number),
        toToken: token(to, toChainId, toPrice.number),
        fromAmount: amount.toString(),
        toAmount: toAmount.toString(),
        toAmountMin: ((toAmount * (bps - BigInt(slippageBps))) / bps).toString(),
        estimatedDurationSeconds:
          fromChainId === ethereum
            ? durationSeconds.fromEthereum
            : toChainId === ethereum
              ? durationSeconds.toEthereum
              : durationSeconds.otherwise,
        feeCosts: [cost('bridge fee', bridgeFee), cost('relayer fee', relayerFee)],
        gasCosts: [cost('gas on the source chain', usd(bridgeModel.gasUsd.get(fromChainId)!))],
      }
    },
  }
}
