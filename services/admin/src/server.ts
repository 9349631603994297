import { runService } from '@ats/service-kit'
import { adminService } from './service.ts'

await runService(adminService)
