// The NATS endpoints of admin: API keys by hash or id, agent payers, the payments of agent jobs and credit snapshots, which the gateway, trading, automation and the agent call.
import type { NatsChannels } from '@ats/contracts'
import { serveEndpoint, type Logger } from '@ats/service-kit'
import type { Service } from 'nats'
import type { AgentPayers } from '../agentPayers/agentPayers.ts'
import type { Credit } from '../credit/credit.ts'
import type { KeyStore } from '../keys/keyStore.ts'
import type { JobPayments } from '../payments/jobPayments.ts'

export function serveAdminEndpoints(
  nats: Service,
  {
    channels,
    log,
    keys,
    agentPayers,
    jobPayments,
    credit,
  }: { channels: NatsChannels; log: Logger; keys: KeyStore; agentPayers: AgentPayers; jobPayments: JobPayments; credit: Credit },
) {
  const { keyVerify, keyPolicy, agentPayer, paymentsOfJobs, creditSnapshot } = channels.admin
  serveEndpoint(nats, keyVerify, log, async ({ hash }) => ({ key: await keys.findActiveByHash(hash) }))
  serveEndpoint(nats, keyPolicy, log, async ({ keyId }) => ({ key: await keys.findActiveById(keyId) }))
  serveEndpoint(nats, agentPayer, log, async ({ address }) => ({ payer: await agentPayers.get(address) }))
  serveEndpoint(nats, paymentsOfJobs, log, async ({ jobIds }) => ({ payments: await jobPayments.ofJobs(jobIds) }))
  serveEndpoint(nats, creditSnapshot, log, ({ wallet }) => credit.snapshot(wallet))
}
