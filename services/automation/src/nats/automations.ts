// The NATS endpoints of automations (create, list, set status), which the agent's jobs call with the identity of their key or payer.
import type { NatsChannels } from '@ats/contracts'
import { serveEndpoint, type Logger } from '@ats/service-kit'
import type { Service } from 'nats'
import { ownerOf, type Automations } from '../automations/automations.ts'
import { automationView, type Store } from '../automations/store.ts'

export function serveAutomationEndpoints(
  nats: Service,
  { channels, log, store, automations }: { channels: NatsChannels; log: Logger; store: Store; automations: Automations },
) {
  const { create, list, setStatus } = channels.automation
  serveEndpoint(nats, create, log, async (request, { identity }) => automations.create(ownerOf(identity), request))
  serveEndpoint(nats, list, log, async ({ wallet }, { identity }) => ({
    automations: (await store.list(ownerOf(identity), wallet)).map(automationView),
  }))
  serveEndpoint(nats, setStatus, log, async ({ id, status }, { identity }) => automations.setStatus(ownerOf(identity), id, status))
}
