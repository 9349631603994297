import { runService } from '@ats/service-kit'
import { marketDataService } from './service.ts'

await runService(marketDataService)
