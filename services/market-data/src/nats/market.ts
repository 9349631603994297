// The NATS endpoints of market-data (prices, trending pools, NFTs, prediction markets, bridge quotes), which the agent calls.
import type { NatsChannels } from '@ats/contracts'
import { serveEndpoint, type Logger } from '@ats/service-kit'
import type { Service } from 'nats'
import type { Address } from 'viem'
import type { Market } from '../market.ts'

export function serveMarketEndpoints(nats: Service, { channels, log, market }: { channels: NatsChannels; log: Logger; market: Market }) {
  const { prices, trending, nfts, topPredictions, searchPredictions, prediction, bridgeQuote, bridgeChains } = channels.market
  serveEndpoint(nats, 'prices', prices, log, () => market.prices())
  serveEndpoint(nats, 'trending', trending, log, () => market.trending())
  serveEndpoint(nats, 'nfts', nfts, log, ({ address, includeHidden, pageKey }) =>
    market.nfts(address as Address, { includeHidden: includeHidden ?? false, pageKey }),
  )
  serveEndpoint(nats, 'predictions-top', topPredictions, log, ({ limit }) => market.topPredictions(limit))
  serveEndpoint(nats, 'predictions-search', searchPredictions, log, ({ q, limit }) => market.searchPredictions(q, limit))
  serveEndpoint(nats, 'prediction', prediction, log, ({ conditionId }) => market.prediction(conditionId))
  serveEndpoint(nats, 'bridge-quote', bridgeQuote, log, (request) => market.bridgeQuote(request))
  serveEndpoint(nats, 'bridge-chains', bridgeChains, log, () => market.bridgeChains())
}
