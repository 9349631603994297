/**
 * A rehearsal of `docker compose up` without a Docker engine: every image's contents are
 * built the way the Dockerfile's build stage builds them (every package compiled once, then
 * scripts/deploy-package.sh for each), and each is run the way its container would run: its
 * Dockerfile target's CMD and ENV, docker-compose.yml's environment with .env.example's
 * values, as uid 1000 (the image's "node" user) in a directory it cannot write, with plain
 * node (no tsx, no dev dependencies). Compose's hostnames become local ports; Postgres, NATS
 * and Redis are the test's. Each process is healthy when its target's HEALTHCHECK command
 * says so; then the API answers through the gateway as docs/deploy.md's compose section says.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { freePort, freshDatabase, freshNamespace, testInfra } from '@ats/service-kit/testing'
import t from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { execForm, readDockerfile, readImage } from '../src/dockerfile.ts'
import { kustomize } from '../src/kubectl.ts'

const repo = fileURLToPath(new URL('../../..', import.meta.url))
const run = promisify(execFile)
const NODE_UID = 1000
/** PATH in the node:22-bookworm-slim base image */
const IMAGE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

type Obj = Record<string, any>

/** whether something accepts connections on 127.0.0.1:port */
const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })

/** .env.example as compose reads it */
const dotenv = Object.fromEntries(
  readFileSync(join(repo, '.env.example'), 'utf8')
    .split('\n')
    .filter((line) => /^[A-Z0-9_]+=/.test(line))
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
)
const interpolate = (value: string) =>
  value.replace(/\$\{([A-Z0-9_]+)(?::?([-?])([^}]*))?\}/g, (_, name: string, op?: string, arg?: string) => {
    const set = dotenv[name]
    if (set !== undefined && set !== '') return set
    if (op === '?') throw new Error(`compose needs ${name}: ${arg}`)
    return op === '-' ? (arg ?? '') : ''
  })

const compose = parse(readFileSync(join(repo, 'docker-compose.yml'), 'utf8'), { merge: true }) as { services: Record<string, Obj> }
const apps = Object.entries(compose.services).filter(([, s]) => s.build)

interface Image {
  name: string
  package: string
  env: Record<string, string>
  cmd: string[]
  healthcheck: string[]
  dependsOn: string[]
}

const dockerfile = readDockerfile(readFileSync(join(repo, 'Dockerfile'), 'utf8'))

function imageOf(name: string, service: Obj): Image {
  const facts = readImage(dockerfile, service.build.target)
  if (!facts) throw new Error(`the Dockerfile has no target ${service.build.target} (compose's service ${name})`)
  return {
    name,
    package: facts.deployedPackage!,
    env: facts.env,
    cmd: execForm(facts.cmd!.args)!,
    healthcheck: execForm(facts.healthcheck!.args.replace(/^.*?CMD\s+/, ''))!,
    dependsOn: Object.keys(service.depends_on ?? {}),
  }
}

t.test('every image built as the Dockerfile builds it runs the fleet, as compose runs it, and the API answers', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'ats-images-'))
  chmodSync(work, 0o755) // like /app: readable by the node user, writable by root only
  t.teardown(() => rmSync(work, { recursive: true, force: true }))
  const images = apps.map(([name, service]) => imageOf(name, service))

  // ---- build: the Dockerfile's build stage (every package compiled once, then each deployed) ----
  // DEPLOY_PACKAGE_BUILT=1: `pnpm test` has just run `pnpm build` (scripts/test.ts), so not twice
  const buildStarted = Date.now()
  if (process.env.DEPLOY_PACKAGE_BUILT !== '1') await run('pnpm', ['build'], { cwd: repo, maxBuffer: 32 * 1024 * 1024 })
  const deploy = async (image: Image) => {
    await run(join(repo, 'scripts/deploy-package.sh'), [image.package, join(work, image.name)], {
      cwd: repo,
      // its dependencies hard-linked from pnpm's store where it can (copied where not), not
      // copied as `pnpm deploy` does by default: the same files, for half the CPU
      env: { ...process.env, DEPLOY_PACKAGE_BUILT: '1', npm_config_package_import_method: 'auto' },
      maxBuffer: 32 * 1024 * 1024,
    })
    const modules = readdirSync(join(work, image.name, 'node_modules/.pnpm'))
    const devOnly = modules.filter((m) => /^(tsx|typescript|tap|prisma|@biomejs\+biome|testcontainers)@/.test(m))
    t.same(devOnly, [], `${image.name}: no dev tool among its dependencies`)
    t.ok(existsSync(join(work, image.name, image.cmd.at(-1)!)), `${image.name}: ${image.cmd.at(-1)} was built`)
  }
  // two at a time, in the order compose starts them (what the others depend on first): an image
  // starts as soon as it is deployed and what it depends on is healthy, while the rest deploy
  const depth = (image: Image): number =>
    1 + Math.max(0, ...image.dependsOn.map((d) => images.find((i) => i.name === d)).map((i) => (i ? depth(i) : 0)))
  const lanes = [Promise.resolve(), Promise.resolve()]
  const deployed = new Map(
    [...images]
      .sort((a, b) => depth(a) - depth(b))
      .map((image, i) => {
        lanes[i % 2] = lanes[i % 2]!.then(() => deploy(image))
        return [image.name, lanes[i % 2]!] as const
      }),
  )
  const allDeployed = Promise.all(deployed.values()).then(() =>
    t.comment(`built and deployed ${images.length} packages in ${((Date.now() - buildStarted) / 1000).toFixed(1)} s`),
  )

  // ---- run: compose's environment with local addresses ----------------------------------
  const { natsUrl, redisUrl } = await testInfra()
  const databaseUrl = await freshDatabase(t)
  const namespace = await freshNamespace(t)
  const book = join(work, 'devnet-volume')
  mkdirSync(book)
  if (process.getuid?.() === 0) chownSync(book, NODE_UID, NODE_UID)
  const ports = new Map<string, number>() // "agent:3001" -> a local port
  for (const image of images) {
    for (const key of ['PORT', 'OPS_PORT', 'DEVNET_PORT'])
      if (image.env[key]) ports.set(`${image.name}:${image.env[key]}`, await freePort())
  }
  const local = (value: string) =>
    value
      .replace(/^postgresql:\/\/[^@]+@postgres:5432\/ats$/, databaseUrl)
      // compose gives each component a NATS user of its own; the test's NATS has no users (the
      // users and their permissions are tested in service-kit's leastPrivilege test and by pnpm rehearse)
      .replace(/^nats:\/\/(?:[^@/]+@)?nats:4222$/, natsUrl)
      .replace(/^redis:\/\/redis:6379$/, redisUrl)
      .replace(/^\/devnet\//, `${book}/`)
      .replace(/^http:\/\/([a-z-]+):(\d+)$/, (url, host: string, port: string) =>
        ports.has(`${host}:${port}`) ? `http://127.0.0.1:${ports.get(`${host}:${port}`)}` : url,
      )
  // the node user's home, as the base image has it (/home/node)
  const home = join(work, 'home')
  mkdirSync(home)
  if (process.getuid?.() === 0) chownSync(home, NODE_UID, NODE_UID)
  /** a container's whole environment: what Docker and the base image set, its target's ENV, compose's environment */
  const envOf = (image: Image): Record<string, string> => {
    const env: Record<string, string> = { PATH: IMAGE_PATH, HOME: home, HOSTNAME: image.name, NATS_NAMESPACE: namespace, LOG_LEVEL: 'warn' }
    for (const [k, v] of Object.entries(image.env)) env[k] = local(v)
    for (const [k, v] of Object.entries(compose.services[image.name]!.environment ?? {})) env[k] = local(interpolate(String(v ?? '')))
    for (const key of ['PORT', 'OPS_PORT', 'DEVNET_PORT']) if (env[key]) env[key] = String(ports.get(`${image.name}:${image.env[key]}`))
    return env
  }
  /**
   * node started with that environment and nothing else. `env -i` clears what the test runner
   * adds to every child process whatever `env` it is given (tap's process tracking puts its loader,
   * a file inside the checkout, in NODE_OPTIONS): uid 1000 cannot read a checkout under a
   * directory only its owner can open, and a real image has no such variable.
   */
  const inContainer = (image: Image, args: string[]): [string, string[]] => [
    'env',
    ['-i', ...Object.entries(envOf(image)).map(([k, v]) => `${k}=${v}`), process.execPath, ...args],
  ]
  const children: ChildProcess[] = []
  t.teardown(async () => {
    const exits = children.map((c) => new Promise((resolve) => (c.exitCode !== null ? resolve(null) : c.once('exit', resolve))))
    for (const c of children) c.kill('SIGTERM')
    await Promise.all(exits)
  })
  // as the image's "node" user when the test can switch users (root, as in CI); else as whoever runs it
  const asNode = process.getuid?.() === 0 ? { uid: NODE_UID, gid: NODE_UID } : {}
  if (!('uid' in asNode)) t.comment('not root: the processes run as the current user, not uid 1000')
  /**
   * The image's HEALTHCHECK command, run as Docker runs it, until it passes. Each run starts a node
   * process (~0.1 s of CPU), so it is first run once the process listens on its ports, which an
   * in-process connect sees at no cost.
   */
  const healthy = async (image: Image, child: ChildProcess, output: () => string) => {
    const [command, ...args] = image.healthcheck
    t.equal(command, 'node', `${image.name}: the healthcheck runs node`)
    const deadline = Date.now() + 90_000
    const itsPorts = [...ports].filter(([key]) => key.startsWith(`${image.name}:`)).map(([, port]) => port)
    const passes = async () =>
      (await Promise.all(itsPorts.map(listening))).every(Boolean) &&
      (await run(...inContainer(image, args), { cwd: join(work, image.name), ...asNode }).then(
        () => true,
        () => false,
      ))
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`${image.name} exited with ${child.exitCode}:\n${output()}`)
      if (await passes()) return
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    throw new Error(`${image.name}: its HEALTHCHECK did not pass within 90 s:\n${output()}`)
  }
  const started = new Map<string, Promise<void>>()
  /** the images whose HEALTHCHECK command passed, in the order they did */
  const passedHealthcheck: string[] = []
  const start = (image: Image): Promise<void> => {
    let promise = started.get(image.name)
    if (!promise) {
      promise = (async () => {
        await Promise.all([
          deployed.get(image.name)!,
          ...image.dependsOn.filter((d) => images.some((i) => i.name === d)).map((d) => start(images.find((i) => i.name === d)!)),
        ])
        const [command, ...args] = image.cmd
        t.equal(command, 'node', `${image.name}: the image starts node`)
        const child = spawn(...inContainer(image, args), { cwd: join(work, image.name), stdio: ['ignore', 'pipe', 'pipe'], ...asNode })
        children.push(child)
        let output = ''
        for (const stream of [child.stdout!, child.stderr!])
          stream.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4000)))
        await healthy(image, child, () => output)
        passedHealthcheck.push(image.name)
        // env exec'd node in its place: the process is node, and it has the container's environment only
        if (!existsSync(`/proc/${child.pid}/environ`)) return // no procfs (not Linux): not checked
        const environ = readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0').filter(Boolean)
        t.same(
          environ.map((e) => e.slice(0, e.indexOf('='))).sort(),
          Object.keys(envOf(image)).sort(),
          `${image.name}: only the container's environment`,
        )
      })()
      started.set(image.name, promise)
    }
    return promise
  }
  await Promise.all([...images.map(start), allDeployed])
  t.comment(`all healthy ${((Date.now() - buildStarted) / 1000).toFixed(1)} s after the first deploy began`)
  t.same(
    [...passedHealthcheck].sort(),
    images.map((i) => i.name).sort(),
    `every container's HEALTHCHECK passed: ${passedHealthcheck.join(', ')}`,
  )

  // ---- Kubernetes' probes, as k8s/base declares them, answer on the running processes -----------
  const rendered = parseAllDocuments(kustomize(join(repo, 'k8s/base'))).map((d) => d.toJS() as Obj)
  for (const deployment of rendered.filter((d) => d?.kind === 'Deployment')) {
    for (const container of deployment.spec.template.spec.containers as Obj[]) {
      const image = /^ats-([a-z-]+)/.exec(String(container.image).split('/').at(-1)!)?.[1]
      if (!image || !images.some((i) => i.name === image)) continue
      for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
        const { path, port } = container[kind].httpGet as { path: string; port: string | number }
        const containerPort = typeof port === 'number' ? port : (container.ports as Obj[]).find((p) => p.name === port)!.containerPort
        const local = ports.get(`${image}:${containerPort}`)
        t.ok(local, `${deployment.metadata.name} ${kind}: port ${port} is one the image serves`)
        const res = await fetch(`http://127.0.0.1:${local}${path}`)
        t.equal(res.status, 200, `${deployment.metadata.name} ${kind}: GET ${path} on ${port} (${containerPort}) answers 200`)
      }
    }
  }

  // ---- the API, through the gateway, as docs/deploy.md's compose section uses it --------------------
  const gateway = `http://127.0.0.1:${ports.get('gateway:3000')}`
  const root = (await (await fetch(`${gateway}/`)).json()) as Obj
  t.match(root, { docs: '/docs', openapi: '/openapi.json', chainId: 31337 })
  t.match(await (await fetch(`${gateway}/docs`)).text(), /swagger-ui/i)
  // the web console, built at install and shipped in the gateway's image
  const consolePage = await fetch(`${gateway}/console`)
  t.equal(consolePage.status, 200)
  t.match(await consolePage.text(), /<script type="module" src="\/console\/app\.js">/)
  const consoleScript = await fetch(`${gateway}/console/app.js`)
  t.match({ status: consoleScript.status, type: consoleScript.headers.get('content-type') }, { status: 200, type: /javascript/ })
  t.ok((await consoleScript.text()).length > 10_000, "the console's bundle")
  const admin = { authorization: `Bearer ${dotenv.ADMIN_API_KEY}`, 'content-type': 'application/json' }
  const created = await fetch(`${gateway}/admin/keys`, {
    method: 'POST',
    headers: admin,
    body: JSON.stringify({ tier: 'readwrite', label: 'images test' }),
  })
  t.equal(created.status, 201, 'the bootstrap admin key from .env.example creates a key')
  const { key } = (await created.json()) as { key: string }
  const auth = { authorization: `Bearer ${key}` }
  const prices = await fetch(`${gateway}/market/prices`, { headers: auth })
  t.equal(prices.status, 200, 'market data from the devnet container')
  const quote = await fetch(`${gateway}/swap/quote?tokenIn=WETH&tokenOut=USDC&amountIn=1000000000000000000`, { headers: auth })
  t.equal(quote.status, 200, 'a swap quote on the devnet container')
  t.match(await quote.json(), { amountOut: /^\d+$/ })
})
