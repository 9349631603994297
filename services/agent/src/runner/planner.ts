// The offline planner: without a language model, a table of everyday intents (regular
// expressions over the prompt) that call the tools and write the answer from their outputs.
// Deterministic: the same prompt and thread give the same calls and the same words.
import type { Automation, BridgeQuote, Positions, PredictionMarket, PreparedSwap, Quote, SwapResult, TrendingPool } from '@ats/contracts'
import { formatUnits } from 'viem'
import { formatUsd, typeLabels } from './orders.ts'
import { countRunUsage, RunnerError, type Runner } from './runner.ts'
import type { ToolCallOutcome } from './toolbox.ts'

export type Slots = Record<string, string | number | string[] | boolean | undefined>
export interface ToolCall {
  tool: string
  args: Record<string, unknown>
}
type Call = (tool: string, args: Record<string, unknown>) => Promise<ToolCallOutcome>

interface Intent {
  name: string
  /** the slots when the prompt asks for this, else undefined */
  match(text: string): Slots | undefined
  /** a follow-up ("and BTC?", "on camelot?") applied to this intent's earlier slots */
  follow?(slots: Slots, rest: string): Slots | undefined
  /** the first tool calls, known before any runs */
  calls(slots: Slots): ToolCall[]
  /** the answer from the outcomes of those calls; may call more tools (pause all) */
  answer(slots: Slots, outcomes: ToolCallOutcome[], call: Call): Promise<string> | string
}

const AMOUNT = '(\\d+(?:\\.\\d+)?)'
const SYMBOL = '([a-z][a-z0-9.]{0,11})'
const ADDRESS = /\b0x[0-9a-fA-F]{40}\b/
const DEX = /\bon\s+(uniswap|camelot)\b/i
// filler words, never read as a symbol
const stopWords = new Set(
  'the a an of is now today currently price prices in usd dollars worth and what whats how much me for tell current about to please right it cost costs get show give check are do does i my with on at'.split(
    ' ',
  ),
)
const aliases: Record<string, string> = { WETH: 'ETH', WBTC: 'BTC', ETHER: 'ETH', ETHEREUM: 'ETH', BITCOIN: 'BTC' }

/** Symbols named in free text ("ETH and btc, ARB"): words that are not filler, upper-cased. */
export function symbolsIn(text: string): string[] {
  const words =
    text
      .replace(ADDRESS, ' ')
      .toLowerCase()
      .match(/[a-z][a-z0-9]{1,9}/g) ?? []
  const symbols = words.filter((w) => !stopWords.has(w)).map((w) => aliases[w.toUpperCase()] ?? w.toUpperCase())
  return [...new Set(symbols)]
}

const upper = (value: string | undefined) => value?.toUpperCase()
const dexOf = (text: string) => DEX.exec(text)?.[1]?.toLowerCase()

const formatPercent = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(2)}%`
const usdOf = (base: string, decimals: number) => formatUsd(Number(formatUnits(BigInt(base), decimals)))
const failed = (what: string, outcome: ToolCallOutcome) => (outcome.ok ? '' : `I couldn't ${what}: ${outcome.error}.`)
/** The slots `fields` names, as a tool's arguments: those without a value left out. */
const argsOf = (slots: Slots, fields: string[]) =>
  Object.fromEntries(fields.filter((f) => slots[f] !== undefined).map((f) => [f, slots[f]]))

/** "1 USDC for ARB", "0.5 eth to usdc": amount, tokenIn, tokenOut. */
const pair = new RegExp(`${AMOUNT}\\s*${SYMBOL}\\s+(?:for|to|into|->|in)\\s+${SYMBOL}\\b`, 'i')
const swapArgs = (slots: Slots) => argsOf(slots, ['tokenIn', 'tokenOut', 'amount', 'dex'])
/** A follow-up of a quote or swap: another dex, or another token bought. */
function followPair(slots: Slots, rest: string): Slots | undefined {
  const dex = dexOf(rest) ?? (/^(uniswap|camelot)$/i.test(rest.trim()) ? rest.trim().toLowerCase() : undefined)
  if (dex) return { ...slots, dex }
  const [symbol] = symbolsIn(rest)
  return symbol ? { ...slots, tokenOut: symbol } : undefined
}

const intervals: Record<string, string> = { hour: '1h', hourly: '1h', day: '1d', daily: '1d', week: '1w', weekly: '1w' }
interface AutomationView {
  id: string
  name: string
  status: string
}
/** The automation a set_automation_status call answered (its output), in words. */
const describeSet = (output: unknown) => {
  const { automation: a } = output as { automation: AutomationView }
  return `${a.name} (${a.id}, ${a.status})`
}

// Orders: what is sold ("0.5 WETH", "half my WETH"), for what (USDC unless named), and when.
/** a USD price as people write it: 2500, 2,500, $2,500.50, 2.5k */
const USD = '(\\d{1,3}(?:,\\d{3})+(?:\\.\\d+)?|\\d+(?:\\.\\d+)?)(k\\b)?'
const PRICE = `\\$?\\s*${USD}`
/** the price where `pattern` (ending in PRICE) matches `text` first */
function priceIn(text: string, pattern: string): number | undefined {
  const m = new RegExp(pattern, 'i').exec(text)
  return m ? Number(m[m.length - 2]!.replace(/,/g, '')) * (m[m.length - 1] ? 1000 : 1) : undefined
}
const FALLS = `\\b(?:(?:drops?|falls?|dips?|sinks?)\\s+(?:down\\s+)?(?:below|under|to)|(?:goes|gets|is|trades?)\\s+(?:below|under))\\s+${PRICE}`
const RISES = `\\b(?:(?:rises?|climbs?|jumps?|goes\\s+up|pumps?)\\s+(?:above|over|to)|(?:goes|gets|is|trades?)\\s+(?:above|over))\\s+${PRICE}`
/** "1 hour", "an hour", "30m": its count and unit */
const SPAN = '(an?|\\d+)\\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w)\\b'
const spanOf = (m: RegExpExecArray) => `${/^an?$/i.test(m[1]!) ? 1 : Number(m[1])}${m[2]![0]!.toLowerCase()}`
/** words that manage orders rather than make one */
const managing = /\b(?:pause|resume|unpause|restart|cancel|delete|list)\b/i
const shares: Record<string, number> = { all: 100, half: 50, 'a half': 50, quarter: 25, 'a quarter': 25 }
const assetOf = (symbol: string) => aliases[symbol] ?? symbol

/** What an order sells: an amount after a verb or preposition ("sell 0.5 WETH", "on 1 WETH"), or a share of the balance ("half my WETH", "25% of my ARB"). */
function soldIn(text: string): Slots | undefined {
  const share = new RegExp(
    `\\b(?:(all|half|a half|a quarter|quarter)|(\\d+(?:\\.\\d+)?)\\s*(?:%|percent))\\s+(?:of\\s+)?my\\s+${SYMBOL}\\b`,
    'i',
  ).exec(text)
  if (share) return { tokenIn: upper(share[3]), percentOfBalance: share[1] ? shares[share[1].toLowerCase()] : Number(share[2]) }
  const m = new RegExp(`\\b(?:sell|selling|swap|twap|trail|on|for|of|with|using)\\s+${AMOUNT}\\s*${SYMBOL}\\b`, 'i').exec(text)
  return m ? { tokenIn: upper(m[2]), amount: m[1] } : undefined
}

/** What an order buys: "for ARB", "into USDT", "to USDC"; USDC when none is named. */
function boughtIn(text: string): string {
  for (const m of text.matchAll(new RegExp(`\\b(?:for|into|to)\\s+${SYMBOL}\\b`, 'gi'))) {
    if (!stopWords.has(m[1]!.toLowerCase())) return m[1]!.toUpperCase()
  }
  return 'USDC'
}

const orderFields =
  'type tokenIn tokenOut amount percentOfBalance stopPrice takeProfitPrice trailPercent trailAmount duration slices interval'.split(' ')
/** create_order with the slots given; none when the request cannot be an order (`problem` says why) */
const orderCalls = (slots: Slots): ToolCall[] => (slots.problem ? [] : [{ tool: 'create_order', args: argsOf(slots, orderFields) }])

/** What was created (its type, what it sells, its levels, id and status), or why not. */
function orderAnswer(slots: Slots, [outcome]: ToolCallOutcome[]): string {
  if (slots.problem) return String(slots.problem)
  const label = typeLabels[String(slots.type)]!
  if (!outcome!.ok) return failed(`create the ${label}`, outcome!)
  const { automation: a, summary } = outcome!.output as { automation: Automation; summary: string }
  const payer =
    a.source === 'wallet'
      ? `It pays from your wallet ${a.walletAddress}, under its grant.`
      : `The server wallet pays; what it buys goes to ${a.walletAddress}.`
  return `Created a ${label} (${a.id}): it ${summary}. ${payer} Status: ${a.status}.`
}

/** In the order they are tried: the specific before the general ("buy … every day" before "buy … with"). */
export const intents: readonly Intent[] = [
  {
    name: 'recurring-buy',
    match(text) {
      const every = '(?:every\\s+(hour|day|week)|(hourly|daily|weekly))'
      // a match's groups: from `amount` on the amount, the token spent and the one bought; from `interval` on the interval's two forms
      const slots = (m: RegExpExecArray, amount: number, interval: number) => ({
        amount: m[amount],
        tokenIn: upper(m[amount + 1]),
        tokenOut: upper(m[amount + 2]),
        interval: intervals[(m[interval] ?? m[interval + 1])!.toLowerCase()],
      })
      const forward = new RegExp(`\\bbuy\\s+${AMOUNT}\\s*${SYMBOL}\\s+(?:worth\\s+)?of\\s+${SYMBOL}\\s+${every}`, 'i').exec(text)
      if (forward) return slots(forward, 1, 4)
      const leading = new RegExp(`${every}\\s*,?\\s*buy\\s+${AMOUNT}\\s*${SYMBOL}\\s+(?:worth\\s+)?of\\s+${SYMBOL}`, 'i').exec(text)
      return leading ? slots(leading, 3, 1) : undefined
    },
    calls: (slots) => [{ tool: 'create_automation', args: argsOf(slots, ['tokenIn', 'tokenOut', 'amount', 'interval']) }],
    answer(slots, [outcome]) {
      if (!outcome!.ok) return failed(`set up a recurring buy of ${slots.tokenOut}`, outcome!)
      const { automation } = outcome!.output as { automation: AutomationView }
      return `Created the automation "${automation.name}" (${automation.id}): it buys ${slots.tokenOut} with ${slots.amount} ${slots.tokenIn} every ${slots.interval}. Status: ${automation.status}.`
    },
  },
  {
    // "sell half my WETH if ETH drops below 2,500", "take profit on 1 WETH at 4,000", "trailing stop of 10% on 0.5 WETH"
    name: 'stop-order',
    match(text) {
      if (managing.test(text)) return undefined
      const trailing = /\btrail(?:ing)?\b/i.test(text)
      const stopLoss = /\bstop[- ]?loss\b/i.test(text)
      const takeProfit = /\btake[- ]?profits?\b/i.test(text)
      const falls = priceIn(text, FALLS)
      const rises = priceIn(text, RISES)
      if (!trailing && !stopLoss && !takeProfit && falls === undefined && rises === undefined) return undefined
      const sold = soldIn(text)
      if (!sold) return undefined
      // "stop-loss … at 2500", "take profit … at 4,000": the first "at" after the keyword, before the other one
      const at = (keyword: string, other: string) => priceIn(text, `\\b${keyword}\\b(?:(?!${other}).)*?\\bat\\s+${PRICE}`)
      const takeProfitPrice = rises ?? (takeProfit ? at('take[- ]?profits?', 'stop[- ]?loss') : undefined)
      const order: Slots = { ...sold, tokenOut: boughtIn(text), takeProfitPrice }
      // a stop order watches the price of what it sells: "sell 1 ARB if ETH drops …" cannot be one
      const watched = new RegExp(`\\b(?:if|when|once)\\s+(?:the\\s+price\\s+of\\s+)?${SYMBOL}\\b`, 'i').exec(text)?.[1]?.toUpperCase()
      const sells = assetOf(String(sold.tokenIn))
      if (watched && !stopWords.has(watched.toLowerCase()) && assetOf(watched) !== sells) {
        order.problem = `A stop order watches the price of the token it sells: selling ${sold.tokenIn}, it would watch ${sells}, not ${watched}. Nothing was created.`
      }
      if (trailing) {
        const trailPercent = /(\d+(?:\.\d+)?)\s*(?:%|percent)(?!\s*(?:of\s+)?my\b)/i.exec(text)?.[1]
        const trailAmount = priceIn(text, `\\bby\\s+${PRICE}(?!\\s*(?:%|percent))`) ?? priceIn(text, `\\bof\\s+\\$\\s*${USD}`)
        if (trailPercent === undefined && trailAmount === undefined) return undefined
        return {
          ...order,
          type: 'trailing-stop',
          ...(trailPercent === undefined ? { trailAmount } : { trailPercent: Number(trailPercent) }),
        }
      }
      const stopPrice = falls ?? (stopLoss ? at('stop[- ]?loss', 'take[- ]?profit') : undefined)
      return { ...order, type: stopPrice !== undefined || stopLoss ? 'stop-loss' : 'take-profit', stopPrice }
    },
    calls: orderCalls,
    answer: orderAnswer,
  },
  {
    // "twap 1000 USDC into WETH over 1 hour in 10 slices", "buy WETH with 1000 USDC over 2 hours"
    name: 'twap',
    match(text) {
      if (managing.test(text)) return undefined
      const over = new RegExp(`\\bover\\s+(?:the\\s+next\\s+)?${SPAN}`, 'i').exec(text)
      if (!over && !/\btwap\b/i.test(text)) return undefined
      const sold = soldIn(text)
      if (!sold) return undefined
      const bought = new RegExp(`\\bbuy\\s+${SYMBOL}\\s+(?:with|using)\\b`, 'i').exec(text)?.[1]
      const slices = /\b(\d+)\s+(?:slices|parts|chunks|pieces|tranches|swaps|trades)\b/i.exec(text)?.[1]
      const every = new RegExp(`\\bevery\\s+${SPAN}`, 'i').exec(text)
      // ten slices unless the number of slices or their interval is said
      const pace = slices ? { slices: Number(slices) } : every ? { interval: spanOf(every) } : { slices: 10 }
      return { ...sold, type: 'twap', tokenOut: upper(bought) ?? boughtIn(text), duration: over ? spanOf(over) : undefined, ...pace }
    },
    calls: orderCalls,
    answer: orderAnswer,
  },
  {
    name: 'set-automations',
    match(text) {
      const verb = /\b(pause|stop|resume|unpause|restart)\b/i.exec(text)?.[1]?.toLowerCase()
      if (!verb || !/\bautomations?\b/i.test(text)) return undefined
      const id = /\b(aut[_-][A-Za-z0-9_-]+)\b/.exec(text)?.[1]
      return { status: verb === 'pause' || verb === 'stop' ? 'paused' : 'active', id }
    },
    calls: (slots) => [
      slots.id ? { tool: 'set_automation_status', args: { id: slots.id, status: slots.status } } : { tool: 'list_automations', args: {} },
    ],
    async answer(slots, [outcome], call) {
      const verb = slots.status === 'paused' ? 'pause' : 'resume'
      if (!outcome!.ok) return failed(`${verb} your automations`, outcome!)
      if (slots.id) return `Done: ${describeSet(outcome!.output)}.`
      const from = slots.status === 'paused' ? 'active' : 'paused'
      const targets = (outcome!.output as { automations: AutomationView[] }).automations.filter((a) => a.status === from)
      if (targets.length === 0) return `You have no ${from} automations to ${verb}.`
      const done: string[] = []
      for (const a of targets) {
        const result = await call('set_automation_status', { id: a.id, status: slots.status })
        done.push(result.ok ? describeSet(result.output) : `${a.name} (${a.id}): ${result.error}`)
      }
      return `${verb === 'pause' ? 'Paused' : 'Resumed'}: ${done.join('; ')}.`
    },
  },
  {
    name: 'list-automations',
    match: (text) =>
      /\b(list|show|what are|see)\b.*\b(automations?|orders)\b|\bmy (automations|orders)\b/i.test(text) &&
      !/\b(pause|resume|stop|unpause|restart)\b/i.test(text)
        ? {}
        : undefined,
    calls: () => [{ tool: 'list_automations', args: {} }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('list your automations', outcome!)
      const { automations } = outcome!.output as { automations: Array<Automation & { summary: string }> }
      if (automations.length === 0) return 'You have no automations.'
      // why one no longer runs (completed, failed, paused); an active one's summary says what it waits for
      const lines = automations.map(
        (a) =>
          `- ${a.name} (${typeLabels[a.type] ?? a.type}, ${a.id}, ${a.status}): ${a.summary}${a.status !== 'active' && a.statusReason ? ` (${a.statusReason})` : ''}`,
      )
      return `Your automations:\n${lines.join('\n')}`
    },
  },
  {
    name: 'bridge',
    match(text) {
      const m = new RegExp(
        `\\bbridge\\s+${AMOUNT}\\s*${SYMBOL}\\s+(?:from\\s+[a-z0-9 ]+?\\s+)?to\\s+([a-z][a-z0-9 ]*?)\\s*[?.!]*$`,
        'i',
      ).exec(text)
      return m ? { amount: m[1], token: upper(m[2]), toChain: m[3]!.trim() } : undefined
    },
    follow: (slots, rest) => {
      const chain = /^(?:to\s+)?([a-z][a-z0-9 ]*)$/i.exec(rest.trim())?.[1]
      return chain ? { ...slots, toChain: chain } : undefined
    },
    calls: (slots) => [{ tool: 'bridge_quote', args: argsOf(slots, ['token', 'amount', 'toChain']) }],
    answer(slots, [outcome]) {
      if (!outcome!.ok) return failed(`quote bridging ${slots.amount} ${slots.token} to ${slots.toChain}`, outcome!)
      const q = outcome!.output as BridgeQuote & { toChain: string }
      const amount = (units: string) => formatUnits(BigInt(units), q.toToken.decimals)
      const fees = q.feeCosts.map((c) => `${c.name} $${c.amountUsd}`).join(', ') || 'none'
      const minutes = Math.max(1, Math.round(q.estimatedDurationSeconds / 60))
      return `Bridging ${slots.amount} ${q.fromToken.symbol} to ${q.toChain} via ${q.tool}: about ${amount(q.toAmount)} ${q.toToken.symbol} arrives (at least ${amount(q.toAmountMin)}), in about ${minutes} min; fees: ${fees}. This is a quote: nothing was sent.`
    },
  },
  {
    name: 'quote',
    match(text) {
      const reverse = new RegExp(
        `how much\\s+${SYMBOL}\\s+(?:would|will|do|can|could)\\s+(?:i|we)\\s+get\\s+(?:for|with)\\s+${AMOUNT}\\s*${SYMBOL}`,
        'i',
      ).exec(text)
      if (reverse) return { amount: reverse[2], tokenIn: upper(reverse[3]), tokenOut: upper(reverse[1]), dex: dexOf(text) }
      if (!/\bquote\b/i.test(text)) return undefined
      const m = pair.exec(text)
      return m ? { amount: m[1], tokenIn: upper(m[2]), tokenOut: upper(m[3]), dex: dexOf(text) } : undefined
    },
    follow: followPair,
    calls: (slots) => [{ tool: 'quote_swap', args: swapArgs(slots) }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('quote that', outcome!)
      const q = outcome!.output as Quote & { amountInFormatted: string; amountOutFormatted: string }
      return `${q.amountInFormatted} ${q.tokenIn} → ${q.amountOutFormatted} ${q.tokenOut} on ${q.dex} (route ${q.route.join(' → ')}, price impact ${q.priceImpactBps} bps, block ${q.blockNumber}). Nothing was sent.`
    },
  },
  {
    name: 'swap',
    match(text) {
      const buy = new RegExp(`\\bbuy\\s+${SYMBOL}\\s+(?:with|using|for)\\s+${AMOUNT}\\s*${SYMBOL}`, 'i').exec(text)
      if (buy) return { amount: buy[2], tokenIn: upper(buy[3]), tokenOut: upper(buy[1]), dex: dexOf(text) }
      if (!/\b(swap|sell|trade|exchange|convert)\b/i.test(text)) return undefined
      const m = pair.exec(text)
      return m ? { amount: m[1], tokenIn: upper(m[2]), tokenOut: upper(m[3]), dex: dexOf(text) } : undefined
    },
    follow: followPair,
    calls: (slots) => [{ tool: 'swap', args: swapArgs(slots) }],
    answer(slots, [outcome]) {
      if (!outcome!.ok) return failed(`swap ${slots.amount} ${slots.tokenIn} for ${slots.tokenOut}`, outcome!)
      const out = outcome!.output as
        | (SwapResult & { mode: 'executed'; amountOutFormatted: string })
        | (PreparedSwap & { mode: 'prepared'; expectedAmountOutFormatted: string })
        | { mode: 'not_swapped'; reason: string }
      // a swap that waited for a person's approval and did not get it (rejected, expired, refused)
      if (out.mode === 'not_swapped')
        return `I did not swap ${slots.amount} ${slots.tokenIn} for ${slots.tokenOut}: ${out.reason.replace(/^not swapped: /, '')}.`
      if (out.mode === 'executed')
        return out.success
          ? `Swapped ${slots.amount} ${out.tokenIn} for ${out.amountOutFormatted} ${out.tokenOut} on ${out.dex} from ${out.from ? `your wallet ${out.from}, under its grant` : 'the server wallet'} (transaction ${out.hash}, block ${out.blockNumber}).`
          : `The swap of ${slots.amount} ${out.tokenIn} for ${out.tokenOut} reverted on chain (transaction ${out.hash}): the price moved past your slippage, nothing was received.`
      const kinds = out.transactions.map((t) => t.kind).join(', then ')
      const check = out.simulation.ok ? 'They simulate successfully.' : `The simulation says it would fail: ${out.simulation.error}.`
      return `I prepared ${out.transactions.length} transaction${out.transactions.length === 1 ? '' : 's'} (${kinds}) for your wallet ${out.from} to sign and send in order: ${slots.amount} ${out.tokenIn} for about ${out.expectedAmountOutFormatted} ${out.tokenOut} on ${out.dex}. ${check} They are in the job's result.transactions.`
    },
  },
  {
    name: 'positions',
    match: (text) =>
      /\bpositions?\b|\bhealth factor\b|\baave\b|\bgmx positions?\b/i.test(text) ? { address: ADDRESS.exec(text)?.[0] } : undefined,
    follow: (slots, rest) => (ADDRESS.test(rest) ? { ...slots, address: ADDRESS.exec(rest)![0] } : undefined),
    calls: (slots) => [{ tool: 'get_positions', args: argsOf(slots, ['address']) }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('read the positions', outcome!)
      const p = outcome!.output as Positions
      const maxHealth = 2n ** 256n - 1n
      const health =
        BigInt(p.aave.healthFactor) === maxHealth
          ? 'no debt'
          : `health factor ${Number(formatUnits(BigInt(p.aave.healthFactor), 18)).toFixed(2)}`
      const aave = `Aave: collateral ${usdOf(p.aave.totalCollateralBase, 8)}, debt ${usdOf(p.aave.totalDebtBase, 8)} (${health})`
      const gmx =
        p.gmx.length === 0
          ? 'GMX: no open positions'
          : `GMX: ${p.gmx.map((g) => `${g.side} ${usdOf(g.size, 30)} (PnL ${g.pnl.startsWith('-') ? '-' : ''}${usdOf(g.pnl.replace('-', ''), 30)})`).join('; ')}`
      return `Positions of ${p.address}:\n${aave}\n${gmx}`
    },
  },
  {
    name: 'nfts',
    match: (text) =>
      /\bnfts?\b/i.test(text)
        ? { address: ADDRESS.exec(text)?.[0], includeHidden: /\b(spam|hidden|all of them|including)\b/i.test(text) || undefined }
        : undefined,
    follow: (slots, rest) => (ADDRESS.test(rest) ? { ...slots, address: ADDRESS.exec(rest)![0] } : undefined),
    calls: (slots) => [{ tool: 'list_nfts', args: argsOf(slots, ['address', 'includeHidden']) }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('list the NFTs', outcome!)
      const { address, nfts: owned } = outcome!.output as {
        address: string
        nfts: Array<{ name: string; collection: string; tokenId: string; isSpam: boolean }>
      }
      if (owned.length === 0) return `${address} owns no NFTs (spam hidden).`
      const shown = owned.slice(0, 10).map((n) => `${n.name} (${n.collection} #${n.tokenId}${n.isSpam ? ', spam' : ''})`)
      return `${address} owns ${owned.length} NFT${owned.length === 1 ? '' : 's'}: ${shown.join(', ')}${owned.length > 10 ? ', …' : ''}.`
    },
  },
  {
    name: 'predictions',
    match(text) {
      if (!/\bpredictions?\b|\bpolymarket\b|\bodds\b|\bbetting markets?\b/i.test(text)) return undefined
      const topic = /\b(?:about|on|for|regarding)\s+(?:the\s+)?(.+?)\s*[?.!]*$/i.exec(text)?.[1]
      return { query: topic && !/^(?:polymarket|prediction markets?)$/i.test(topic) ? topic : undefined }
    },
    follow: (slots, rest) => (rest.trim() ? { ...slots, query: rest.trim().replace(/^(?:about|on)\s+/i, '') } : undefined),
    calls: (slots) => [{ tool: 'find_predictions', args: argsOf(slots, ['query']) }],
    answer(slots, [outcome]) {
      if (!outcome!.ok) return failed('find prediction markets', outcome!)
      const { markets } = outcome!.output as { markets: PredictionMarket[] }
      if (markets.length === 0) return `I found no prediction market about ${slots.query}.`
      const lines = markets.map(
        (m) =>
          `- ${m.question}: ${m.outcomes.map((o) => `${o.name} ${(o.price * 100).toFixed(0)}%`).join(', ')} (volume ${formatUsd(m.volume)})`,
      )
      return `${slots.query ? `Prediction markets about ${slots.query}` : 'Top prediction markets'}:\n${lines.join('\n')}`
    },
  },
  {
    name: 'trending',
    match: (text) => (/\btrending\b|\bwhat'?s hot\b|\b(?:top|hot|popular|busiest)\s+pools?\b/i.test(text) ? {} : undefined),
    calls: () => [{ tool: 'get_trending_pools', args: {} }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('get the trending pools', outcome!)
      const { trending: pools } = outcome!.output as { trending: TrendingPool[] }
      if (pools.length === 0) return 'No pool has traded in the last 24 hours.'
      const lines = pools
        .slice(0, 5)
        .map(
          (p, i) =>
            `${i + 1}. ${p.name}: ${formatUsd(Number(p.basePrice))}, 24h volume ${formatUsd(Number(p.volume24h))} (${formatPercent(Number(p.change24h))})`,
        )
      return `Trending pools by 24h volume:\n${lines.join('\n')}`
    },
  },
  {
    name: 'prices',
    match(text) {
      const asked = /\bprices?\b|\bhow much is\b|\bwhat(?:'s| is) .+ (?:worth|trading at)\b|\bworth\b|\bcost\b/i.test(text)
      if (!asked) return undefined
      const symbols = symbolsIn(text)
      return { symbols: symbols.length > 0 ? symbols : undefined }
    },
    follow: (slots, rest) => (symbolsIn(rest).length > 0 ? { ...slots, symbols: symbolsIn(rest) } : undefined),
    calls: (slots) => [{ tool: 'get_prices', args: argsOf(slots, ['symbols']) }],
    answer(_slots, [outcome]) {
      if (!outcome!.ok) return failed('get the prices', outcome!)
      const { prices: found, unknown } = outcome!.output as {
        prices: Record<string, { price: number; change24h: number }>
        unknown: string[]
      }
      const lines = Object.entries(found).map(([symbol, p]) => `${symbol}: ${formatUsd(p.price)} (${formatPercent(p.change24h)} in 24h)`)
      if (unknown.length > 0) lines.push(`I have no price for ${unknown.join(', ')}: I know ETH, BTC, USDC, USDT, ARB, GMX and LINK.`)
      return lines.join('\n')
    },
  },
]

export const capabilities = [
  'the price of a token: "what is the price of ETH?"',
  'trending pools: "show trending pools"',
  'a swap quote: "quote 1 USDC for ARB on camelot"',
  'a swap: "swap 1 USDC for ARB" (prepared for your wallet to sign)',
  'your positions: "show my positions"',
  'the NFTs of an address: "NFTs of 0x…"',
  'prediction markets: "prediction markets about bitcoin"',
  'a bridge quote: "bridge 100 USDC to Base"',
  'a recurring buy: "buy 1 USDC of ARB every day"',
  'a stop-loss or take-profit: "sell half my WETH if ETH drops below 2,500", "take profit on 1 WETH at 4,000", "sell 1 WETH if ETH drops below 2500 or rises above 4000"',
  'a trailing stop: "trailing stop of 10% on 0.5 WETH", "trail 0.5 WETH by $200"',
  'a TWAP: "twap 1000 USDC into WETH over 1 hour in 10 slices", "buy WETH with 1000 USDC over 2 hours"',
  'your automations and orders: "list my automations", "show my orders", "pause my automations"',
]
const canAnswer = `I can answer:\n${capabilities.map((c) => `- ${c}`).join('\n')}`
export const cannotDo = `I can't do that yet. ${canAnswer}`
/** The answer to "what can you do?": the same list as when it cannot. */
export const helpText = `${canAnswer}\nAsk in plain words, like the examples.`
const helpAsked =
  /\b(?:help|what can you do|what do you do|what can i ask|what (?:are|is) your (?:skills?|tools?|capabilities|abilities)|what (?:skills|tools|capabilities) do you have|how do i use you)\b/i

export type Plan = { intent: string; slots: Slots; calls: ToolCall[] } | { intent: null; text: string }

const followUp = /^\s*(?:and|what about|how about|same for|now)\b[\s,]*(.*?)\s*[?.!]*\s*$/i

/** What to do for `prompt`, given the thread so far (oldest first). */
export function planOf(prompt: string, history: ReadonlyArray<{ role: string; content: string }> = []): Plan {
  for (const intent of intents) {
    const slots = intent.match(prompt)
    if (slots) return { intent: intent.name, slots, calls: intent.calls(slots) }
  }
  if (helpAsked.test(prompt)) return { intent: null, text: helpText }
  const rest = followUp.exec(prompt)?.[1]
  if (rest !== undefined) {
    // the latest earlier request of the thread that had an intent, re-planned with what changed
    const earlier = history.filter((m) => m.role === 'user').reverse()
    for (const message of earlier) {
      const before = planOf(message.content, history.slice(0, history.indexOf(message)))
      if (before.intent === null) continue
      const intent = intents.find((i) => i.name === before.intent)!
      const slots = intent.follow?.(before.slots, rest)
      if (slots) return { intent: intent.name, slots, calls: intent.calls(slots) }
      break
    }
  }
  return { intent: null, text: cannotDo }
}

export function createPlanner(): Runner {
  return {
    name: 'offline-planner',
    async run(input, toolbox, signal) {
      const plan = planOf(input.prompt, input.history)
      if (plan.intent === null) return { text: plan.text, modelTurns: 1, usage: await countRunUsage(input, plan.text) }
      const intent = intents.find((i) => i.name === plan.intent)!
      // a tool that fails through a fault of ours (a service failing or down) fails the job: its
      // answer would be an apology, and a failed job's payment is voided, never settled
      const call: Call = async (tool, args) => {
        signal.throwIfAborted()
        const outcome = await toolbox.call(tool, args)
        if (!outcome.ok && outcome.serviceFault) throw new RunnerError(`the ${tool} step failed: ${outcome.error}`)
        return outcome
      }
      const outcomes: ToolCallOutcome[] = []
      for (const c of plan.calls) outcomes.push(await call(c.tool, c.args))
      const text = await intent.answer(plan.slots, outcomes, call)
      return { text, modelTurns: 1, usage: await countRunUsage(input, text) }
    },
  }
}
