/**
 * The contract check of a rolling upgrade: the current contracts against the release's
 * (release/contracts.json), one problem for each change a replica of the release, still running
 * beside the new ones, would break on. Subjects, routes and streams are matched across the fleet
 * (a channel moved between services is still there); docs/operations.md "Rolling upgrades and
 * compatibility" gives the rules and why:
 *
 *  - a NATS subject, HTTP route or stream of the release that is gone (renamed = the old one
 *    removed; add the new one beside it), a subject a stream no longer holds, a consumer or
 *    bucket name no longer used;
 *  - a request (NATS request, HTTP params, query, headers, body) narrowed: a field added as or
 *    made required, a type narrowed (a bound tightened, a pattern changed, integer where number
 *    was, enum values removed), a strict object losing a property. Widening a request passes;
 *  - an answer or message (NATS reply, stream or broadcast message, HTTP response by status,
 *    server-sent event) changed either way: widened (a field removed or made optional, an enum
 *    value added, a type widened) old readers refuse or misread it; narrowed, readers of the
 *    new release refuse what replicas of the release still write (and streams still hold).
 *    A property added as optional to an object that is not strict passes.
 */
import type { JsonSchema, RouteContract, ServiceContracts } from './contracts.ts'
import { schemaChanges } from './schemaDiff.ts'

/** `request`: only narrowing breaks; `answer`: narrowing or widening breaks. */
type Side = 'request' | 'answer'

function schemaProblems(where: string, before: JsonSchema | undefined, after: JsonSchema | undefined, side: Side): string[] {
  if (!before && !after) return []
  return schemaChanges(before ?? {}, after ?? {})
    .filter((c) => c.narrows || (side === 'answer' && c.widens))
    .map((c) => {
      const why =
        side === 'request'
          ? 'senders of the release still send what the new schema refuses'
          : c.widens
            ? 'readers of the release refuse or misread what the new release writes'
            : 'readers of the new release refuse what replicas of the release still write'
      return `${where} ${c.path}: ${c.what} (${why})`
    })
}

const routeKey = (r: RouteContract) => `${r.method} ${r.url}`

/** Everything of one kind across the fleet, by its key, with the service that declares it. */
function fleetwide<T>(services: Record<string, ServiceContracts>, pick: (s: ServiceContracts) => T[], key: (item: T) => string) {
  const all = new Map<string, T & { service: string }>()
  for (const [service, contracts] of Object.entries(services)) {
    for (const item of pick(contracts)) if (!all.has(key(item))) all.set(key(item), { ...item, service })
  }
  return all
}

export function compareContracts(released: Record<string, ServiceContracts>, current: Record<string, ServiceContracts>): string[] {
  const problems: string[] = []
  const versioning = 'add the new one beside it and remove the old one a release later'

  const endpointsNow = fleetwide(
    current,
    (s) => s.endpoints,
    (e) => e.subject,
  )
  for (const old of fleetwide(
    released,
    (s) => s.endpoints,
    (e) => e.subject,
  ).values()) {
    const where = `${old.service} NATS endpoint ${old.name} (${old.subject})`
    const now = endpointsNow.get(old.subject)
    if (!now) {
      problems.push(`${where}: subject removed or renamed; replicas of the release still call or serve it (${versioning})`)
      continue
    }
    problems.push(...schemaProblems(`${where} request`, old.request, now.request, 'request'))
    problems.push(...schemaProblems(`${where} reply`, old.response, now.response, 'answer'))
  }

  const messagesNow = fleetwide(
    current,
    (s) => s.messages,
    (m) => m.subject,
  )
  for (const old of fleetwide(
    released,
    (s) => s.messages,
    (m) => m.subject,
  ).values()) {
    const where = `${old.service} NATS message ${old.name} (${old.subject})`
    const now = messagesNow.get(old.subject)
    if (!now) {
      problems.push(`${where}: subject removed or renamed; replicas of the release still publish or consume it (${versioning})`)
      continue
    }
    problems.push(...schemaProblems(`${where} message`, old.message, now.message, 'answer'))
  }

  const streamsNow = fleetwide(
    current,
    (s) => s.streams,
    (s) => s.name,
  )
  for (const old of fleetwide(
    released,
    (s) => s.streams,
    (s) => s.name,
  ).values()) {
    const now = streamsNow.get(old.name)
    if (!now) {
      problems.push(
        `${old.service} stream ${old.name}: removed or renamed; replicas of the release still publish to it and consume from it`,
      )
      continue
    }
    for (const subject of old.subjects.filter((s) => !now.subjects.includes(s))) {
      problems.push(`${old.service} stream ${old.name}: no longer holds subject ${subject}; replicas of the release still publish there`)
    }
  }

  const namesNow = new Set(Object.values(current).flatMap((s) => Object.values(s.names)))
  for (const [service, contracts] of Object.entries(released)) {
    for (const [name, value] of Object.entries(contracts.names)) {
      if (!namesNow.has(value)) problems.push(`${service} channel ${name} (${value}): no longer used; replicas of the release still use it`)
    }
  }

  const routesNow = fleetwide(current, (s) => s.routes, routeKey)
  for (const old of fleetwide(released, (s) => s.routes, routeKey).values()) {
    const where = `${old.service} route ${routeKey(old)}`
    const now = routesNow.get(routeKey(old))
    if (!now) {
      problems.push(`${where}: removed or renamed; clients of the release still call it (${versioning})`)
      continue
    }
    for (const part of ['params', 'querystring', 'headers', 'body'] as const) {
      problems.push(...schemaProblems(`${where} ${part}`, old[part], now[part], 'request'))
    }
    for (const [status, schema] of Object.entries(old.response)) {
      const answer = now.response[status]
      if (answer) problems.push(...schemaProblems(`${where} response ${status}`, schema, answer, 'answer'))
      else if (status.startsWith('2')) problems.push(`${where} response ${status}: no longer answered; clients of the release expect it`)
    }
    problems.push(...schemaProblems(`${where} events`, old.events, now.events, 'answer'))
  }
  return problems
}
