import { readFile } from 'node:fs/promises'
import { baseSettings, databaseSettings } from '@ats/service-kit'
import t from 'tap'
import { adminService } from '../../services/admin/src/service.ts'
import { agentService } from '../../services/agent/src/service.ts'
import { gatewayService } from '../src/service.ts'

t.test('the README settings table lists every setting a process reads', async (t) => {
  const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8')
  const documented = new Set([...readme.matchAll(/^\| `([A-Z0-9_]+)`/gm)].map((m) => m[1]))
  const read = ['PORT', ...Object.keys(baseSettings), ...Object.keys(databaseSettings)]
  for (const definition of [gatewayService, agentService, adminService]) read.push(...Object.keys(definition.settings ?? {}))
  for (const name of new Set(read)) t.ok(documented.has(name), `${name} is in the README table`)
})
