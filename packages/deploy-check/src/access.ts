/**
 * Least privilege between services (docs/security.md) in the deployment files:
 *
 *  - the generated files (k8s/overlays/dev/access/) are what `pnpm access:config` writes now
 *    (a contract or a service changed without regenerating them fails);
 *  - compose: each component reaches NATS as its own user and Postgres as its own role, and
 *    nats-server runs with the authorization file;
 *  - k8s: each component's NATS_URL and DATABASE_URL come from Secret keys of its own
 *    (NATS_URL_<COMPONENT>, DATABASE_URL_<COMPONENT>; agent-worker uses the agent's), and a
 *    render that runs NATS runs it with the authorization file.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { databaseRoleOf } from '@ats/fleet/roles'
import { accessConfig, accessFiles } from '@ats/fleet/access'
import { arr, type Obj } from './objects.ts'

/** `MARKET_DATA`: the suffix of a component's Secret keys */
const secretSuffix = (component: string) => component.toUpperCase().replace(/-/g, '_')

/** what `pnpm access:config` writes now: a function of the code, so made once per process */
let generated: ReturnType<typeof accessConfig> | undefined

export async function checkAccessFiles(root: string, problems: string[]): Promise<void> {
  generated ??= accessConfig()
  const expected = await generated
  for (const kind of ['nats', 'postgres'] as const) {
    const file = accessFiles[kind]
    const path = join(root, file)
    if (!existsSync(path)) problems.push(`${file}: missing; run pnpm access:config`)
    else if (readFileSync(path, 'utf8') !== expected[kind])
      problems.push(`${file}: not what the contracts and the fleet generate now; run pnpm access:config`)
  }
}

/** compose: per-component credentials in NATS_URL and DATABASE_URL, nats-server with the authorization */
export function checkComposeAccess(services: Obj, fleet: Array<{ name: string; database: boolean }>, problems: string[]): void {
  for (const { name, database } of fleet) {
    const env: Obj = services[name]?.environment ?? {}
    const nats = String(env.NATS_URL ?? '')
    if (!nats.startsWith(`nats://${name}:`))
      problems.push(`docker-compose.yml: ${name}'s NATS_URL must carry its own user (nats://${name}:<password>@…), found ${nats || 'none'}`)
    if (database) {
      const role = databaseRoleOf(name)
      if (!String(env.DATABASE_URL ?? '').startsWith(`postgresql://${role}:`))
        problems.push(`docker-compose.yml: ${name}'s DATABASE_URL must use its own role ${role}`)
    }
  }
  const nats = services.nats
  const command = arr(nats?.command).join(' ')
  const config = /-c\s+(\S+)/.exec(command)?.[1]
  const mounted = arr(nats?.volumes).some(
    (v: unknown) => typeof v === 'string' && v.startsWith(`./${accessFiles.nats}:`) && v.split(':')[1] === config,
  )
  if (!config || !mounted)
    problems.push(`docker-compose.yml: nats must run with -c <the mounted ${accessFiles.nats}> (one user per component)`)
  const roles = arr(services.postgres?.volumes).some(
    (v: unknown) => typeof v === 'string' && v.startsWith(`./${accessFiles.postgres}:/docker-entrypoint-initdb.d/`),
  )
  if (!roles)
    problems.push(`docker-compose.yml: postgres must mount ${accessFiles.postgres} in /docker-entrypoint-initdb.d (each component's role)`)
}

/** k8s: the Secret key each component's NATS_URL / DATABASE_URL is read from is its own */
export function checkDeploymentAccess(id: string, component: string, container: Obj, problems: string[]): void {
  for (const setting of ['NATS_URL', 'DATABASE_URL']) {
    const e = arr(container.env).find((x: Obj) => x.name === setting)
    const key = e?.valueFrom?.secretKeyRef?.key
    if (e && key !== `${setting}_${secretSuffix(component)}`) {
      problems.push(
        `${id}: ${setting} must come from the Secret key ${setting}_${secretSuffix(component)} (its own credentials), not ${key ?? 'a literal'}`,
      )
    }
  }
}

/** a rendered NATS StatefulSet or Deployment runs with an authorization file (-c) from a volume */
export function checkNatsWorkload(where: string, w: Obj, problems: string[]): void {
  for (const c of arr(w.spec?.template?.spec?.containers).filter((c: Obj) => /(^|\/)nats(:|$)/.test(String(c.image)))) {
    const args = [...arr(c.command), ...arr(c.args)].join(' ')
    const config = /-c\s+(\S+)/.exec(args)?.[1]
    const mounted = config && arr(c.volumeMounts).some((m: Obj) => config.startsWith(`${m.mountPath}/`))
    if (!mounted)
      problems.push(
        `${where}: ${w.kind} ${w.metadata?.name}: nats-server must run with -c <authorization file from a volume> (one user per component, ${accessFiles.nats})`,
      )
  }
}
