import type { Skill } from '@ats/contracts'
import { isHttpUrl } from '@ats/service-kit'
import { Type, type Static } from 'typebox'
import { Compile } from 'typebox/compile'

/**
 * The capabilities the agent uses, each served by a route of this API. Their
 * urls are paths, prefixed with AGENT_PUBLIC_URL when it is set.
 */
export const builtInSkills: ReadonlyArray<{ name: string; path: string }> = [
  { name: 'swap-quote', path: '/swap/quote' },
  { name: 'swap-execute', path: '/swap/execute' },
  { name: 'portfolio-positions', path: '/portfolio/positions' },
  { name: 'market-prices', path: '/market/prices' },
  { name: 'trending-pools', path: '/market/trending' },
  { name: 'nfts', path: '/nfts/:address' },
  { name: 'predictions', path: '/predictions/top' },
  { name: 'bridge-quote', path: '/bridge/quote' },
  { name: 'automations', path: '/automations' },
]

/** One entry of EXTERNAL_SKILLS. */
const ExternalSkill = Type.Object({ name: Type.String({ minLength: 1 }), url: Type.String({ minLength: 1 }) })
export type ExternalSkill = Static<typeof ExternalSkill>
const externalSkills = Compile(Type.Array(ExternalSkill))

/** What is wrong with an EXTERNAL_SKILLS value, or undefined when it is fine. */
export function externalSkillsProblem(raw: string): string | undefined {
  const expected = 'must be a JSON array of {"name", "url"} objects'
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    return `${expected}: not JSON`
  }
  if (!externalSkills.Check(value)) {
    const [first] = externalSkills.Errors(value)
    return `${expected}: ${first ? `${first.instancePath || 'the value'} ${first.message}` : 'not valid'}`
  }
  const seen = new Set(builtInSkills.map((s) => s.name))
  for (const [index, skill] of value.entries()) {
    if (!isHttpUrl(skill.url)) return `${expected}: /${index}/url must be an absolute http(s) URL`
    if (seen.has(skill.name)) return `${expected}: skill name ${JSON.stringify(skill.name)} is used twice`
    seen.add(skill.name)
  }
  return undefined
}

/** The answer of GET /agent/skills: built-in skills first, then those of EXTERNAL_SKILLS (`external`, checked by externalSkillsProblem). */
export function skillList(publicUrl: string, external: string | undefined): Skill[] {
  const base = publicUrl.replace(/\/+$/, '')
  return [
    ...builtInSkills.map(({ name, path }) => ({ name, url: `${base}${path}`, external: false })),
    ...(external ? (JSON.parse(external) as ExternalSkill[]) : []).map(({ name, url }) => ({ name, url, external: true })),
  ]
}
