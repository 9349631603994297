// The web console for the people in the loop (approvers and operators), at /console: a page,
// its script and stylesheet, built into gateway/console-dist by console/build.mjs (the gateway's
// `generate`, run by pnpm install) and shipped in the image. Nothing is fetched from elsewhere;
// the page calls the API through this gateway with the API key the person signs in with, kept
// in the tab's sessionStorage (never in a URL, a cookie or a log).
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { StartupError } from '@ats/service-kit'

export const consoleUrl = '/console'

const files = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
} as const

/** Only this origin's script, styles and API; no framing, no plugins, no forms sent elsewhere. */
const contentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ')

/** the built console, read once at start (from src/ or dist/, the folder beside them) */
function loadConsole(): Record<keyof typeof files, Buffer> {
  const dir = new URL('../../console-dist/', import.meta.url)
  try {
    return Object.fromEntries(Object.keys(files).map((name) => [name, readFileSync(new URL(name, dir))])) as Record<
      keyof typeof files,
      Buffer
    >
  } catch (error) {
    throw new StartupError(
      `the web console is not built (${(error as Error).message}): run pnpm install, or node gateway/console/build.mjs`,
    )
  }
}

export async function consoleRoutes(app: FastifyInstance) {
  const built = loadConsole()
  const etags = Object.fromEntries(
    Object.entries(built).map(([name, body]) => [name, `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`]),
  ) as Record<keyof typeof files, string>
  const send = (request: FastifyRequest, reply: FastifyReply, name: keyof typeof files) => {
    reply
      .header('content-type', files[name])
      .header('content-security-policy', contentSecurityPolicy)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('x-frame-options', 'DENY')
      // revalidated at every load, so a new release's console is picked up at once; the ETag
      // (of the content) makes an unchanged file a bodiless 304
      .header('cache-control', 'no-cache')
      .header('etag', etags[name])
    const seen = request.headers['if-none-match']
    if (seen?.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etags[name])) return reply.code(304).send()
    return reply.send(built[name])
  }
  app.get(consoleUrl, (request, reply) => send(request, reply, 'index.html'))
  app.get(`${consoleUrl}/`, (request, reply) => send(request, reply, 'index.html'))
  app.get(`${consoleUrl}/app.js`, (request, reply) => send(request, reply, 'app.js'))
  app.get(`${consoleUrl}/app.css`, (request, reply) => send(request, reply, 'app.css'))
}
