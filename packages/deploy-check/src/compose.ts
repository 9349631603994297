/** docker-compose.yml: `docker-compose config -q` with .env.example, and the fleet's rules for it. */
import { execFile } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { parse } from 'yaml'
import { checkComposeAccess } from './access.ts'
import type { Component } from './components.ts'
import { contentKey } from './contentKey.ts'
import { arr, isObj, type Obj } from './objects.ts'

/** contents whose `docker-compose config -q` passed (only successes: a failure is re-run, so its message names its copy) */
const composePassed = new Set<string>()

/** `dockerCompose: false` leaves out `docker-compose config -q` (~1 s of CPU): only the fleet's rules are checked. */
export async function checkCompose(
  root: string,
  components: Component[],
  imageHealth: Map<string, boolean>,
  problems: string[],
  notes: string[],
  dockerCompose = true,
): Promise<void> {
  const file = join(root, 'docker-compose.yml')
  const envFile = join(root, '.env.example')
  if (!existsSync(file)) return void problems.push('docker-compose.yml: file not found')
  if (!existsSync(envFile)) problems.push('.env.example: file not found (compose reads its settings and secrets from .env)')
  if (dockerCompose) await configPasses(root, file, envFile, problems, notes)
  const text = readFileSync(file, 'utf8')
  let compose: Obj
  try {
    compose = parse(text, { merge: true }) as Obj
  } catch (error) {
    return void problems.push(`docker-compose.yml: ${(error as Error).message}`)
  }
  const services: Obj = isObj(compose?.services) ? compose.services : {}
  const fleet = components.filter((c) => c.name !== 'devnet').map((c) => ({ name: c.name, database: 'DATABASE_URL' in c.settings }))
  checkComposeAccess(services, fleet, problems)
  const example = existsSync(envFile) ? readFileSync(envFile, 'utf8') : ''
  for (const m of text.matchAll(/\$\{([A-Z0-9_]+):\?/g)) {
    if (!new RegExp(`^${m[1]}=`, 'm').test(example)) problems.push(`docker-compose.yml: requires ${m[1]}, which .env.example does not set`)
  }
  for (const c of components) {
    const s = services[c.name]
    if (!isObj(s)) {
      problems.push(`docker-compose.yml: no service "${c.name}"`)
      continue
    }
    // the root Dockerfile (compose's default when build names none), the deployable's target
    const build = isObj(s.build) ? s.build : undefined
    if (build?.context !== '.' || (build.dockerfile ?? 'Dockerfile') !== 'Dockerfile' || build.target !== c.name) {
      problems.push(
        `docker-compose.yml: service "${c.name}" must build target ${c.name} of the root Dockerfile (build: { context: ., target: ${c.name} }; found ${build ? JSON.stringify(build) : 'no build'})`,
      )
    }
  }
  for (const [name, s] of Object.entries(services)) {
    if (!isObj(s)) continue
    const fromImage = isObj(s.build) && imageHealth.get(s.build.target) === true
    if (!isObj(s.healthcheck) && !fromImage)
      problems.push(`docker-compose.yml: service "${name}" has no healthcheck (in compose or its image's Dockerfile target)`)
    if (isObj(s.healthcheck) && s.healthcheck.disable === true)
      problems.push(`docker-compose.yml: service "${name}" disables its healthcheck`)
    const deps = s.depends_on
    if (Array.isArray(deps))
      problems.push(`docker-compose.yml: service "${name}": depends_on must wait for health (condition: service_healthy)`)
    else if (isObj(deps)) {
      for (const [dep, cond] of Object.entries(deps)) {
        if (!isObj(cond) || cond.condition !== 'service_healthy')
          problems.push(`docker-compose.yml: service "${name}" depends on "${dep}" without condition: service_healthy`)
        if (!services[dep]) problems.push(`docker-compose.yml: service "${name}" depends on "${dep}", which is not a service`)
      }
    }
    if (name !== 'gateway' && arr(s.ports).length > 0)
      problems.push(`docker-compose.yml: service "${name}" publishes ports; only the gateway is reachable from outside`)
  }
  const nats = services.nats
  const natsCommand = arr(nats?.command).join(' ')
  const store = /-sd\s+(\S+)/.exec(natsCommand)?.[1]
  if (!/(^|\s)(-js|--jetstream)(\s|$)/.test(natsCommand)) problems.push('docker-compose.yml: nats must run with JetStream (-js)')
  else if (
    !store ||
    !arr(nats.volumes).some((v: unknown) => typeof v === 'string' && v.split(':')[1] === store && !v.startsWith('/') && !v.startsWith('.'))
  ) {
    problems.push("docker-compose.yml: JetStream's store (-sd) must be on a named volume")
  }
}

/** `docker-compose config -q` with .env.example, once per content of the two files */
async function configPasses(root: string, file: string, envFile: string, problems: string[], notes: string[]): Promise<void> {
  try {
    const inputs = contentKey([file, envFile].filter(existsSync))
    if (!composePassed.has(inputs)) {
      await promisify(execFile)('docker-compose', ['--env-file', envFile, '-f', file, 'config', '-q'], { cwd: root })
      composePassed.add(inputs)
    }
    notes.push('docker-compose.yml: docker-compose config -q passes (with .env.example)')
  } catch (error) {
    const e = error as { code?: string; stderr?: string }
    problems.push(
      e.code === 'ENOENT'
        ? 'docker-compose is not installed (apt-get install --no-install-recommends docker-compose): the compose file cannot be checked'
        : `docker-compose.yml: docker-compose config -q: ${String(e.stderr ?? '').trim()}`,
    )
  }
}
