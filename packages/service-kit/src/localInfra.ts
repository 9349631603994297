// The fleet's infrastructure on a development machine: where it answers by default, and a probe
// for it. The settings' defaults, the test helpers (testing.ts) and `pnpm start` share them.
import { connect } from 'node:net'

/** PostgreSQL, NATS and Redis on their usual ports of this machine: what is used when no URL is set. */
export const localInfra = {
  databaseUrl: 'postgresql://postgres@127.0.0.1:5432/postgres',
  natsUrl: 'nats://127.0.0.1:4222',
  redisUrl: 'redis://127.0.0.1:6379',
} as const

/** Whether something accepts TCP connections at host:port within timeoutMs; never throws. */
export function portOpen(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs })
    const done = (open: boolean) => {
      socket.destroy()
      resolve(open)
    }
    socket
      .once('connect', () => done(true))
      .once('error', () => done(false))
      .once('timeout', () => done(false))
  })
}
