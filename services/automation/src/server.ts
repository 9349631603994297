import { runService } from '@ats/service-kit'
import { automationService } from './service.ts'

await runService(automationService)
