import type { Server } from 'node:http'
import type { Socket } from 'node:net'

/**
 * The server's connections, each with how many requests it has in flight, so that a closing
 * server can end the keep-alive connections that carry none. Node's own closeIdleConnections
 * leaves some open (seen: keep-alive sockets from the gateway's upstream pools after a hijacked
 * answer), and a server's close then waits for the client's keep-alive timeout (60 s for the
 * gateway's pools) before it ends.
 */
export function trackConnections(server: Server) {
  const inFlight = new Map<Socket, number>()
  server.on('connection', (socket: Socket) => {
    inFlight.set(socket, 0)
    socket.once('close', () => inFlight.delete(socket))
  })
  server.on('request', (request, response) => {
    const socket = request.socket
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1)
    response.once('close', () => {
      if (inFlight.has(socket)) inFlight.set(socket, Math.max(0, inFlight.get(socket)! - 1))
    })
  })
  return {
    /** ends every connection with no request in flight */
    closeIdle() {
      for (const [socket, n] of inFlight) if (n === 0) socket.destroy()
    },
  }
}
