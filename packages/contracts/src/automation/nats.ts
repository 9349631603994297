import { Type } from 'typebox'
import { endpoint } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address } from '../common/primitives.ts'
import { Automation, AutomationStatusSchema, CreateAutomationRequest } from './http.ts'

/**
 * The automation service's NATS endpoints, for the agent's tools. The owner travels in the
 * identity headers (the API key, or the payer of an agent job).
 */
export function automationChannels(namespace: string) {
  const subject = (name: string) => subjectOf(namespace, 'automation', name)
  return {
    create: endpoint(subject('create'), CreateAutomationRequest, Type.Object({ automation: Automation })),
    list: endpoint(
      subject('list'),
      Type.Object({ wallet: Type.Optional(Address()) }),
      Type.Object({ automations: Type.Array(Automation) }),
    ),
    setStatus: endpoint(
      subject('status.set'),
      Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), status: AutomationStatusSchema }),
      Type.Object({ automation: Automation }),
    ),
  }
}
export type AutomationChannels = ReturnType<typeof automationChannels>
