import { Type, type Static } from 'typebox'
import { endpoint } from '../common/messages.ts'
import { subjectOf } from '../common/namespace.ts'
import { Address, EpochMs } from '../common/primitives.ts'

export const automationStatuses = ['active', 'paused', 'completed', 'failed'] as const
export const AutomationStatusSchema = Type.Unsafe<(typeof automationStatuses)[number]>({ type: 'string', enum: [...automationStatuses] })

/** Spec section 2, Automation. */
export const Automation = Type.Object({
  id: Type.String(),
  name: Type.String(),
  type: Type.String({ description: 'automation kind, e.g. recurring-buy' }),
  status: AutomationStatusSchema,
  walletAddress: Address(),
  config: Type.Record(Type.String(), Type.Unknown(), { description: 'type-specific; recurring-buy: {tokenIn, tokenOut, amount, interval}' }),
  createdAt: EpochMs(),
})
export type Automation = Static<typeof Automation>

export const CreateAutomationRequest = Type.Object({
  walletAddress: Address(),
  type: Type.String({ minLength: 1, maxLength: 64 }),
  name: Type.String({ minLength: 1, maxLength: 128 }),
  config: Type.Record(Type.String(), Type.Unknown()),
})
export type CreateAutomationRequest = Static<typeof CreateAutomationRequest>

/**
 * The automation service's NATS endpoints, for the agent's tools. The owner travels in the
 * identity headers (the API key, or the payer of an agent job).
 */
export function automationChannels(namespace: string) {
  const subject = (name: string) => subjectOf(namespace, 'automation', name)
  return {
    create: endpoint(subject('create'), CreateAutomationRequest, Type.Object({ automation: Automation })),
    list: endpoint(subject('list'), Type.Object({ wallet: Type.Optional(Address()) }), Type.Object({ automations: Type.Array(Automation) })),
    setStatus: endpoint(
      subject('status.set'),
      Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), status: AutomationStatusSchema }),
      Type.Object({ automation: Automation }),
    ),
  }
}
export type AutomationChannels = ReturnType<typeof automationChannels>
