import { connect, type NatsConnection } from 'nats'
import { safeUrl, StartupError } from './config.ts'

/**
 * NATS_URL's servers and the credentials in them: nats.js ignores a URL's user:pass, so they
 * are taken out and given as options (the first server that has some: each component's own NATS user).
 */
function natsServers(url: string): { servers: string[]; user?: string; pass?: string } {
  let user: string | undefined
  let pass: string | undefined
  const servers = url.split(',').map((s) => {
    const server = s.trim()
    if (!server.includes('@')) return server
    const parsed = new URL(server.includes('://') ? server : `nats://${server}`)
    if (parsed.username && user === undefined) {
      user = decodeURIComponent(parsed.username)
      pass = decodeURIComponent(parsed.password)
    }
    return `${parsed.protocol}//${parsed.host}`
  })
  return { servers, ...(user === undefined ? {} : { user, pass }) }
}

export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  try {
    return await connect({
      ...natsServers(url),
      name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      timeout: 3000,
    })
  } catch (error) {
    throw new StartupError(
      `NATS is not reachable at ${safeUrl(url)} (${(error as Error).message}): start nats-server with JetStream (nats-server -js) or set NATS_URL`,
    )
  }
}
