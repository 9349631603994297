import { runService } from '@ats/service-kit'
import { gatewayService } from './service.ts'

await runService(gatewayService)
