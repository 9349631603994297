// The NATS endpoints of market-data (prices, trending pools, NFTs, prediction markets, bridge quotes), which the agent calls.
import type { NatsChannels } from '@ats/contracts'
import { serveEndpoint, type Logger } from '@ats/service-kit'
import type { Service } from 'nats'
import type { Address } from 'viem'
import type { Market } from '../market.ts'

export function serveMarketEndpoints(nats: Service, { channels, log, market }: { channels: NatsChannels; log: Logger; market: Market }) {
  const { prices, trending, nfts, topPredictions, searchPredictions, prediction, bridgeQuote, bridgeChains } = channels.market
  serveEndpoint(nats, prices, log, () => market.prices())
  serveEndpoint(nats, trending, log, () => market.trending())
  serveEndpoint(nats, nfts, log, ({ address, includeHidden, pageKey }) =>
    market.nfts(address as Address, { includeHidden: includeHidden ?? false, pageKey }),
  )
  serveEndpoint(nats, topPredictions, log, ({ limit }) => market.topPredictions(limit))
  serveEndpoint(nats, searchPredictions, log, ({ q, limit }) => market.searchPredictions(q, limit))
  serveEndpoint(nats, prediction, log, ({ conditionId }) => market.prediction(conditionId))
  serveEndpoint(nats, bridgeQuote, log, (request) => market.bridgeQuote(request))
  serveEndpoint(nats, bridgeChains, log, () => market.bridgeChains())
}
