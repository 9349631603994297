import { readFile } from 'node:fs/promises'
import { settingsOf } from '@ats/service-kit'
import t from 'tap'
import { adminService } from '@ats/admin/service'
import { agentService } from '@ats/agent/service'
import { automationService } from '@ats/automation/service'
import { gatewayService } from '@ats/gateway/service'
import { marketDataService } from '@ats/market-data/service'
import { tradingService } from '@ats/trading/service'

t.test('the README settings table lists every setting a process reads', async (t) => {
  const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8')
  // a row may name several settings: | `LIFI_URL`, `LIFI_API_KEY` | …
  const documented = new Set([...readme.matchAll(/^\| (`[A-Z0-9_]+`(?:, `[A-Z0-9_]+`)*) \|/gm)].flatMap((m) => m[1]!.match(/[A-Z0-9_]+/g)!))
  const read = [gatewayService, agentService, adminService, tradingService, marketDataService, automationService].flatMap((definition) => Object.keys(settingsOf(definition)))
  for (const name of new Set(read)) t.ok(documented.has(name), `${name} is in the README table`)
})
