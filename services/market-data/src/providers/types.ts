// What each market source answers, whichever it is: a public API's adapter or the devnet's local source.
import type { BridgeChain, BridgeQuote, CoreAsset, Nft, PredictionMarket, PriceEntry, TrendingPool } from '@ats/contracts'
import type { Address } from 'viem'

/** USD prices of the core assets. */
export interface PriceSource {
  readonly name: string
  /** every core asset; one the source cannot price is left out (logged) rather than failing the rest */
  prices(): Promise<Partial<Record<CoreAsset, PriceEntry>>>
}

/** Pools by 24h volume, highest first. */
export interface TrendingSource {
  readonly name: string
  trending(limit: number): Promise<TrendingPool[]>
}

export interface NftPage {
  /** spam included, flagged: the route hides it unless asked */
  nfts: Nft[]
  pageKey?: string
}

export interface NftSource {
  readonly name: string
  nftsOf(owner: Address, options: { pageKey?: string }): Promise<NftPage>
}

export interface PredictionSource {
  readonly name: string
  /** open markets (active, not closed) by volume, highest first */
  top(limit: number): Promise<PredictionMarket[]>
  /** markets matching the words of q, best match first */
  search(q: string, limit: number): Promise<PredictionMarket[]>
  /** undefined when unknown */
  market(conditionId: string): Promise<PredictionMarket | undefined>
}

/** A bridge quote request with its defaults applied. */
export interface BridgeRequest {
  fromChainId: number
  toChainId: number
  /** an address, or a symbol the source resolves on its chain (LI.FI takes symbols as they are) */
  fromToken: string
  toToken: string
  /** fromToken base units, > 0 */
  amount: bigint
  userAddress: Address
  slippageBps: number
}

export interface BridgeSource {
  readonly name: string
  /** BridgeUnsupported (400) for an unknown chain or token, NoBridgeRoute (422) when no bridge carries it */
  quote(request: BridgeRequest): Promise<BridgeQuote>
  chains(): Promise<BridgeChain[]>
}
