// Least privilege in Postgres: one login role per component, owning its own schema
// and granted nothing on the others'. Made idempotently from a superuser (or CREATEROLE)
// connection by `pnpm start`, the tests and the rehearsal (ensureRoles), and by compose and
// the dev overlay with psql (databaseRolesScript, the same statements).
import pg from 'pg'
import { StartupError, safeUrl } from '@ats/service-kit'
import { quoteIdent } from '@ats/service-kit/migrator'

export interface DatabaseRole {
  /** the login role, e.g. ats_trading */
  role: string
  /** the schema it owns, e.g. trading */
  schema: string
}

/** `ats_market_data`: a component's role name (prefix: a fleet's, so that fleets sharing a server keep apart) */
export const databaseRoleOf = (component: string, prefix = 'ats') => `${prefix}_${component.replace(/-/g, '_')}`

/** `ATS_DB_PASSWORD_MARKET_DATA`: where compose and k8s give psql a role's password */
export const databasePasswordVariable = (role: DatabaseRole) => `ATS_DB_PASSWORD_${role.schema.toUpperCase()}`

const literal = (value: string) => `'${value.replace(/'/g, "''")}'`

/**
 * The statements for one role, the password given as SQL (a literal, or a psql variable).
 * The role owns its schema and whatever an earlier run (as a superuser) made in it, so that
 * its migrations can alter them; PUBLIC loses its default rights on the schema.
 */
export function roleStatements({ role, schema }: DatabaseRole, passwordSql: string): string[] {
  const r = quoteIdent(role)
  const s = quoteIdent(schema)
  return [
    `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ${literal(role)}) THEN CREATE ROLE ${r}; END IF; END $$`,
    `ALTER ROLE ${r} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD ${passwordSql}`,
    `CREATE SCHEMA IF NOT EXISTS ${s} AUTHORIZATION ${r}`,
    `ALTER SCHEMA ${s} OWNER TO ${r}`,
    `REVOKE ALL ON SCHEMA ${s} FROM PUBLIC`,
    // tables first: their indexes and owned sequences follow them; then what is left
    `DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ${literal(schema)} AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> ${literal(role)}::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, ${literal(schema)}, o.relname, ${literal(role)});
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ${literal(schema)} AND c.relkind = 'S' AND c.relowner <> ${literal(role)}::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', ${literal(schema)}, o.relname, ${literal(role)});
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = ${literal(schema)} AND t.typtype IN ('e', 'd') AND t.typowner <> ${literal(role)}::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', ${literal(schema)}, o.typname, ${literal(role)});
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = ${literal(schema)} AND p.proowner <> ${literal(role)}::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, ${literal(role)});
  END LOOP;
END $$`,
  ]
}

/** a psql script making every role, each password read from its environment variable (databasePasswordVariable) */
export function databaseRolesScript(roles: DatabaseRole[]): string {
  const lines = [
    '-- Generated from the fleet (packages/fleet/src/roles.ts): do not edit. Run with psql as a superuser;',
    '-- each role password comes from its environment variable. Safe to run again (docs/security.md).',
    '\\set ON_ERROR_STOP on',
    // from PostgreSQL 15 PUBLIC has no CREATE on the public schema; older servers get the same here
    'REVOKE CREATE ON SCHEMA public FROM PUBLIC;',
  ]
  for (const role of roles) {
    const variable = `${role.role}_password`
    lines.push('', `-- ${role.role} owns the schema ${role.schema}`, `\\getenv ${variable} ${databasePasswordVariable(role)}`)
    lines.push(...roleStatements(role, `:'${variable}'`).map((s) => `${s};`))
  }
  return `${lines.join('\n')}\n`
}

/** The DATABASE_URL a role connects with: the given server and database, its own user and password (a NATS URL's too, access.ts). */
export function roleUrl(databaseUrl: string, role: string, password: string): string {
  const url = new URL(databaseUrl)
  url.username = encodeURIComponent(role)
  url.password = encodeURIComponent(password)
  return url.toString()
}

/**
 * Creates (or brings up to date) each role with its password, owning its schema, through a
 * connection that may create roles. Under an advisory lock: two starts at once do not race.
 */
export async function ensureRoles(adminUrl: string, roles: Array<DatabaseRole & { password: string }>): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl })
  try {
    await client.connect()
  } catch (error) {
    throw new StartupError(`PostgreSQL is not reachable at ${safeUrl(adminUrl)} (${(error as Error).message})`)
  }
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', ['ats-roles'])
    await client.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC')
    for (const role of roles) {
      for (const statement of roleStatements(role, client.escapeLiteral(role.password))) await client.query(statement)
    }
  } catch (error) {
    throw new StartupError(
      `cannot create the database roles as ${new URL(adminUrl).username || 'this user'} (${(error as Error).message}): it needs CREATEROLE and to own the schemas, or be a superuser`,
    )
  } finally {
    await client.end().catch(() => {})
  }
}
