import { baseTestEnv, startService, testInfra } from '@ats/service-kit/testing'
import Fastify from 'fastify'
import type { Test } from 'tap'
import { adminService } from '../../services/admin/src/service.ts'
import { gatewayService } from '../src/service.ts'

export const adminKey = 'atsk_gateway-test-bootstrap-key-000'

/**
 * A probe upstream for the route groups whose services do not exist yet: it
 * answers with what it received, so tests can see what the gateway forwards.
 */
export async function startEcho(t: Test) {
  const app = Fastify()
  app.all('/*', async (request) => ({ path: request.url, headers: request.headers }))
  t.teardown(() => app.close())
  return app.listen({ port: 0, host: '127.0.0.1' })
}

export interface FleetOptions {
  gateways?: number
  gatewayEnv?: NodeJS.ProcessEnv
  /** where the not-yet-built services are: the echo probe by default */
  otherServices?: string
}

/** Admin on a fresh database plus one or more gateways, over real Postgres, NATS and Redis. */
export async function startFleet(t: Test, options: FleetOptions = {}) {
  const env = await baseTestEnv(t)
  const { redisUrl } = await testInfra()
  const admin = await startService(t, adminService, { ...env, ADMIN_API_KEY: adminKey })
  const others = options.otherServices ?? (await startEcho(t))
  const gatewayEnv: NodeJS.ProcessEnv = {
    ...env,
    REDIS_URL: redisUrl,
    ADMIN_URL: admin.url,
    AGENT_URL: others,
    TRADING_URL: others,
    MARKET_DATA_URL: others,
    AUTOMATION_URL: others,
    ...options.gatewayEnv,
  }
  const gateways: Array<{ url: string }> = []
  for (let i = 0; i < (options.gateways ?? 1); i++) gateways.push(await startService(t, gatewayService, gatewayEnv))
  const gateway = gateways[0]!

  const request = async (path: string, init: { method?: string; key?: string; body?: unknown; headers?: Record<string, string>; via?: number } = {}) => {
    const res = await fetch(`${gateways[init.via ?? 0]!.url}${path}`, {
      method: init.method ?? 'GET',
      headers: {
        ...(init.key ? { authorization: `Bearer ${init.key}` } : {}),
        ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...init.headers,
      },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as any) : undefined }
  }

  const createKey = async (tier: string, label = `${tier} key`) => {
    const res = await request('/admin/keys', { method: 'POST', key: adminKey, body: { tier, label } })
    if (res.status !== 201) throw new Error(`could not create a key: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body as { id: string; key: string; tier: string }
  }

  return { admin, gateway, gateways, request, createKey }
}
