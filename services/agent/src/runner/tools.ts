// The agent's tools: each declared once (name, description, JSON Schema of its arguments) and
// run over NATS against the service that owns the data. The LLM runner offers them as
// function tools; the offline planner calls them by name.
import {
  Address,
  isAwaitingApproval,
  type Approval,
  type Endpoint,
  type JobTransaction,
  type ListedToken,
  type NatsChannels,
  type PreparedSwap,
  type SwapResult,
  tradingTokens,
} from '@ats/contracts'
import { ServiceCallError, cachedLoader, callEndpoint, type CallContext } from '@ats/service-kit'
import type { NatsConnection } from 'nats'
import { setTimeout as sleep } from 'node:timers/promises'
import { Type, type Static, type TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import { formatUnits, getAddress, parseUnits } from 'viem'
import { approvalNotice, notSwappedReason, undecided, type ApprovalWaits } from './approvals.ts'
import { orderTypes, pricedAs, shareOf, summaryOf, typeLabels } from './orders.ts'

/** Whose job it is: a payer (x402) or an API key (/v1), with the wallet "my" means. */
export type JobOwner = { kind: 'payer'; address: string } | { kind: 'key'; keyId: string; wallet?: string | undefined }

/** The wallet "my NFTs", "my positions" and automations refer to, when there is one. */
export const ownerWallet = (owner: JobOwner) => (owner.kind === 'payer' ? owner.address : owner.wallet)

export interface ToolRun {
  jobId: string
  /** the step number of this call, from 1 */
  step: number
  /** the idempotency key of anything this step sends (`stepKey` in toolbox.ts) */
  key: string
  owner: JobOwner
  signal: AbortSignal
  /** the job's side of a swap that waits for a person's decision */
  approvals: ApprovalWaits
}

export interface ToolOutput {
  output: unknown
  transactions?: JobTransaction[]
}

export interface Tool<S extends TSchema = TSchema> {
  name: string
  description: string
  parameters: S
  run(args: Static<S>, run: ToolRun): Promise<ToolOutput>
}

/** A tool's failure that its caller should read (a bad argument, a refusal, a service down). */
export class ToolError extends Error {
  override name = 'ToolError'
  constructor(
    message: string,
    /** the failure is ours, not the asker's: a service of the fleet failed, timed out or is down */
    readonly serviceFault = false,
  ) {
    super(message)
  }
}

export interface ToolDeps {
  nc: NatsConnection
  channels: NatsChannels
  /** how long a tool waits for a service (a swap waits for its receipt: swapTimeoutMs) */
  timeoutMs: number
  swapTimeoutMs: number
  /** how often a swap waiting for approval asks trading whether it was decided (APPROVAL_POLL_MS) */
  approvalPollMs?: number
}

const tool = <S extends TSchema>(definition: Tool<S>): Tool<S> => definition

/**
 * `work`, or a rejection when the job is aborted first: the wait is abandoned (the NATS call itself
 * is not). Its abort listener goes with it, so a job that waits long does not gather listeners.
 */
export async function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  let fail!: () => void
  const stopped = new Promise<never>((_, reject) => {
    fail = () => reject(signal.reason ?? new Error('aborted'))
  })
  if (signal.aborted) fail()
  else signal.addEventListener('abort', fail, { once: true })
  try {
    return await Promise.race([work, stopped])
  } finally {
    signal.removeEventListener('abort', fail)
  }
}

const serviceNames: Record<string, string> = { market: 'market-data', trading: 'trading', automation: 'automation', admin: 'admin' }

export function createTools({ nc, channels, timeoutMs, swapTimeoutMs, approvalPollMs = 1_000 }: ToolDeps) {
  /**
   * One NATS call, given up on when the job is aborted; a service's error becomes a ToolError.
   * `whenDown`: what to answer instead when the failure is the fleet's (a service failing or down).
   */
  async function call<Req, Rep, Down = never>(
    endpoint: Endpoint<Req, Rep>,
    request: Req,
    run: ToolRun,
    options: { timeoutMs?: number; whenDown?: Down } = {},
  ): Promise<Rep | Down> {
    const identity: CallContext['identity'] =
      run.owner.kind === 'payer' ? { ownerId: run.owner.address } : { ownerId: run.owner.keyId, keyId: run.owner.keyId }
    try {
      return await unlessAborted(
        callEndpoint(nc, endpoint, request, { identity, requestId: `${run.jobId}:${run.step}`, timeoutMs: options.timeoutMs ?? timeoutMs }),
        run.signal,
      )
    } catch (error) {
      if (run.signal.aborted || !(error instanceof ServiceCallError)) throw error
      const serviceFault = error.statusCode >= 500
      if (serviceFault && options.whenDown !== undefined) return options.whenDown
      const service = serviceNames[endpoint.subject.split('.')[1] ?? ''] ?? 'a service'
      const down = error.statusCode === 503 && /no responders|unavailable/i.test(error.message)
      throw new ToolError(down ? `the ${service} service is not available right now` : error.message, serviceFault)
    }
  }

  // the list, kept 10 minutes (one call to trading, shared by concurrent lookups)
  const tokenList = cachedLoader({ max: 1, ttlMs: 600_000, load: () => callEndpoint(nc, channels.trading.tokens, {}, { timeoutMs }) })
  const tokens = tradingTokens(() => tokenList.get('all'))
  async function tokenOf(symbolOrAddress: string) {
    const found = await tokens.find(symbolOrAddress).catch((error: Error) => {
      throw new ToolError(`the token list is not available (${error.message})`, true)
    })
    if (!found) throw new ToolError(`unknown token ${symbolOrAddress}; known: ${(await tokens.list()).map((t) => t.symbol).join(', ')}`)
    return found
  }
  /** "1.5" of a token in its base units. */
  async function baseUnits(symbol: string, amount: string) {
    const token = await tokenOf(symbol)
    if (!/^\d+(\.\d+)?$/.test(amount)) throw new ToolError(`amount ${JSON.stringify(amount)} is not a positive decimal number`)
    const [, fraction = ''] = amount.split('.')
    if (fraction.length > token.decimals) throw new ToolError(`${token.symbol} has ${token.decimals} decimals; ${amount} has more`)
    const units = parseUnits(amount, token.decimals)
    if (units === 0n) throw new ToolError('the amount must be greater than 0')
    return { token, units }
  }
  const human = async (symbol: string, units: string) => formatUnits(BigInt(units), (await tokenOf(symbol)).decimals)
  /** "1.5 WETH"; base units when the token is no longer listed */
  const amountText = (symbol: string, units: string) =>
    human(symbol, units).then(
      (amount) => `${amount} ${symbol}`,
      () => `${units} base units of ${symbol}`,
    )

  function walletOf(run: ToolRun, given: string | undefined, what: string) {
    const wallet = given ?? ownerWallet(run.owner)
    if (!wallet) throw new ToolError(`${what} needs a wallet address: name one, or bind a wallet to this API key`)
    return getAddress(wallet)
  }

  const TokenArg = (description: string) => Type.String({ minLength: 1, maxLength: 64, description })
  const Amount = Type.String({ pattern: '^[0-9]+(\\.[0-9]+)?$', description: 'in whole tokens, e.g. "1.5" (not base units)' })
  const Dex = Type.Optional(Type.Union([Type.Literal('uniswap'), Type.Literal('camelot')], { description: 'uniswap (default) or camelot' }))
  const AddressArg = (description: string) => Type.Optional(Address({ description }))
  const Usd = (description: string) => Type.Optional(Type.Number({ exclusiveMinimum: 0, description }))
  const Span = (description: string) => Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,5}[smhdw]$', description }))

  const SwapArgs = Type.Object({
    tokenIn: TokenArg('the token sold: a symbol or address'),
    tokenOut: TokenArg('the token bought'),
    amount: Amount,
    dex: Dex,
  })

  /** What trading's quote, prepare and execute take of a swap: the token sold by its address, the amount in its base units. */
  async function swapOf({ tokenIn, tokenOut, amount, dex }: Static<typeof SwapArgs>) {
    const { token, units } = await baseUnits(tokenIn, amount)
    return { token, body: { tokenIn: token.address, tokenOut, amountIn: units.toString(), ...(dex ? { dex } : {}) } }
  }

  /** What a swap sent, as a job transaction. */
  const sent = (run: ToolRun, r: SwapResult): JobTransaction => ({
    step: run.step,
    tool: 'swap',
    status: 'sent',
    kind: 'swap',
    hash: r.hash,
    success: r.success,
    tokenIn: r.tokenIn,
    tokenOut: r.tokenOut,
    amountIn: r.amountIn,
    amountOut: r.amountOut,
    amountOutMinimum: r.amountOutMinimum,
  })
  const prepared = (run: ToolRun, p: PreparedSwap): JobTransaction[] =>
    p.transactions.map((transaction) => ({
      step: run.step,
      tool: 'swap',
      status: 'prepared',
      kind: transaction.kind,
      transaction,
      tokenIn: p.tokenIn,
      tokenOut: p.tokenOut,
      amountIn: p.amountIn,
      amountOut: p.expectedAmountOut,
      amountOutMinimum: p.amountOutMinimum,
    }))

  /**
   * A swap that waits for a person: the job waits (awaiting_approval) and asks trading every
   * `approvalPollMs` until the approval is decided; then the job runs on with the swap made, or
   * with why it was not (rejected, expired, refused when approved).
   */
  async function decisionOn(
    approval: Approval,
    notice: string,
    run: ToolRun,
  ): Promise<SwapResult | { notSwapped: string; approval: Approval }> {
    await run.approvals.begin(approval, notice)
    let now = approval
    while (undecided(now)) {
      // an aborted job rejects with the signal's reason, as `unlessAborted` does
      await sleep(approvalPollMs, undefined, { signal: run.signal }).catch(() => run.signal.throwIfAborted())
      // trading out of reach for a moment: ask again at the next poll
      const { approval: current } = await call(channels.trading.approval, { id: approval.id }, run, { whenDown: { approval: now } })
      if (!current) throw new ToolError(`approval ${approval.id} is no longer known to the trading service: not swapped`)
      now = current
    }
    await run.approvals.end()
    const reason = notSwappedReason(now)
    return reason === null ? now.result! : { notSwapped: `not swapped: ${reason}`, approval: now }
  }

  /** whether `wallet` has an active grant that lets the service swap `tokenIn` from it */
  async function grantSpends(wallet: string, tokenIn: string, run: ToolRun): Promise<boolean> {
    // grants not enabled here (503): the payer's swap is prepared, as without one
    const { grants } = await call(channels.trading.grants, { wallet }, run, { whenDown: { grants: [] } })
    const symbol = (await tokenOf(tokenIn)).symbol
    return grants.some((grant) => grant.status === 'active' && (grant.tokenIn === symbol || grant.tokenIn === tokenIn))
  }

  /** `percent` of what `wallet` holds of `token` now, in base units (trading reads it on chain) */
  async function shareOfBalance(wallet: string, token: ListedToken, percent: number, run: ToolRun) {
    const balance = BigInt((await call(channels.trading.balance, { wallet: getAddress(wallet), token: token.address }, run)).balance)
    const units = shareOf(balance, percent)
    if (units === 0n) {
      throw new ToolError(
        `${percent}% of the ${formatUnits(balance, token.decimals)} ${token.symbol} that ${wallet} holds is nothing to sell`,
      )
    }
    return units
  }

  const all = [
    tool({
      name: 'get_prices',
      description: 'USD price and 24h change of ETH, BTC, USDC, USDT, ARB, GMX and LINK',
      parameters: Type.Object({
        symbols: Type.Optional(Type.Array(TokenArg('a symbol'), { maxItems: 7, description: 'which ones; all when absent' })),
      }),
      async run({ symbols }, run) {
        const { prices, updatedAt } = await call(channels.market.prices, {}, run)
        const wanted = (symbols ?? Object.keys(prices)).map((s) => pricedAs(s.toUpperCase()))
        const found = Object.fromEntries(wanted.filter((s) => prices[s]).map((s) => [s, prices[s]!]))
        return { output: { prices: found, unknown: wanted.filter((s) => !prices[s]), updatedAt } }
      },
    }),
    tool({
      name: 'get_trending_pools',
      description: 'Up to 10 trending pools on the chain, by 24h volume',
      parameters: Type.Object({}),
      async run(_args, run) {
        const { trending } = await call(channels.market.trending, {}, run)
        return { output: { trending } }
      },
    }),
    tool({
      name: 'quote_swap',
      description: 'Quote selling an amount of one token for another on Uniswap or Camelot (nothing is sent)',
      parameters: SwapArgs,
      async run(args, run) {
        const quote = await call(channels.trading.quote, (await swapOf(args)).body, run)
        return { output: { ...quote, amountInFormatted: args.amount, amountOutFormatted: await human(quote.tokenOut, quote.amountOut) } }
      },
    }),
    tool({
      name: 'swap',
      description:
        "Swap an amount of one token for another. When the caller's own wallet (its key's bound wallet, or the payer) granted the service swaps of this token on chain, it executes from that wallet under the grant and the output goes there; otherwise, for a key or a payer an admin has allowlisted, it executes from the server wallet within the spend policy; for everyone else it prepares the transactions (approval, swap) for the payer's own wallet to sign. A swap over the policy's approval threshold waits for a person other than the requester to approve or reject it (the agent cannot), then answers the swap or why it was not made",
      parameters: Type.Object({
        ...SwapArgs.properties,
        slippageBps: Type.Optional(Type.Integer({ minimum: 0, maximum: 5000, description: 'default 50 (0.5%)' })),
      }),
      async run(args, run) {
        const { token, body: swap } = await swapOf(args)
        const body = { ...swap, slippageBps: args.slippageBps ?? 50 }
        let execute = run.owner.kind === 'key'
        if (run.owner.kind === 'payer') {
          const address = getAddress(run.owner.address)
          const { payer } = await call(channels.admin.agentPayer, { address }, run)
          execute = payer !== null || (await grantSpends(address, token.address, run))
        }
        if (execute) {
          const { decideBy } = run.approvals
          const answer = await call(
            channels.trading.execute,
            // the caller's own wallet pays when it granted the service swaps of tokenIn on chain
            { ...body, fromGrant: true, idempotencyKey: run.key, jobId: run.jobId, ...(decideBy === undefined ? {} : { decideBy }) },
            run,
            { timeoutMs: swapTimeoutMs },
          )
          const asked = { amount: args.amount, tokenIn: token.symbol, tokenOut: (await tokenOf(args.tokenOut)).symbol }
          const result = isAwaitingApproval(answer)
            ? await decisionOn(answer.approval, approvalNotice(answer.approval, asked), run)
            : answer
          if ('notSwapped' in result) return { output: { mode: 'not_swapped', reason: result.notSwapped, approval: result.approval } }
          return {
            output: { mode: 'executed', ...result, amountOutFormatted: await human(result.tokenOut, result.amountOut) },
            transactions: [sent(run, result)],
          }
        }
        const from = walletOf(run, undefined, 'preparing a swap')
        const p = await call(channels.trading.prepare, { ...body, from }, run)
        return {
          output: { mode: 'prepared', ...p, expectedAmountOutFormatted: await human(p.tokenOut, p.expectedAmountOut) },
          transactions: prepared(run, p),
        }
      },
    }),
    tool({
      name: 'get_positions',
      description: "Lending (Aave) and perpetual (GMX) positions of a wallet: the caller's own by default",
      parameters: Type.Object({ address: AddressArg('whose; the caller by default') }),
      async run({ address }, run) {
        const wallet = address ?? ownerWallet(run.owner)
        return { output: await call(channels.trading.positions, wallet ? { address: getAddress(wallet) } : {}, run) }
      },
    }),
    tool({
      name: 'list_nfts',
      description: 'The NFTs a wallet owns (spam hidden unless asked): the caller by default',
      parameters: Type.Object({ address: AddressArg('the owner; the caller by default'), includeHidden: Type.Optional(Type.Boolean()) }),
      async run({ address, includeHidden }, run) {
        const owner = walletOf(run, address, 'listing NFTs')
        const { nfts } = await call(
          channels.market.nfts,
          { address: owner, ...(includeHidden === undefined ? {} : { includeHidden }) },
          run,
        )
        return { output: { address: owner, nfts } }
      },
    }),
    tool({
      name: 'find_predictions',
      description: 'Prediction markets: those matching a topic, or the top ones by volume when no topic is given',
      parameters: Type.Object({
        query: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'the topic, e.g. "bitcoin"' })),
        limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 20 })),
      }),
      async run({ query, limit = 5 }, run) {
        const { markets } = query
          ? await call(channels.market.searchPredictions, { q: query, limit }, run)
          : await call(channels.market.topPredictions, { limit }, run)
        return { output: { query: query ?? null, markets } }
      },
    }),
    tool({
      name: 'bridge_quote',
      description: 'Quote bridging an amount of a token from this chain to another chain (nothing is sent)',
      parameters: Type.Object({
        token: TokenArg('the token to bridge, e.g. USDC'),
        amount: Amount,
        toChain: Type.String({
          minLength: 1,
          maxLength: 40,
          description: 'the destination chain: a name (Base, Ethereum, Optimism …) or a chain id',
        }),
        toToken: Type.Optional(TokenArg('the token received; the same symbol by default')),
        userAddress: AddressArg('who sends and receives; the caller by default'),
      }),
      async run({ token, amount, toChain, toToken, userAddress }, run) {
        const { chains } = await call(channels.market.bridgeChains, {}, run)
        const wanted = toChain.trim().toLowerCase()
        const chain = chains.find(
          (c) => String(c.id) === wanted || c.name.toLowerCase() === wanted || c.key === wanted || c.name.toLowerCase().startsWith(wanted),
        )
        if (!chain) throw new ToolError(`unknown chain ${toChain}; bridges reach ${chains.map((c) => c.name).join(', ')}`)
        const { token: from, units } = await baseUnits(token, amount)
        const user = walletOf(run, userAddress, 'a bridge quote')
        const quote = await call(
          channels.market.bridgeQuote,
          { toChainId: chain.id, fromToken: from.address, toToken: toToken ?? token, amount: units.toString(), userAddress: user },
          run,
        )
        return { output: { toChain: chain.name, amountFormatted: amount, ...quote } }
      },
    }),
    tool({
      name: 'create_automation',
      description: 'Create a recurring buy: spend an amount of one token on another at every interval',
      parameters: Type.Object({
        tokenIn: TokenArg('the token spent, e.g. USDC'),
        tokenOut: TokenArg('the token bought'),
        amount: Amount,
        interval: Type.String({ minLength: 1, maxLength: 64, description: 'e.g. 1h, 1d, 1w, or a cron expression' }),
        name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
      }),
      async run({ tokenIn, tokenOut, amount, interval, name }, run) {
        const { token, units } = await baseUnits(tokenIn, amount)
        const out = await tokenOf(tokenOut)
        const walletAddress = walletOf(run, undefined, 'an automation')
        const config = { tokenIn: token.symbol, tokenOut: out.symbol, amount: units.toString(), interval }
        const automation = {
          walletAddress,
          type: 'recurring-buy' as const,
          name: name ?? `Buy ${out.symbol} with ${amount} ${token.symbol} every ${interval}`,
          config,
        }
        return { output: await call(channels.automation.create, automation, run) }
      },
    }),
    tool({
      name: 'create_order',
      description:
        "Create an order that trades later on its own, for the caller's wallet. twap: swap a total amount in slices over a duration (a slice whose price impact is over maxImpactBps is skipped). stop-loss: sell when tokenIn's USD price falls to stopPrice (with takeProfitPrice too, whichever comes first; the other is cancelled). take-profit: sell when it rises to takeProfitPrice (stopPrice optional). trailing-stop: sell when it falls trailPercent % or trailAmount USD below its highest price since creation. Prices are market-data's, so a stop order sells WETH, WBTC, USDT, ARB, GMX or LINK. It pays from the caller's own wallet when that wallet granted the service swaps of tokenIn, else from the server wallet, what it buys going to the caller's wallet",
      parameters: Type.Object({
        type: Type.Union(
          orderTypes.map((type) => Type.Literal(type)),
          { description: 'twap, stop-loss, take-profit or trailing-stop' },
        ),
        tokenIn: TokenArg('the token sold, e.g. WETH'),
        tokenOut: TokenArg('the token bought, e.g. USDC'),
        amount: Type.Optional({ ...Amount, description: 'in whole tokens, e.g. "0.5" (not base units); or percentOfBalance' }),
        percentOfBalance: Type.Optional(
          Type.Number({
            minimum: 0.01,
            maximum: 100,
            description: "instead of amount: this share of what the caller's wallet holds of tokenIn now (50 = half)",
          }),
        ),
        stopPrice: Usd('stop-loss (take-profit: optional): sell at or below this USD price of one whole tokenIn'),
        takeProfitPrice: Usd('take-profit (stop-loss, trailing-stop: optional): sell at or above this USD price of one whole tokenIn'),
        trailPercent: Type.Optional(
          Type.Number({
            exclusiveMinimum: 0,
            exclusiveMaximum: 100,
            description: 'trailing-stop: the stop this % under the highest price (or trailAmount)',
          }),
        ),
        trailAmount: Usd('trailing-stop: the stop this many USD under the highest price (or trailPercent)'),
        duration: Span('twap: how long it runs, e.g. "30m", "1h", "1d"'),
        slices: Type.Optional(Type.Integer({ minimum: 2, maximum: 1000, description: 'twap: in how many parts (or interval)' })),
        interval: Span('twap: one part every, e.g. "5m" (or slices)'),
        maxImpactBps: Type.Optional(
          Type.Integer({ minimum: 1, maximum: 5000, description: 'twap: a slice over this price impact is skipped (default 100 = 1%)' }),
        ),
        remainder: Type.Optional(
          Type.Union([Type.Literal('carry'), Type.Literal('drop')], {
            description: "twap: a skipped slice's amount goes into the next one (carry, the default) or is dropped",
          }),
        ),
        endAt: Type.Optional(Type.Integer({ minimum: 0, description: 'stop orders: it expires then, ms since the Unix epoch' })),
        slippageBps: Type.Optional(Type.Integer({ minimum: 0, maximum: 5000, description: 'default 50 (0.5%)' })),
        name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
      }),
      async run({ type, tokenIn, tokenOut, amount, percentOfBalance, name, ...terms }, run) {
        if ((amount === undefined) === (percentOfBalance === undefined)) {
          throw new ToolError(
            'an order takes its amount in whole tokens (amount) or as a share of your balance (percentOfBalance): one of the two',
          )
        }
        const walletAddress = walletOf(run, undefined, 'an order')
        const [token, out] = [await tokenOf(tokenIn), await tokenOf(tokenOut)]
        const units =
          percentOfBalance === undefined
            ? (await baseUnits(tokenIn, amount!)).units
            : await shareOfBalance(walletAddress, token, percentOfBalance, run)
        const amountFormatted = formatUnits(units, token.decimals)
        // the caller's own wallet pays when it granted the service swaps of tokenIn, as a swap does
        const source = (await grantSpends(walletAddress, token.address, run)) ? 'wallet' : 'server'
        const label = typeLabels[type]!
        const { automation } = await call(
          channels.automation.create,
          {
            walletAddress,
            type,
            source,
            name: name ?? `${label[0]!.toUpperCase()}${label.slice(1)} ${amountFormatted} ${token.symbol} for ${out.symbol}`,
            config: { tokenIn: token.symbol, tokenOut: out.symbol, amount: units.toString(), ...terms },
          },
          run,
        )
        return { output: { automation, amountFormatted, summary: await summaryOf(automation, amountText) } }
      },
    }),
    tool({
      name: 'list_automations',
      description:
        "The caller's automations and orders: each with its type, config, what it has seen (state: a stop order's last price and levels, a TWAP's slices done), status and statusReason, and a summary in words",
      parameters: Type.Object({}),
      async run(_args, run) {
        const wallet = ownerWallet(run.owner)
        const { automations } = await call(channels.automation.list, wallet ? { wallet: getAddress(wallet) } : {}, run)
        return {
          output: { automations: await Promise.all(automations.map(async (a) => ({ ...a, summary: await summaryOf(a, amountText) }))) },
        }
      },
    }),
    tool({
      name: 'set_automation_status',
      description: 'Pause (paused) or resume (active) an automation of the caller',
      parameters: Type.Object({
        id: Type.String({ minLength: 1, maxLength: 64 }),
        status: Type.Union([Type.Literal('active'), Type.Literal('paused')]),
      }),
      async run({ id, status }, run) {
        return { output: await call(channels.automation.setStatus, { id, status }, run) }
      },
    }),
  ] as Tool[]
  return { all, byName: new Map(all.map((t) => [t.name, t])) }
}
export type Tools = ReturnType<typeof createTools>

const checkers = new WeakMap<TSchema, ReturnType<typeof Compile>>()
/** Checks a tool's arguments (an LLM's are not to be trusted); the first problem is named. */
export function checkArguments(t: Tool, args: unknown): void {
  const checker = checkers.get(t.parameters) ?? Compile(t.parameters)
  checkers.set(t.parameters, checker)
  if (checker.Check(args)) return
  const [first] = checker.Errors(args)
  throw new ToolError(
    `invalid arguments for ${t.name}: ${first ? `${first.instancePath || 'the arguments'} ${first.message}` : 'not valid'}`,
  )
}
