// LI.FI's /quote and /chains (https://docs.li.fi/api-reference): a bridge route with the transaction to sign.
import type { BridgeChain, BridgeQuote, BridgeToken } from '@ats/contracts'
import { UpstreamStatusError, type HttpClient } from '@ats/service-kit'
import { getAddress, isAddress } from 'viem'
import { BridgeUnsupported, NoBridgeRoute, UnexpectedAnswer } from '../errors.ts'
import { decimalString } from './decimal.ts'
import type { BridgeSource } from './types.ts'

interface LifiToken {
  address?: unknown
  chainId?: unknown
  symbol?: unknown
  decimals?: unknown
  priceUSD?: unknown
}
interface LifiCost {
  name?: unknown
  type?: unknown
  amountUSD?: unknown
}
interface LifiQuote {
  id?: unknown
  tool?: unknown
  action?: { fromChainId?: unknown; toChainId?: unknown; fromToken?: LifiToken; toToken?: LifiToken; fromAmount?: unknown }
  estimate?: {
    fromAmount?: unknown
    toAmount?: unknown
    toAmountMin?: unknown
    executionDuration?: unknown
    feeCosts?: LifiCost[]
    gasCosts?: LifiCost[]
  }
  transactionRequest?: { to?: unknown; data?: unknown; value?: unknown; gasLimit?: unknown; chainId?: unknown }
}

/** LI.FI sends amounts as decimal strings and transaction values as hex ones ("0x3ab84") */
const integer = (value: unknown): string | undefined => {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return String(value)
  if (typeof value === 'string' && /^(0x[0-9a-fA-F]{1,64}|[0-9]{1,78})$/.test(value)) return BigInt(value).toString()
  return undefined
}
const chainIdOr = (value: unknown, fallback: number) =>
  Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : fallback

function required<T>(value: T | undefined, field: string): T {
  if (value === undefined) throw new UnexpectedAnswer('lifi', `${field} is missing or malformed`)
  return value
}

function tokenOf(token: LifiToken | undefined, chainId: number, field: string): BridgeToken {
  const { address, symbol, decimals } = token ?? {}
  if (typeof address !== 'string' || !isAddress(address) || typeof symbol !== 'string' || !Number.isInteger(decimals)) {
    throw new UnexpectedAnswer('lifi', `${field} is malformed`)
  }
  const price = typeof token?.priceUSD === 'string' || typeof token?.priceUSD === 'number' ? Number(token.priceUSD) : Number.NaN
  return {
    chainId: chainIdOr(token?.chainId, chainId),
    address: getAddress(address),
    symbol,
    decimals: decimals as number,
    ...(Number.isFinite(price) ? { priceUsd: price } : {}),
  }
}

const costs = (list: LifiCost[] | undefined, fallback: string) =>
  (Array.isArray(list) ? list : []).map(({ name, type, amountUSD }: LifiCost = {}) => ({
    name: typeof name === 'string' ? name : typeof type === 'string' ? type : fallback,
    amountUsd: decimalString(amountUSD),
  }))

/** LI.FI's own words from its `{message, code}` error, bounded: it names the chain or token at fault */
const messageOf = (body: unknown) => {
  const message = (body as { message?: unknown } | undefined)?.message
  return typeof message === 'string' && message ? message.slice(0, 300) : 'refused the request'
}

function transactionOf(tx: LifiQuote['transactionRequest'], fromChainId: number): BridgeQuote['transactionRequest'] {
  if (tx === undefined) return undefined
  if (typeof tx.to !== 'string' || !isAddress(tx.to) || typeof tx.data !== 'string' || !/^0x[0-9a-fA-F]*$/.test(tx.data)) {
    throw new UnexpectedAnswer('lifi', 'transactionRequest is malformed')
  }
  const gasLimit = integer(tx.gasLimit)
  return {
    to: getAddress(tx.to),
    data: tx.data,
    value: tx.value === undefined ? '0' : required(integer(tx.value), 'transactionRequest.value'),
    ...(gasLimit ? { gasLimit } : {}),
    chainId: chainIdOr(tx.chainId, fromChainId),
  }
}

export function lifiBridge(http: HttpClient): BridgeSource {
  return {
    name: 'lifi',
    async quote(request) {
      let answer: LifiQuote
      try {
        answer = await http.getJson<LifiQuote>('/quote', {
          query: {
            fromChain: request.fromChainId,
            toChain: request.toChainId,
            fromToken: request.fromToken,
            toToken: request.toToken,
            fromAmount: request.amount.toString(),
            fromAddress: request.userAddress,
            toAddress: request.userAddress,
            slippage: request.slippageBps / 10_000,
          },
        })
      } catch (error) {
        // LI.FI's documented statuses: 404 no route for this transfer (code 1002), 400 a chain, token or amount it refuses (1011)
        if (!(error instanceof UpstreamStatusError)) throw error
        if (error.status === 404) throw new NoBridgeRoute(`no bridge route: LI.FI says "${messageOf(error.body)}"`)
        if (error.status === 400) throw new BridgeUnsupported(`LI.FI cannot quote this: ${messageOf(error.body)}`)
        throw error
      }
      if (typeof answer !== 'object' || answer === null) throw new UnexpectedAnswer('lifi', 'the quote is not an object')
      const { action, estimate } = answer
      const fromChainId = chainIdOr(action?.fromChainId, request.fromChainId)
      const toChainId = chainIdOr(action?.toChainId, request.toChainId)
      const transactionRequest = transactionOf(answer.transactionRequest, fromChainId)
      return {
        id: typeof answer.id === 'string' ? answer.id : '',
        source: 'lifi',
        tool: typeof answer.tool === 'string' ? answer.tool : 'lifi',
        fromChainId,
        toChainId,
        fromToken: tokenOf(action?.fromToken, fromChainId, 'action.fromToken'),
        toToken: tokenOf(action?.toToken, toChainId, 'action.toToken'),
        fromAmount: required(integer(estimate?.fromAmount ?? action?.fromAmount), 'estimate.fromAmount'),
        toAmount: required(integer(estimate?.toAmount), 'estimate.toAmount'),
        toAmountMin: required(integer(estimate?.toAmountMin), 'estimate.toAmountMin'),
        estimatedDurationSeconds: Math.max(0, Math.round(Number(estimate?.executionDuration) || 0)),
        feeCosts: costs(estimate?.feeCosts, 'fee'),
        gasCosts: costs(estimate?.gasCosts, 'gas'),
        ...(transactionRequest ? { transactionRequest } : {}),
      }
    },
    async chains() {
      const answer = await http.getJson<{ chains?: unknown }>('/chains')
      if (!Array.isArray(answer?.chains)) throw new UnexpectedAnswer('lifi', 'no chains array')
      return (answer.chains as Array<{ id?: unknown; key?: unknown; name?: unknown; nativeToken?: LifiToken }>).flatMap(
        (chain): BridgeChain[] => {
          const native = chain.nativeToken
          if (
            !Number.isInteger(chain.id) ||
            typeof chain.name !== 'string' ||
            typeof native?.address !== 'string' ||
            !isAddress(native.address)
          )
            return []
          return [
            {
              id: chain.id as number,
              key: typeof chain.key === 'string' ? chain.key : String(chain.id),
              name: chain.name,
              nativeToken: {
                address: getAddress(native.address),
                symbol: String(native.symbol ?? ''),
                decimals: Number(native.decimals ?? 18),
              },
            },
          ]
        },
      )
    },
  }
}
