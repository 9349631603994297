import { fileURLToPath } from 'node:url'
import type { ServiceDefinition } from '@ats/service-kit'
import { Type } from 'typebox'
import { PrismaClient } from './generated/prisma/client.ts'
import { skillRoutes } from './routes/skills.ts'
import { externalSkillsProblem, isHttpUrl, parseExternalSkills, skillList } from './skills.ts'

const settings = {
  EXTERNAL_SKILLS: Type.Optional(
    Type.Refine(
      Type.String({ description: 'external skills, a JSON array of {"name", "url"} objects' }),
      (raw) => externalSkillsProblem(raw) === undefined,
      (raw) => externalSkillsProblem(raw) ?? 'not valid',
    ),
  ),
  AGENT_PUBLIC_URL: Type.Refine(
    Type.String({ default: '', description: 'base URL of the public API, put before built-in skill paths; unset: relative paths' }),
    (raw) => raw === '' || isHttpUrl(raw),
    () => 'must be an absolute http(s) URL',
  ),
}

export const agentService: ServiceDefinition<typeof settings, PrismaClient> = {
  name: 'agent',
  version: '0.1.0',
  port: 3001,
  settings,
  database: {
    schema: 'agent',
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { config }) {
    const skills = skillList(config.AGENT_PUBLIC_URL, parseExternalSkills(config.EXTERNAL_SKILLS))
    await app.register(skillRoutes, { skills })
  },
}
