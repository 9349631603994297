import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Logger } from '@ats/service-kit'
import t, { type Test } from 'tap'
import { createPaidJobFollower } from '../src/mcp/paid.ts'

/** An agent whose job answers `statuses` in turn (the last one from then on), as its payer reads it. */
async function agentWith(t: Test, statuses: Array<Record<string, unknown>>) {
  let reads = 0
  const server = createServer((_request, response) => {
    const job = statuses[Math.min(reads++, statuses.length - 1)]
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'job_1', createdAt: 1, ...job }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const log = { warn: () => {} } as unknown as Logger

t.test('a paid prompt answers a job that waits for approval at once, with the approval and its notice', async (t) => {
  const approval = { id: 'apr_1', status: 'pending' }
  const agentUrl = await agentWith(t, [{ status: 'running' }, { status: 'awaiting_approval', approval, notice: 'Approval needed: swap 50 USDC for WETH' }])
  const follow = createPaidJobFollower({ agentUrl, internalToken: 'token-0123456789abcdef', waitMs: 60_000, log })
  const started = Date.now()
  const job = await follow('job_1', '0xabc', 'req_1')
  t.match(job, { status: 'awaiting_approval', approval, notice: /^Approval needed/ })
  t.ok(Date.now() - started < 5_000, 'not after the wait limit')
})

t.test('a running job is still followed until it ends', async (t) => {
  const agentUrl = await agentWith(t, [{ status: 'running' }, { status: 'running' }, { status: 'complete', result: { text: 'done' } }])
  const follow = createPaidJobFollower({ agentUrl, internalToken: 'token-0123456789abcdef', waitMs: 60_000, log })
  t.match(await follow('job_1', '0xabc', 'req_1'), { status: 'complete' })
})
