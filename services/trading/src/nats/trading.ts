// The NATS endpoints of trading (quote, execute, approvals, prepare, positions, balances, tokens), which the agent and automation's runs call.
import { erc20Abi } from '@ats/chain'
import type { NatsChannels } from '@ats/contracts'
import { BadRequest, serveEndpoint, type ChainContext, type Logger } from '@ats/service-kit'
import type { Service } from 'nats'
import { getAddress } from 'viem'
import type { Grants } from '../grants/grants.ts'
import type { Decisions } from '../approvals/decisions.ts'
import type { createPositions } from '../positions/positions.ts'
import type { Executor } from '../swaps/executor.ts'
import type { Preparer } from '../swaps/prepare.ts'
import { quoteAnswer, type Quoter } from '../swaps/quotes.ts'

export function serveTradingEndpoints(
  nats: Service,
  {
    channels,
    log,
    chain,
    quoter,
    impactCeilingBps,
    executor,
    decisions,
    prepare,
    positions,
    grants,
  }: {
    channels: NatsChannels
    log: Logger
    chain: Pick<ChainContext, 'chainId' | 'tokens' | 'publicClient'>
    quoter: Quoter
    impactCeilingBps: number
    executor: Executor
    decisions: Decisions
    prepare: Preparer
    positions: ReturnType<typeof createPositions>
    grants: Grants
  },
) {
  serveEndpoint(nats, channels.trading.quote, log, async (request) => quoteAnswer(await quoter.quote(request), impactCeilingBps))
  serveEndpoint(
    nats,
    channels.trading.execute,
    log,
    async ({ idempotencyKey, jobId, automationRunId, decideBy, ...request }, { identity }) => {
      const caller = { keyId: identity.keyId, ownerId: identity.ownerId, jobId, automationRunId, decideBy }
      return (await executor.execute(request, caller, idempotencyKey, { via: 'nats' })).result
    },
  )
  serveEndpoint(nats, channels.trading.approval, log, async ({ id }, { identity }) => ({
    approval: await decisions.forRequester(id, identity),
  }))
  serveEndpoint(nats, channels.trading.approvalWithdraw, log, async ({ id, reason }, { identity }) => ({
    approval: await decisions.withdraw(id, identity, reason),
  }))
  serveEndpoint(nats, channels.trading.prepare, log, async (request) => prepare(request))
  serveEndpoint(nats, channels.trading.grants, log, async ({ wallet }) => grants.list(getAddress(wallet)))
  serveEndpoint(nats, channels.trading.positions, log, async ({ address }) => positions(address))
  serveEndpoint(nats, channels.trading.balance, log, async ({ wallet, token: ref }) => {
    const token = chain.tokens().find(ref)
    if (!token) throw new BadRequest(`token ${ref} is not in the address book`)
    const args = [getAddress(wallet)] as const
    const balance = await chain.publicClient.readContract({ address: token.address, abi: erc20Abi, functionName: 'balanceOf', args })
    return { token: token.address, balance: balance.toString() }
  })
  serveEndpoint(nats, channels.trading.tokens, log, async () => ({
    chainId: chain.chainId,
    tokens: chain.tokens().all.map(({ symbol, address, decimals }) => ({ symbol, address, decimals })),
  }))
}
