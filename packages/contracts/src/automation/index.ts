import { serviceContract } from '../common/service.ts'
import { automationChannels } from './nats.ts'

export * from './nats.ts'

/** The automation service (issue 13): its NATS endpoints are declared so the agent's tools can call them; its routes come with it. */
export const automationContract = serviceContract({ name: 'automation', routes: {}, channels: automationChannels })
