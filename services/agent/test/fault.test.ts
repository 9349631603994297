import { fileURLToPath } from 'node:url'
import { startService, startServiceProcess } from '@ats/service-kit/testing'
import t from 'tap'
import { getAddress, type Address } from 'viem'
import { agentService } from '../src/service.ts'
import { eventually, payerCall, payerHeaders, startStack } from './helpers.ts'

const workerEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url))

t.test('kill -9 of the worker mid-swap: the job completes once, with one swap on chain', async (t) => {
  const stack = await startStack(t, { noAgent: true })
  const { devnet, publicClient, serverWallet } = stack
  const rpc = async (method: string, params: unknown[] = []) => {
    const res = await fetch(devnet.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
    return ((await res.json()) as { result: unknown }).result
  }
  const payer = devnet.accounts[1]!.address
  const allow = await stack.adminCall(`/admin/agent-payers/${payer}`, 'PUT', { label: 'fault test', policy: { maxUsdPerSwap: 100 } })
  t.equal(allow.status, 200, JSON.stringify(allow.body))

  const api = await startService(t, agentService, { ...stack.agentEnv, AGENT_ROLE: 'api' })
  const workerEnv = { ...stack.agentEnv, AGENT_ROLE: 'worker', AGENT_ACK_WAIT_MS: '1500', LOG_LEVEL: 'warn' }
  const firstWorker = await startServiceProcess(t, workerEntry, workerEnv)
  const call = payerCall(api.url, payer)

  // blocks are mined only when the test says so: the swap waits in the mempool while the worker dies
  // cacheTime 0: viem otherwise answers a block number up to its polling interval old
  const startBlock = await publicClient.getBlockNumber({ cacheTime: 0 })
  await rpc('evm_setAutomine', [false])
  const { jobId } = await call('/agent/prompt', { prompt: 'swap 1 USDC for ARB' })
  await eventually('the swap to reach the mempool', async () => {
    const status = (await rpc('txpool_status')) as { pending: string }
    return Number(status.pending) > 0 ? true : undefined
  })
  process.kill(firstWorker.pid, 'SIGKILL')
  t.equal((await call(`/agent/job/${jobId}`)).status, 'running')

  await startServiceProcess(t, workerEntry, workerEnv)
  await rpc('evm_setAutomine', [true])
  await rpc('evm_mine')
  const job = await eventually(
    'the job to finish',
    async () => {
      const current = await call(`/agent/job/${jobId}`)
      return ['complete', 'failed', 'cancelled'].includes(current.status) ? current : undefined
    },
    30_000,
  )
  t.equal(job.status, 'complete', job.error)
  t.same(job.result.toolCalls, ['swap'])
  t.equal(job.result.transactions.length, 1)
  const [sent] = job.result.transactions
  t.match(sent, { status: 'sent', kind: 'swap', success: true, tokenIn: 'USDC', tokenOut: 'ARB', amountIn: '1000000', step: 1 })

  // every transaction the server wallet sent since: approvals aside, exactly one swap, the job's
  const latest = await publicClient.getBlockNumber({ cacheTime: 0 })
  const router = getAddress(devnet.book.uniswapV3.swapRouter02 as Address)
  const swaps: string[] = []
  for (let n = startBlock + 1n; n <= latest; n++) {
    const block = await publicClient.getBlock({ blockNumber: n, includeTransactions: true })
    for (const tx of block.transactions) {
      if (getAddress(tx.from) === getAddress(serverWallet) && tx.to && getAddress(tx.to) === router) swaps.push(tx.hash)
    }
  }
  t.same(swaps, [sent.hash], 'one swap on chain')

  const events = await fetch(`${api.url}/agent/job/${jobId}/events`, { headers: payerHeaders(payer) }).then((res) => res.text())
  t.match(events, /"status":"complete"/)
  t.equal(events.match(/"status":"complete"/g)?.length, 1, 'completed once')
})
