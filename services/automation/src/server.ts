// The automation process: runs the service (src/service.ts) with the kit.
import { runService } from '@ats/service-kit'
import { automationService } from './service.ts'

await runService(automationService)
