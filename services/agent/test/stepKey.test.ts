// A job taken over after its worker died runs its steps again through the toolbox. A step is
// matched by content (tool + arguments): the same step replays the earlier run's swap, a
// different step n (a re-run that planned differently) is a new swap with its own key.
import { natsChannels } from '@ats/contracts'
import type { Logger } from '@ats/service-kit'
import { createDatabase } from '@ats/service-kit/testing'
import { connect } from 'nats'
import t from 'tap'
import { createJobStore } from '../src/jobs/store.ts'
import { createToolbox } from '../src/runner/toolbox.ts'
import { createTools } from '../src/runner/tools.ts'
import { agentService } from '../src/service.ts'
import { payerHeaders, startStack } from './helpers.ts'

t.test('a re-run whose step n differs swaps anew; the same step replayed swaps once', async (t) => {
  // API only: the job stays pending, and the test plays its workers' runs through the toolbox
  const stack = await startStack(t, { agentEnv: { AGENT_ROLE: 'api' } })
  const { env, publicClient, serverWallet } = stack
  const payer = stack.devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'step key test', policy: { maxUsdPerSwap: 100 } })
  t.equal(allow.status, 200, JSON.stringify(allow.body))
  const accepted = await stack.call('/agent/prompt', { body: { prompt: 'swap 1 USDC for ARB' }, headers: payerHeaders(payer) })
  t.equal(accepted.status, 202, JSON.stringify(accepted.body))
  const jobId = accepted.body.jobId as string

  const db = createDatabase(env.DATABASE_URL!, agentService.database!)
  t.teardown(() => db.$disconnect())
  const nc = await connect({ servers: env.NATS_URL! })
  t.teardown(() => nc.drain())
  const store = createJobStore(db)
  const tools = createTools({ nc, channels: natsChannels(env.NATS_NAMESPACE!), timeoutMs: 10_000, swapTimeoutMs: 60_000 })
  const quiet = () => {}
  const log: Logger = { level: 'silent', fatal: quiet, error: quiet, warn: quiet, info: quiet, debug: quiet, trace: quiet, child: () => log }
  /** one worker's run of the job: its step 1 is this swap */
  const run = async (args: Record<string, string>) => {
    const toolbox = await createToolbox({ tools, store, emit: () => {}, log, jobId, owner: { kind: 'payer', address: payer }, signal: new AbortController().signal })
    const outcome = await toolbox.call('swap', args)
    if (!outcome.ok) throw new Error(`the swap step failed: ${outcome.error}`)
    return outcome.output as { mode: string; hash: string; amountIn: string }
  }
  /** the worker died after its swap, before it recorded step 1 as finished */
  const diedBeforeFinishing = () => db.jobStep.updateMany({ where: { jobId, step: 1 }, data: { finishedAt: null } })
  const sentByWallet = () => publicClient.getTransactionCount({ address: serverWallet, blockTag: 'latest' })

  const first = await run({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '2' })
  t.match(first, { mode: 'executed', amountIn: '2000000' })
  await diedBeforeFinishing()

  // the next run plans differently (a language model need not plan the same twice): step 1 is another swap
  const second = await run({ tokenIn: 'USDC', tokenOut: 'ARB', amount: '1' })
  t.match(second, { mode: 'executed', amountIn: '1000000' }, 'the new swap ran, not the earlier run\'s result')
  t.not(second.hash, first.hash, 'a new transaction')
  await diedBeforeFinishing()

  // the same step again (arguments in another order): trading hands back the swap it made, nothing is sent
  const before = await sentByWallet()
  const third = await run({ amount: '1', tokenOut: 'ARB', tokenIn: 'USDC' })
  t.equal(third.hash, second.hash, 'the same swap replayed')
  t.equal(await sentByWallet(), before, 'no transaction sent')

  // finished this time: a run that takes the job over reuses the step's output without asking trading
  const fourth = await run({ tokenIn: 'USDC', amount: '1', tokenOut: 'ARB' })
  t.equal(fourth.hash, second.hash)
  t.equal(await sentByWallet(), before, 'no transaction sent')
  const steps = await store.stepsOf(jobId)
  t.equal(steps.length, 1)
  t.match(steps[0]!.input, { amount: '1' })
})
