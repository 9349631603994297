import { readFile } from 'node:fs/promises'
import { settingsOf } from '@ats/service-kit'
import t from 'tap'
import { adminService } from '@ats/admin/service'
import { agentService } from '@ats/agent/service'
import { gatewayService } from '@ats/gateway/service'

t.test('the README settings table lists every setting a process reads', async (t) => {
  const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8')
  const documented = new Set([...readme.matchAll(/^\| `([A-Z0-9_]+)`/gm)].map((m) => m[1]))
  const read = [gatewayService, agentService, adminService].flatMap((definition) => Object.keys(settingsOf(definition)))
  for (const name of new Set(read)) t.ok(documented.has(name), `${name} is in the README table`)
})
