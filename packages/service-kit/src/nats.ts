import { connect, type NatsConnection } from 'nats'
import { safeUrl, StartupError } from './config.ts'

export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  try {
    return await connect({
      servers: url.split(',').map((s) => s.trim()),
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
