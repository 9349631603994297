// Free loopback ports, for the processes the tests start (services, nats-server clusters).
import { once } from 'node:events'
import { createServer } from 'node:net'

/** `count` distinct free loopback ports (all held open while picked, so none comes twice). */
export async function freePorts(count: number): Promise<number[]> {
  const servers = Array.from({ length: count }, () => createServer().listen(0, '127.0.0.1'))
  await Promise.all(servers.map((server) => once(server, 'listening')))
  const ports = servers.map((server) => (server.address() as { port: number }).port)
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))))
  return ports
}

export const freePort = async (): Promise<number> => (await freePorts(1))[0]!
