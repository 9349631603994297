import { execFileSync } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import { forbiddenAddress } from '../../src/webhooks/forbiddenAddresses.ts'
import { sendWebhook } from '../../src/webhooks/sender.ts'
import { newWebhookSecret, signWebhook } from '../../src/webhooks/signing.ts'
import { checkWebhookUrl, type UrlRules } from '../../src/webhooks/urlRules.ts'

const production: UrlRules = { allowHttp: false, allowPrivate: false }
const httpOnly: UrlRules = { allowHttp: true, allowPrivate: false }
const development: UrlRules = { allowHttp: true, allowPrivate: true }

interface Receiver {
  url: string
  port: number
  connections: number
  requests: { method: string; path: string; headers: IncomingHttpHeaders; body: string }[]
}

/** A local HTTP server that records what reaches it (connections too) and answers with `answer`. */
async function receiver(t: Test, answer: (res: ServerResponse, req: IncomingMessage) => void, host = '127.0.0.1'): Promise<Receiver> {
  const server = createServer()
  const seen: Receiver = { url: '', port: 0, connections: 0, requests: [] }
  server.on('connection', () => seen.connections++)
  server.on('request', async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    seen.requests.push({ method: req.method!, path: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString() })
    answer(res, req)
  })
  server.listen(0, host)
  await once(server, 'listening')
  seen.port = (server.address() as AddressInfo).port
  seen.url = `http://${host}:${seen.port}`
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return seen
}

const attempt = (
  url: string,
  rules: UrlRules,
  more: { body?: string; headers?: Record<string, string>; timeoutMs?: number; maxResponseBytes?: number } = {},
) =>
  sendWebhook({
    url,
    rules,
    headers: more.headers ?? {},
    body: more.body ?? '{}',
    timeoutMs: more.timeoutMs ?? 5_000,
    maxResponseBytes: more.maxResponseBytes ?? 4_096,
  })

t.test('forbiddenAddress names internal IPv4 addresses and lets public ones pass', async (t) => {
  const table: [string, string | undefined][] = [
    ['0.0.0.0', 'unspecified (0.0.0.0/8)'],
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['10.0.0.1', 'private (10.0.0.0/8)'],
    ['172.16.0.1', 'private (172.16.0.0/12)'],
    ['172.31.255.255', 'private (172.16.0.0/12)'],
    ['192.168.1.1', 'private (192.168.0.0/16)'],
    ['100.64.0.1', 'carrier-grade NAT (100.64.0.0/10)'],
    ['100.100.100.200', 'cloud metadata (100.100.100.200)'],
    ['169.254.169.254', 'link-local / cloud metadata'],
    ['169.254.10.1', 'link-local (169.254.0.0/16)'],
    ['192.0.0.170', 'IETF protocol assignment (192.0.0.0/24)'],
    ['198.18.0.1', 'benchmarking (198.18.0.0/15)'],
    ['224.0.0.251', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved (240.0.0.0/4)'],
    ['8.8.8.8', undefined],
    ['172.15.255.255', undefined],
    ['172.32.0.1', undefined],
    ['100.128.0.1', undefined],
    ['198.20.0.1', undefined],
    ['198.51.100.7', undefined],
  ]
  for (const [ip, reason] of table) t.equal(forbiddenAddress(ip), reason, ip)
})

t.test('forbiddenAddress names internal IPv6 addresses, checking the IPv4 address a mapped or NAT64 one carries', async (t) => {
  const table: [string, string | undefined][] = [
    ['::', 'unspecified (::)'],
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fe80::1', 'link-local (fe80::/10)'],
    ['fe80::1%eth0', 'link-local (fe80::/10)'],
    ['fc00::1', 'unique-local (fc00::/7)'],
    ['fd12:3456::1', 'unique-local (fc00::/7)'],
    ['fd00:ec2::254', 'unique-local / cloud metadata'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['0:0:0:0:0:ffff:169.254.169.254', 'link-local / cloud metadata'],
    ['0:0:0:0:0:ffff:a00:1', 'private (10.0.0.0/8)'],
    // node:net BlockList matches IPv4-mapped addresses against IPv4 rules: pinned here
    ['::ffff:10.0.0.1', 'private (10.0.0.0/8)'],
    ['::ffff:169.254.169.254', 'link-local / cloud metadata'],
    ['[::1]', 'loopback'],
    ['[fe80::1%eth0]', 'link-local (fe80::/10)'],
    ['::7f00:1', 'IPv4-compatible (::/96, deprecated)'],
    ['::ffff:0:10.0.0.1', 'private (10.0.0.0/8) via IPv4-translated'],
    ['64:ff9b::100.100.100.200', 'cloud metadata (100.100.100.200) via NAT64'],
    ['2002:ac10:1::1', 'private (172.16.0.0/12) via 6to4'],
    ['64:ff9b:1::1', 'NAT64 local-use (64:ff9b:1::/48)'],
    ['64:ff9b::127.0.0.1', 'loopback via NAT64'],
    ['64:ff9b::a9fe:a9fe', 'link-local / cloud metadata via NAT64'],
    ['2002:c0a8:101::1', 'private (192.168.0.0/16) via 6to4'],
    ['2606:4700::1111', undefined],
    ['::ffff:8.8.8.8', undefined],
    ['64:ff9b::8.8.8.8', undefined],
    ['2002:808:808::1', undefined],
    ['::ffff:0:8.8.8.8', undefined],
    ['2001:db8::1', undefined],
  ]
  for (const [ip, reason] of table) t.equal(forbiddenAddress(ip), reason, ip)
  t.equal(forbiddenAddress('example.com'), 'not an IP address')
  t.equal(forbiddenAddress('10.0.0.1/8'), 'not an IP address')
})

t.test('a webhook URL must use https unless WEBHOOK_ALLOW_HTTP is set', async (t) => {
  await t.rejects(checkWebhookUrl('http://127.0.0.1/x', production), {
    statusCode: 400,
    message: 'webhook URL must use https (http is allowed only with WEBHOOK_ALLOW_HTTP=true, for development)',
  })
  await t.rejects(checkWebhookUrl('ftp://example.com/x', httpOnly), { statusCode: 400, message: 'webhook URL must use https or http' })
  await t.rejects(checkWebhookUrl('not a url', production), { statusCode: 400, message: 'webhook URL is not a valid absolute URL' })
})

t.test('a webhook URL to a loopback, metadata or private address is refused without WEBHOOK_ALLOW_PRIVATE_ADDRESSES', async (t) => {
  const hint = '(set WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true for development only)'
  await t.rejects(checkWebhookUrl('http://127.0.0.1:9/x', httpOnly), {
    statusCode: 400,
    message: `webhook URL http://127.0.0.1:9/x is refused: 127.0.0.1 is a loopback address ${hint}`,
  })
  await t.rejects(checkWebhookUrl('http://169.254.169.254/latest/meta-data', httpOnly), {
    statusCode: 400,
    message: `webhook URL http://169.254.169.254/latest/meta-data is refused: 169.254.169.254 is a link-local / cloud metadata address ${hint}`,
  })
  await t.rejects(checkWebhookUrl('https://10.0.0.1/', production), {
    statusCode: 400,
    message: /10\.0\.0\.1 is a private \(10\.0\.0\.0\/8\) address/,
  })
  await t.rejects(checkWebhookUrl('https://[::ffff:127.0.0.1]/', production), { statusCode: 400, message: /is a loopback address/ })
  await t.rejects(checkWebhookUrl('https://[fd00:ec2::254]/', production), { statusCode: 400, message: /cloud metadata/ })
  // WHATWG URL reads 2130706433 as 127.0.0.1
  await t.rejects(checkWebhookUrl('https://2130706433/', production), { statusCode: 400, message: /127\.0\.0\.1 is a loopback address/ })
})

t.test('a webhook URL whose host name resolves to loopback is refused', async (t) => {
  await t.rejects(checkWebhookUrl('http://localhost:8080/', httpOnly), {
    statusCode: 400,
    message: /^webhook URL http:\/\/localhost:8080\/ is refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address/,
  })
  await t.rejects(checkWebhookUrl('https://no-such-host.invalid/', production), {
    statusCode: 400,
    message: /^webhook URL host no-such-host\.invalid could not be resolved/,
  })
})

t.test('a webhook URL with credentials or a fragment is refused without echoing the password', async (t) => {
  const error = (await checkWebhookUrl('https://user:pw@example.com', production).catch((e: Error) => e)) as Error & { statusCode: number }
  t.equal(error.statusCode, 400)
  t.equal(error.message, 'webhook URL must not contain a username or password')
  await t.rejects(checkWebhookUrl('https://example.com/hook#frag', production), { statusCode: 400, message: /fragment/ })
})

t.test('public addresses pass, and development settings let local URLs through', async (t) => {
  await t.resolves(checkWebhookUrl('https://93.184.215.14/hook', production))
  await t.resolves(checkWebhookUrl('https://[2606:4700::1111]/hook', production))
  await t.resolves(checkWebhookUrl('http://127.0.0.1:9/x', development))
  await t.resolves(checkWebhookUrl('http://localhost:9/x', development))
})

t.test('a new secret is whsec_ with 24 random bytes, and signWebhook signs with every secret', async (t) => {
  const secret = newWebhookSecret()
  t.match(secret, /^whsec_[A-Za-z0-9+/]{32}$/)
  t.equal(Buffer.from(secret.slice(6), 'base64').length, 24)
  t.not(newWebhookSecret(), secret)
  const other = newWebhookSecret()
  const at = new Date()
  const body = JSON.stringify({ type: 'job.finished', data: { id: 'job_1' } })
  const headers = signWebhook('msg_1', at, body, [secret, other])
  t.equal(headers['webhook-id'], 'msg_1')
  t.equal(headers['webhook-timestamp'], String(Math.floor(at.getTime() / 1000)))
  t.equal(headers['webhook-signature'].split(' ').length, 2)
  for (const s of [secret, other]) t.same(new Webhook(s).verify(body, { ...headers }), JSON.parse(body))
  t.throws(() => new Webhook(newWebhookSecret()).verify(body, { ...headers }), { message: 'No matching signature found' })
})

t.test('a delivery reaches the receiver with the body, the headers and a signature that verifies for both secrets', async (t) => {
  const got = await receiver(t, (res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks'))
  const secrets = [newWebhookSecret(), newWebhookSecret()]
  const body = JSON.stringify({ type: 'payment.settled', data: { amount: '1.00' } })
  const signed = signWebhook('msg_abc', new Date(), body, secrets)
  const result = await attempt(`${got.url}/hooks/ats?team=1`, development, { body, headers: { ...signed } })
  t.match(result, { ok: true, status: 200, response: 'thanks' })
  t.type(result.durationMs, 'number')
  t.equal(got.requests.length, 1)
  const [request] = got.requests
  t.equal(request!.method, 'POST')
  t.equal(request!.path, '/hooks/ats?team=1')
  t.equal(request!.body, body)
  t.equal(request!.headers['content-type'], 'application/json')
  t.equal(request!.headers['user-agent'], 'ats-webhooks/1')
  t.equal(request!.headers['webhook-id'], 'msg_abc')
  for (const secret of secrets)
    t.same(new Webhook(secret).verify(request!.body, request!.headers as Record<string, string>), JSON.parse(body))
})

t.test('a 500 answer is a failed attempt with its status', async (t) => {
  const got = await receiver(t, (res) => res.writeHead(500).end('boom'))
  const result = await attempt(`${got.url}/`, development)
  t.match(result, { ok: false, status: 500, response: 'boom', error: 'receiver answered 500' })
  t.notOk(result.refused)
})

t.test('a receiver slower than the timeout fails the attempt, saying so', async (t) => {
  const got = await receiver(t, () => {})
  const started = Date.now()
  const result = await attempt(`${got.url}/`, development, { timeoutMs: 300 })
  t.equal(result.ok, false)
  t.equal(result.status, undefined)
  t.match(result.error, /timeout of 300 ms/)
  t.ok(Date.now() - started < 3_000, 'gave up near the timeout')
  t.equal(got.requests.length, 1)
})

t.test('a big answer is cut at maxResponseBytes', async (t) => {
  const got = await receiver(t, (res) => res.writeHead(200).end('x'.repeat(1024 * 1024)))
  const result = await attempt(`${got.url}/`, development, { maxResponseBytes: 1000 })
  t.equal(result.ok, true)
  t.equal(result.response, 'x'.repeat(1000))
})

t.test('without WEBHOOK_ALLOW_PRIVATE_ADDRESSES a delivery to 127.0.0.1 is refused before connecting', async (t) => {
  const got = await receiver(t, (res) => res.end('should not be reached'))
  const result = await attempt(`${got.url}/x`, httpOnly)
  t.match(result, {
    ok: false,
    refused: true,
    error: /^webhook URL http:\/\/127\.0\.0\.1:\d+\/x is refused: 127\.0\.0\.1 is a loopback address/,
  })
  t.equal(got.connections, 0)
  t.equal(got.requests.length, 0)
})

t.test('a delivery to a host name resolving to loopback is refused when connecting, so DNS rebinding cannot slip past', async (t) => {
  const got = await receiver(t, (res) => res.end('should not be reached'))
  const result = await attempt(`http://localhost:${got.port}/x`, httpOnly)
  t.match(result, { ok: false, refused: true, error: /is refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address/ })
  t.equal(got.connections, 0)
  t.equal(got.requests.length, 0)
})

t.test('a delivery to an http URL is refused without WEBHOOK_ALLOW_HTTP', async (t) => {
  const got = await receiver(t, (res) => res.end('should not be reached'))
  const result = await attempt(`${got.url}/x`, { allowHttp: false, allowPrivate: true })
  t.match(result, { ok: false, refused: true, error: /must use https/ })
  t.equal(got.connections, 0)
})

t.test('a redirect to loopback is not followed: the attempt fails and the target is never contacted', async (t) => {
  const publicLooking = '198.51.100.7'
  try {
    execFileSync('ip', ['addr', 'add', `${publicLooking}/32`, 'dev', 'lo'], { stdio: 'pipe' })
  } catch (error) {
    const stderr = String((error as { stderr?: Buffer }).stderr ?? error)
    t.fail(`this test adds ${publicLooking}/32 to the loopback device and needs root and iproute2: "ip addr add" failed: ${stderr.trim()}`)
    return
  }
  t.teardown(() => {
    execFileSync('ip', ['addr', 'del', `${publicLooking}/32`, 'dev', 'lo'], { stdio: 'pipe' })
  })
  const internal = await receiver(t, (res) => res.end('internal secrets'))
  const redirecting = await receiver(t, (res) => res.writeHead(302, { location: `${internal.url}/` }).end(), publicLooking)
  const result = await attempt(`${redirecting.url}/hook`, httpOnly)
  t.match(result, { ok: false, status: 302, error: `redirect to ${internal.url}/ not followed` })
  t.notOk(result.refused)
  t.equal(redirecting.requests.length, 1, 'the public-looking receiver got the delivery')
  t.equal(internal.connections, 0, 'the redirect target was never contacted')
})
