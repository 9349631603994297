// What an owner does with their automations, over HTTP and NATS alike: who owns a request, and
// creating (its wallet and config checked; a stop order against the price now, a TWAP's slice
// against the pools), pausing or resuming, and deleting an automation.
import { checkRecipient } from '@ats/chain'
import { findToken, type AutomationStatus, type CreateAutomationRequest, type NatsChannels, type TradingTokens } from '@ats/contracts'
import { BadRequest, callEndpoint, Forbidden, NotFound, ServiceCallError, Unauthorized, Unavailable, type Logger } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import { getAddress, isAddress } from 'viem'
import { withdrawApproval } from '../scheduler/approvals.ts'
import { twapStart, watchStop } from './orders.ts'
import type { PriceOf } from './prices.ts'
import { automationView, type Owner, type Store } from './store.ts'
import { checkConfig, isTrigger, type Config, type StopOrder, type Twap } from './types.ts'

/** The owner of a request: the API key (HTTP through the gateway), or the key or payer of an agent job (NATS). */
export function ownerOf(identity: { ownerId?: string | undefined; keyId?: string | undefined }): Owner {
  if (identity.keyId) return { ownerId: identity.keyId, keyId: identity.keyId }
  if (identity.ownerId && isAddress(identity.ownerId, { strict: false })) return { ownerId: identity.ownerId.toLowerCase() }
  throw new Unauthorized('automations need an API key')
}

export interface AutomationsDeps {
  nc: NatsConnection
  channels: NatsChannels
  store: Store
  log: Logger
  tokens: TradingTokens
  /** AUTOMATION_MIN_INTERVAL_MS */
  minIntervalMs: number
  priceOf: PriceOf
}

const whenFired: Record<string, string> = {
  'stop-loss': 'a stop-loss sells when the price falls to its stopPrice',
  'trailing-stop': 'a trailing stop sells when the price falls its trail below the highest price since creation',
  'take-profit': 'a take-profit sells when the price rises to its takeProfitPrice',
}

export function createAutomations({ nc, channels, store, log, tokens, minIntervalMs, priceOf }: AutomationsDeps) {
  /**
   * The server wallet pays every run and the run sends what it buys to walletAddress: that must be
   * the owner's own wallet (a key's bound wallet, a payer itself) or one an admin allowed it, as
   * admin says (never the caller's word). Trading checks the same before every run's swap.
   */
  const keyOf = async (keyId: string) => (await callEndpoint(nc, channels.admin.keyPolicy, { keyId }, { timeoutMs: 2000 })).key

  async function checkWallet(owner: Owner, walletAddress: string) {
    if (owner.keyId) {
      const key = await keyOf(owner.keyId)
      if (!key) throw new Forbidden(`API key ${owner.keyId} is revoked or unknown`)
      checkRecipient({ owner: `key ${owner.keyId}`, own: key.wallet, allowed: key.policy?.allowedRecipients }, walletAddress)
      return
    }
    if (owner.ownerId === walletAddress.toLowerCase()) return
    const { payer } = await callEndpoint(nc, channels.admin.agentPayer, { address: getAddress(owner.ownerId) }, { timeoutMs: 2000 })
    checkRecipient(
      { owner: `payer ${getAddress(owner.ownerId)}`, own: owner.ownerId, allowed: payer?.policy.allowedRecipients },
      walletAddress,
    )
  }

  /** An automation on a wallet's own tokens (under its grant) belongs to that wallet: a key bound to it, or the payer itself. */
  async function checkOwnWallet(owner: Owner, walletAddress: string) {
    const own = owner.keyId ? (await keyOf(owner.keyId))?.wallet : owner.ownerId
    if (!own || own.toLowerCase() !== walletAddress.toLowerCase()) {
      throw new Forbidden(
        `an automation with source "wallet" spends ${getAddress(walletAddress)}'s own tokens: only a key bound to that wallet, or the wallet itself, creates one`,
      )
    }
  }

  const tokenList = () =>
    tokens.list().catch((error: Error) => {
      throw new Unavailable(`the token list is not available from trading (${error.message})`)
    })

  /**
   * A new order's starting state: a stop order's levels against the price now (one that would fire
   * at once is refused, saying why); a TWAP's first slice quoted (one the pools give nothing for is refused).
   */
  async function startState(type: string, config: Config): Promise<object | undefined> {
    if (isTrigger(type)) {
      const seen = await priceOf(config.tokenIn)
      if ('none' in seen) throw new Unavailable(`the order cannot be checked against the price now: ${seen.none}; try again`)
      const { state, fired } = watchStop(type, config as StopOrder, null, seen)
      if (fired) {
        const level =
          fired.kind === 'take-profit' ? 'config.takeProfitPrice' : fired.kind === 'stop-loss' ? 'config.stopPrice' : 'config.trail'
        throw new BadRequest(
          `${level} ${fired.threshold} is ${fired.kind === 'take-profit' ? 'at or below' : 'at or above'} ${seen.asset}'s price now (${seen.price} USD): it would sell at once; ${whenFired[fired.kind]}`,
        )
      }
      if (state.stopPrice !== undefined && state.stopPrice <= 0) {
        throw new BadRequest(
          `config.trailAmount ${(config as StopOrder).trailAmount} is not below ${seen.asset}'s price now (${seen.price} USD)`,
        )
      }
      return state
    }
    if (type !== 'twap') return undefined
    const order = config as Twap
    const slice = (BigInt(order.amount) / BigInt(order.slices)).toString()
    const quoted = await callEndpoint(
      nc,
      channels.trading.quote,
      { tokenIn: order.tokenIn, tokenOut: order.tokenOut, amountIn: slice },
      { timeoutMs: 5_000 },
    ).catch((error: Error) => {
      if (error instanceof ServiceCallError && error.statusCode < 500) {
        throw new BadRequest(`config: a slice of ${slice} ${order.tokenIn} base units cannot be swapped: ${error.message}`)
      }
      throw new Unavailable(`a slice could not be quoted (${error.message}); try again`)
    })
    if (BigInt(quoted.amountOut) === 0n) {
      throw new BadRequest(
        `config: a slice of ${slice} ${order.tokenIn} base units buys no ${order.tokenOut} in the pools: fewer slices or a larger amount`,
      )
    }
    return twapStart(order, Date.now())
  }

  async function create(owner: Owner, body: CreateAutomationRequest) {
    const source = body.source ?? 'server'
    if (source === 'wallet') await checkOwnWallet(owner, body.walletAddress)
    else await checkWallet(owner, body.walletAddress)
    const list = await tokenList()
    const checked = checkConfig(body.type, body.config, {
      tokenOf: (ref) => findToken(list, ref),
      knownSymbols: list.map((t) => t.symbol),
      minIntervalMs,
      now: Date.now(),
    })
    const state = await startState(body.type, checked)
    const row = await store.create(owner, {
      walletAddress: getAddress(body.walletAddress),
      source,
      type: body.type,
      name: body.name,
      config: checked,
      state,
    })
    log.info({ automationId: row.id, type: row.type, owner: owner.keyId ?? 'payer' }, 'automation created')
    return { automation: automationView(row) }
  }

  async function setStatus(owner: Owner, id: string, status: AutomationStatus) {
    const row = await store.setStatus(owner, id, status)
    if (!row) throw new NotFound(`automation ${id}`)
    log.info({ automationId: id, status }, 'automation status set')
    return { automation: automationView(row) }
  }

  async function remove(owner: Owner, id: string) {
    const row = await store.get(owner, id)
    if (!row) throw new NotFound(`automation ${id}`)
    // a run waiting for approval: nobody may approve its swap once the automation is gone
    for (const approvalId of await store.waitingApprovals(row.id)) {
      await withdrawApproval({ nc, channels }, row, approvalId, 'automation deleted', 5_000).catch((error: Error) => {
        throw new Unavailable(
          `automation ${row.id} has a run waiting for approval ${approvalId}, which trading could not withdraw (${error.message}); try again`,
        )
      })
    }
    if (!(await store.remove(owner, id))) throw new NotFound(`automation ${id}`)
    log.info({ automationId: id }, 'automation deleted')
    return { ok: true as const }
  }

  return { create, setStatus, remove }
}

export type Automations = ReturnType<typeof createAutomations>
