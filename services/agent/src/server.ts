import { runService } from '@ats/service-kit'
import { agentService } from './service.ts'

await runService(agentService)
