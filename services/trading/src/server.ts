import { runService } from '@ats/service-kit'
import { tradingService } from './service.ts'

await runService(tradingService)
