/**
 * Least privilege between services (docs/security.md): each component's own NATS
 * user (permissions generated from packages/contracts) and Postgres role (its own schema only).
 *
 *  - fleetAccess(): this run's passwords, the roles made in Postgres, and each member's
 *    NATS_URL and DATABASE_URL carrying its credentials; used by `pnpm start`, the tests and
 *    the rehearsal (scripts/rehearse.ts), which put `natsAuthorization` in their nats-server
 *    configuration.
 *  - startNatsServer() (natsServer.ts): one nats-server with JetStream and that authorization on a free
 *    loopback port (`pnpm start` when NATS_URL is unset).
 *  - `pnpm access:config` (scripts/access.ts): writes the files compose and the dev overlay use.
 */
import { randomBytes } from 'node:crypto'
import { defaultNamespace } from '@ats/contracts'
import { fleetComponents, natsAuthorization, natsUserOf, type FleetComponent } from '@ats/contracts/permissions'
import { fleetMembers, type FleetMember } from './index.ts'
import { databaseRoleOf, databaseRolesScript, ensureRoles, roleUrl, type DatabaseRole } from './roles.ts'

export { startNatsServer, type NatsServer } from './natsServer.ts'

/** Each member with a database: its role (prefix_component) and the schema it declares. */
function databaseRolesOf(members: FleetMember[], prefix = 'ats'): Array<DatabaseRole & { component: string }> {
  return members
    .filter((m) => m.definition.database)
    .map((m) => ({ component: m.name, role: databaseRoleOf(m.name, prefix), schema: m.definition.database!.schema as string }))
}

const password = () => randomBytes(24).toString('base64url')

/** NATS URL(s) with a user and password in each server (the kit takes them out, nats.ts). */
function natsUrlWith(natsUrl: string, user: string, pass: string): string {
  return natsUrl
    .split(',')
    .map((s) => roleUrl(s.trim().includes('://') ? s.trim() : `nats://${s.trim()}`, user, pass).replace(/\/$/, ''))
    .join(',')
}

const isComponent = (name: string): name is FleetComponent => (fleetComponents as readonly string[]).includes(name)

export interface FleetAccessOptions {
  members: FleetMember[]
  namespace?: string
  /** a connection that may create roles (a superuser); unset: no roles, members keep DATABASE_URL as it is */
  databaseUrl?: string
  /** role names are <prefix>_<component>; fleets sharing a Postgres server need one each, and their own database */
  rolePrefix?: string
}

export interface FleetAccess {
  /**
   * the `authorization` block for nats-server, with this run's passwords in it (a file holding
   * it is a secret: startNatsServer writes it 0600 in a directory of its own). Not references
   * to environment variables: nats-server parses a variable's value as configuration, and a
   * random password is not always a valid token there.
   */
  natsAuthorization: string
  /** a member's NATS_URL (its user, on the given servers) and DATABASE_URL (its role, when roles were made) */
  envOf(member: string, natsUrl: string): { NATS_URL: string; DATABASE_URL?: string }
  roles: Array<DatabaseRole & { component: string }>
}

/** This run's credentials: NATS passwords made up, and each role created (or updated) with a new password. */
export async function fleetAccess({
  members,
  namespace = defaultNamespace,
  databaseUrl,
  rolePrefix = 'ats',
}: FleetAccessOptions): Promise<FleetAccess> {
  const nats = Object.fromEntries(fleetComponents.map((c) => [c, password()])) as Record<FleetComponent, string>
  const roles = databaseUrl ? databaseRolesOf(members, rolePrefix).map((r) => ({ ...r, password: password() })) : []
  if (databaseUrl && roles.length > 0) await ensureRoles(databaseUrl, roles)
  return {
    natsAuthorization: natsAuthorization({ namespace, passwords: nats }),
    roles: roles.map(({ password: _, ...r }) => r),
    envOf(member, natsUrl) {
      if (!isComponent(member)) throw new Error(`${member} is not a fleet component (contracts: fleetComponents)`)
      const role = roles.find((r) => r.component === member)
      return {
        NATS_URL: natsUrlWith(natsUrl, natsUserOf(member), nats[member]),
        ...(role && databaseUrl ? { DATABASE_URL: roleUrl(databaseUrl, role.role, role.password) } : {}),
      }
    },
  }
}

/** where `pnpm access:config` writes: compose mounts them, the dev overlay's generators read them */
export const accessFiles = {
  nats: 'k8s/overlays/dev/access/nats-authorization.conf',
  postgres: 'k8s/overlays/dev/access/postgres-roles.sql',
}

/** The two files as `pnpm access:config` writes them (deploy-check compares, for the default namespace). */
export async function accessConfig(namespace = defaultNamespace): Promise<{ nats: string; postgres: string }> {
  const members = await fleetMembers()
  return {
    nats: natsAuthorization({ namespace }),
    postgres: databaseRolesScript(databaseRolesOf(members).map(({ role, schema }) => ({ role, schema }))),
  }
}
