import type { Server } from 'node:http'
import type { Socket } from 'node:net'

/** Node's response in progress on a socket (what its own closeIdleConnections reads too) */
type HttpSocket = Socket & { _httpMessage?: { writableFinished?: boolean } | null }

/**
 * The server's connections, so that a closing server can end the keep-alive connections with
 * no answer in progress. Node's own closeIdleConnections leaves some open (seen: keep-alive
 * sockets from the gateway's upstream pools after a hijacked answer), and a server's close then
 * waits for the client's keep-alive timeout (60 s for the gateway's pools) before it ends.
 * Counted per connection, not per request: nothing is added to a request's path.
 */
export function trackConnections(server: Server) {
  const sockets = new Set<HttpSocket>()
  server.on('connection', (socket: HttpSocket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  return {
    /** ends every connection with no answer in progress */
    closeIdle() {
      for (const socket of sockets) if (!socket._httpMessage || socket._httpMessage.writableFinished) socket.destroy()
    },
  }
}
