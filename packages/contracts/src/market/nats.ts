import { Type, type Static } from 'typebox'
import { endpoint } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, StrictObject } from '../common/primitives.ts'
import {
  BridgeChains,
  BridgeQuote,
  BridgeQuoteQuery,
  ConditionParams,
  Nfts,
  OnePrediction,
  PredictionMarkets,
  Prices,
  SearchPredictionsQuery,
  TopPredictionsQuery,
  Trending,
} from './http.ts'

const Empty = StrictObject({})

// Over NATS the defaults of the HTTP query are left to the service: these fields may be absent.
export const NftsRequest = StrictObject({
  address: Address({ description: 'the owner' }),
  includeHidden: Type.Optional(Type.Boolean()),
  pageKey: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
})
export const TopPredictionsRequest = Type.Partial(TopPredictionsQuery)
const { q, limit } = SearchPredictionsQuery.properties
export const SearchPredictionsRequest = Type.Object({ q, limit: Type.Optional(limit) })
const { fromChainId, slippageBps, ...requiredBridgeFields } = BridgeQuoteQuery.properties
export const BridgeQuoteRequest = Type.Object({
  ...requiredBridgeFields,
  fromChainId: Type.Optional(fromChainId),
  slippageBps: Type.Optional(slippageBps),
})
export type BridgeQuoteRequest = Static<typeof BridgeQuoteRequest>

/** market-data's NATS endpoints: the agent's tools read the market without HTTP. */
export function marketChannels(namespace: string) {
  const subject = (name: string) => subjectOf(namespace, 'market', name)
  return {
    prices: endpoint(subject('prices'), Empty, Prices),
    trending: endpoint(subject('trending'), Empty, Trending),
    nfts: endpoint(subject('nfts'), NftsRequest, Nfts),
    topPredictions: endpoint(subject('predictions.top'), TopPredictionsRequest, PredictionMarkets),
    searchPredictions: endpoint(subject('predictions.search'), SearchPredictionsRequest, PredictionMarkets),
    prediction: endpoint(subject('predictions.market'), ConditionParams, OnePrediction),
    bridgeQuote: endpoint(subject('bridge.quote'), BridgeQuoteRequest, BridgeQuote),
    bridgeChains: endpoint(subject('bridge.chains'), Empty, BridgeChains),
  }
}
export type MarketChannels = ReturnType<typeof marketChannels>
