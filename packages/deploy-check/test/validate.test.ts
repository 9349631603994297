import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { checkDeployment } from '../src/validate.ts'

const repo = fileURLToPath(new URL('../../..', import.meta.url))

/** A copy of every file the check reads, to break one of them on purpose. */
function copyOfDeployFiles(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'deploy-check-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  for (const file of ['k8s', 'docker-compose.yml', '.env.example', 'Dockerfile']) {
    cpSync(join(repo, file), join(dir, file), { recursive: true })
  }
  return dir
}

function edit(root: string, file: string, from: string | RegExp, to: string): void {
  const path = join(root, file)
  const before = readFileSync(path, 'utf8')
  const after = before.replace(from, to)
  if (after === before) throw new Error(`${file}: ${String(from)} not found: the test no longer breaks what it says`)
  writeFileSync(path, after)
}

t.test('the repository passes: the Dockerfile, compose, base and every overlay', async (t) => {
  const { problems, notes } = await checkDeployment(repo)
  t.same(problems, [])
  t.match(notes.join('\n'), /Dockerfile: 7 targets linted/)
  t.match(notes.join('\n'), /k8s\/overlays\/dev: \d+ documents rendered and valid/)
  t.match(notes.join('\n'), /k8s\/overlays\/dev-keda: \d+ documents rendered and valid/)
  t.match(notes.join('\n'), /k8s\/overlays\/prod: \d+ documents rendered and valid/)
  t.match(notes.join('\n'), /docker-compose config -q passes/)
})

t.test('an untouched copy passes too (the checks read the copy, not the repository)', async (t) => {
  const root = copyOfDeployFiles(t)
  t.same((await checkDeployment(root, repo)).problems, [])
})

// Each case breaks one file on purpose; the check must name what broke. The slow parts of a check
// run only where a case needs them, and the untouched copy above passes them all: a case that
// breaks a file under k8s/ renders only the directory whose problem it expects (`k8s`), and one that
// breaks one of the fleet's own rules for the compose file leaves out `docker-compose config`.
const cases: Array<{
  name: string
  file: string
  from: string | RegExp
  to: string
  expect: RegExp
  k8s?: string
  dockerCompose?: false
}> = [
  {
    name: 'a manifest that is not valid Kubernetes (replicas as a string)',
    k8s: 'k8s/base',
    file: 'k8s/base/trading-deployment.yaml',
    from: 'replicas: 2',
    to: 'replicas: two',
    expect: /k8s\/base: Deployment trading: .*replicas/,
  },
  {
    name: 'a kustomization that does not render (a missing resource)',
    k8s: 'k8s/base',
    file: 'k8s/base/kustomization.yaml',
    from: '  - admin-pdb.yaml\n',
    to: '  - admin-pdb.yaml\n  - no-such-file.yaml\n',
    expect: /k8s\/base: kustomize failed: .*no-such-file\.yaml/,
  },
  {
    name: 'a readiness probe on the wrong path',
    k8s: 'k8s/base',
    file: 'k8s/base/admin-deployment.yaml',
    from: 'path: /ready, port: http',
    to: 'path: /health, port: http',
    expect: /Deployment admin: readinessProbe must be an httpGet on \/ready/,
  },
  {
    name: "the gateway's readiness probe on the client port (it answers /ready on the ops port only)",
    k8s: 'k8s/base',
    file: 'k8s/base/gateway-deployment.yaml',
    from: 'path: /ready, port: ops',
    to: 'path: /ready, port: http',
    expect: /Deployment gateway: readinessProbe probes port http \(3000\), but gateway serves \/ready on 9000/,
  },
  {
    name: 'a container running as root',
    k8s: 'k8s/base',
    file: 'k8s/base/market-data-deployment.yaml',
    from: 'runAsUser: 1000 # "node" in the image',
    to: 'runAsUser: 0',
    expect: /Deployment market-data container market-data: runs as uid 0/,
  },
  {
    name: 'a setting the service reads left out of its ConfigMap',
    k8s: 'k8s/base',
    file: 'k8s/base/config/automation.env',
    from: /^AUTOMATION_TICK_MS=.*\n/m,
    to: '',
    expect: /Deployment automation: setting AUTOMATION_TICK_MS is not in its ConfigMaps/,
  },
  {
    name: 'a setting with a value the process refuses at start',
    k8s: 'k8s/base',
    file: 'k8s/base/config/shared.env',
    from: 'LOG_LEVEL=info',
    to: 'LOG_LEVEL=verbose',
    expect: /Deployment gateway: invalid setting LOG_LEVEL: .*\(got "verbose"\); the process would not start/,
  },
  {
    name: 'a prod overlay value the process refuses (a number that is not one)',
    k8s: 'k8s/overlays/prod',
    file: 'k8s/overlays/prod/kustomization.yaml',
    from: 'literals: [PUBLIC_URL=https://api.example.com]',
    to: 'literals: [PUBLIC_URL=https://api.example.com, RATE_LIMIT_READONLY=lots]',
    expect: /k8s\/overlays\/prod: Deployment gateway: invalid setting RATE_LIMIT_READONLY/,
  },
  {
    name: 'a secret setting given as a literal',
    k8s: 'k8s/base',
    file: 'k8s/base/trading-deployment.yaml',
    from: /- name: DATABASE_URL\n\s+valueFrom:\n\s+secretKeyRef: \{ name: ats-secrets, key: DATABASE_URL_TRADING \}/,
    to: '- name: DATABASE_URL\n              value: postgresql://postgres:hunter2@postgres:5432/ats',
    expect: /Deployment trading: DATABASE_URL is a secret setting: it must come from a Secret/,
  },
  {
    name: 'a required secret key the dev Secret lacks (optional ones may be absent)',
    k8s: 'k8s/overlays/dev',
    file: 'k8s/overlays/dev/kustomization.yaml',
    from: '      - RPC_URL=https://arb1.arbitrum.io/rpc\n',
    to: '',
    expect: /k8s\/overlays\/dev: Deployment trading: RPC_URL reads key RPC_URL of Secret ats-secrets-\w+, which lacks it/,
  },
  {
    name: 'a NetworkPolicy that lets any pod reach a service',
    k8s: 'k8s/base',
    file: 'k8s/base/trading-networkpolicy.yaml',
    from: /- from:\n(\s+- podSelector:\n\s+matchLabels:\n\s+app\.kubernetes\.io\/name: gateway\n)\s+ports:/,
    to: '- ports:',
    expect: /NetworkPolicy trading-ingress-from-gateway lets anything reach trading; only the gateway may/,
  },
  {
    name: 'a datastore open to pods outside the fleet (dev overlay)',
    k8s: 'k8s/overlays/dev',
    file: 'k8s/overlays/dev/datastores-networkpolicy.yaml',
    from: 'values: [gateway, market-data]',
    to: 'values: [gateway, market-data, debug-shell]',
    expect: /k8s\/overlays\/dev: NetworkPolicy redis-from-services lets debug-shell reach redis/,
  },
  {
    name: 'a component without an HPA',
    k8s: 'k8s/base',
    file: 'k8s/base/kustomization.yaml',
    from: '  - market-data-hpa.yaml\n',
    to: '',
    expect: /Deployment market-data: no HorizontalPodAutoscaler scales it/,
  },
  {
    name: "an overlay's own resources outside the fleet's namespace (dev's datastores)",
    k8s: 'k8s/overlays/dev',
    file: 'k8s/overlays/dev/kustomization.yaml',
    from: /^namespace: agent-trading\n/m,
    to: '',
    expect: /k8s\/overlays\/dev: documents in 2 namespaces \(.*\(none\).*\): set namespace: in the kustomization/,
  },
  {
    name: 'a KEDA ScaledObject that scales a Deployment the render does not have',
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/components/keda-agent-workers/agent-worker-scaledobject.yaml',
    from: 'kind: Deployment\n    name: agent-worker\n',
    to: 'kind: Deployment\n    name: agent-workers\n',
    expect: /k8s\/overlays\/dev-keda: ScaledObject agent-worker: scales Deployment agent-workers, which is not a Deployment in the render/,
  },
  {
    name: "the agent-worker HPA left beside KEDA's ScaledObject",
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/components/keda-agent-workers/kustomization.yaml',
    from: /\npatches:\n(.*\n)+/,
    to: '\n',
    expect: /dev-keda: ScaledObject agent-worker: HorizontalPodAutoscaler agent-worker scales Deployment agent-worker too/,
  },
  {
    name: 'a KEDA trigger on a consumer the workers do not use',
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/components/keda-agent-workers/agent-worker-scaledobject.yaml',
    from: 'consumer: agent-workers',
    to: 'consumer: agent-worker',
    expect: /trigger 1 \(nats-jetstream\): consumer agent-worker is not the workers' durable consumer agent-workers/,
  },
  {
    name: 'a KEDA trigger on the stream of another NATS_NAMESPACE than the fleet runs with',
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/base/config/shared.env',
    from: 'NATS_NAMESPACE=ats',
    to: 'NATS_NAMESPACE=fleet1',
    expect:
      /dev-keda: ScaledObject agent-worker trigger 1 \(nats-jetstream\): stream ats_agent_jobs is not the agent job stream fleet1_agent_jobs/,
  },
  {
    name: 'a KEDA lagThreshold that is not a positive number',
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/components/keda-agent-workers/agent-worker-scaledobject.yaml',
    from: 'lagThreshold: "20"',
    to: 'lagThreshold: "0"',
    expect: /lagThreshold must be a positive whole number in a string \(jobs per replica\), got "0"/,
  },
  {
    name: 'a KEDA endpoint on a port the NATS Service does not expose',
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/overlays/dev/nats.yaml',
    from: /\n +# \/healthz, \/jsz.*\n.*\n.*\n.*targetPort: monitor/,
    to: '',
    expect:
      /dev-keda: ScaledObject agent-worker trigger 1 \(nats-jetstream\): natsServerMonitoringEndpoint nats\.agent-trading\.svc\.cluster\.local:8222: Service nats does not expose port 8222/,
  },
  {
    name: "KEDA's operator let in beyond NATS's monitoring port",
    k8s: 'k8s/overlays/dev-keda',
    file: 'k8s/overlays/dev-keda/nats-monitoring-networkpolicy.yaml',
    from: 'port: 8222',
    to: 'port: 4222',
    expect: /dev-keda: NetworkPolicy nats-monitoring-from-keda lets keda\/keda-operator reach nats/,
  },
  {
    name: 'a grace period shorter than the drain',
    k8s: 'k8s/base',
    file: 'k8s/base/agent-worker-deployment.yaml',
    from: 'terminationGracePeriodSeconds: 30',
    to: 'terminationGracePeriodSeconds: 10',
    expect: /Deployment agent-worker: terminationGracePeriodSeconds 10 does not cover/,
  },
  {
    name: 'a compose file docker-compose rejects',
    file: 'docker-compose.yml',
    from: '    restart: unless-stopped\n    environment:\n      POSTGRES_USER',
    to: '    restart: unless-stopped\n    environment: [1, 2\n      POSTGRES_USER',
    expect: /docker-compose\.yml: docker-compose config -q: \S/,
  },
  {
    name: 'a compose service without a healthcheck',
    dockerCompose: false,
    file: 'docker-compose.yml',
    from: / {2}redis:\n(.*\n)*? {4}healthcheck:\n( {6}.*\n)+/,
    to: '  redis:\n    image: redis:7-bookworm\n',
    expect: /docker-compose\.yml: service "redis" has no healthcheck/,
  },
  {
    name: 'a compose dependency that does not wait for health',
    dockerCompose: false,
    file: 'docker-compose.yml',
    from: '      trading:\n        condition: service_healthy\n\n  admin:',
    to: '      trading:\n        condition: service_started\n\n  admin:',
    expect: /service "automation" depends on "trading" without condition: service_healthy/,
  },
  // the Dockerfile: each case breaks one target, in its own stage or in one it builds on
  {
    name: "a target whose image runs as root (a USER in the target's own stage)",
    file: 'Dockerfile',
    from: 'COPY --from=build /out/admin ./\n',
    to: 'COPY --from=build /out/admin ./\nUSER root\n',
    expect: /Dockerfile:\d+: target admin: USER root: the container must not run as root/,
  },
  {
    name: 'a target whose image runs as root (a USER in the stage the services build on)',
    file: 'Dockerfile',
    from: /(FROM runtime AS service\n)USER node/,
    to: '$1USER root',
    expect:
      /Dockerfile:\d+: targets admin, agent, automation, market-data, trading, gateway: USER root: the container must not run as root/,
  },
  {
    name: 'a target that runs TypeScript with tsx',
    file: 'Dockerfile',
    from: 'COPY --from=build /out/gateway ./\n',
    to: 'COPY --from=build /out/gateway ./\nCMD ["node", "--import", "tsx", "src/server.ts"]\n',
    expect: /Dockerfile:\d+: target gateway: CMD runs node --import tsx src\/server\.ts: the image runs compiled JavaScript/,
  },
  {
    name: 'a target without a HEALTHCHECK',
    file: 'Dockerfile',
    from: 'COPY --from=build /out/trading ./\n',
    to: 'COPY --from=build /out/trading ./\nHEALTHCHECK NONE\n',
    expect: /Dockerfile:\d+: target trading: no HEALTHCHECK/,
  },
  {
    name: "a target that copies another deployable's package",
    file: 'Dockerfile',
    from: 'COPY --from=build /out/automation ./',
    to: 'COPY --from=build /out/trading ./',
    expect: /Dockerfile:\d+: target automation: deploys @ats\/trading, but automation is @ats\/automation/,
  },
  {
    name: 'a target that builds on the build stage (the whole workspace in the image)',
    file: 'Dockerfile',
    from: 'FROM service AS market-data',
    to: 'FROM build AS market-data',
    expect: /Dockerfile:\d+: target market-data: builds on the build stage/,
  },
  {
    name: 'a deployable without a target',
    file: 'Dockerfile',
    from: 'FROM service AS agent',
    to: 'FROM service AS agents',
    expect: /Dockerfile:1: no stage "agent": every deployable is a target of this Dockerfile/,
  },
  {
    name: 'a Dockerfile with a syntax error',
    file: 'Dockerfile',
    from: 'EXPOSE 8545',
    to: 'EXPOZE 8545',
    expect: /Dockerfile:\d+: dockerfile-utils: Unknown instruction: EXPOZE/,
  },
  {
    name: 'a compose service that builds another target',
    dockerCompose: false,
    file: 'docker-compose.yml',
    from: 'build: { context: ., target: admin }',
    to: 'build: { context: ., target: trading }',
    expect: /docker-compose\.yml: service "admin" must build target admin of the root Dockerfile/,
  },
  // least privilege (src/access.ts)
  {
    name: "a Deployment reading another component's NATS credentials",
    k8s: 'k8s/base',
    file: 'k8s/base/market-data-deployment.yaml',
    from: 'key: NATS_URL_MARKET_DATA',
    to: 'key: NATS_URL_TRADING',
    expect: /k8s\/base: Deployment market-data: NATS_URL must come from the Secret key NATS_URL_MARKET_DATA/,
  },
  {
    name: 'compose connecting a service to Postgres as the superuser',
    dockerCompose: false,
    file: 'docker-compose.yml',
    from: 'DATABASE_URL: postgresql://ats_trading:',
    to: 'DATABASE_URL: postgresql://postgres:',
    expect: /docker-compose\.yml: trading's DATABASE_URL must use its own role ats_trading/,
  },
  {
    name: 'the dev overlay running NATS without the authorization file',
    k8s: 'k8s/overlays/dev',
    file: 'k8s/overlays/dev/nats.yaml',
    from: '"-c", "/etc/nats/authorization.conf", ',
    to: '',
    expect: /k8s\/overlays\/dev: StatefulSet nats: nats-server must run with -c/,
  },
  {
    name: 'a generated authorization file edited by hand (or not regenerated)',
    k8s: 'k8s/overlays/dev',
    file: 'k8s/overlays/dev/access/nats-authorization.conf',
    from: '"ats.admin.keys.verify"',
    to: '"ats.>"',
    expect: /nats-authorization\.conf: not what the contracts and the fleet generate now; run pnpm access:config/,
  },
]

for (const c of cases) {
  t.test(`fails on ${c.name}`, async (t) => {
    const root = copyOfDeployFiles(t)
    edit(root, c.file, c.from, c.to)
    const { problems } = await checkDeployment(root, repo, { k8s: c.k8s ? [c.k8s] : undefined, dockerCompose: c.dockerCompose })
    t.ok(problems.length > 0, 'the check fails')
    t.match(problems.join('\n'), c.expect)
  })
}

t.test('the CLI exits 1 and lists the problem', async (t) => {
  const { spawnSync } = await import('node:child_process')
  const root = copyOfDeployFiles(t)
  edit(root, 'k8s/base/admin-hpa.yaml', 'averageUtilization: 70', 'averageUtilization: "seventy"')
  const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.ts')
  // only k8s/base rendered, where the edit is
  const run = spawnSync(process.execPath, ['--import', 'tsx', cli, 'k8s/base'], {
    encoding: 'utf8',
    env: { ...process.env, DEPLOY_CHECK_ROOT: root },
  })
  t.equal(run.status, 1)
  t.match(run.stderr, /validate-deploy: \d+ problem\(s\)/)
  t.match(run.stderr, /k8s\/base: HorizontalPodAutoscaler admin: .*averageUtilization/)
  t.notMatch(run.stderr, /k8s\/overlays\//, 'the overlays, which break with base, are not rendered: only the directory named')
})

t.test('fails on a package the code imports at run time but lists only under devDependencies', async (t) => {
  // the code of every workspace package (no node_modules, no dist), with automation's @ats/chain made a dev dependency
  const root = mkdtempSync(join(tmpdir(), 'deploy-check-deps-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  for (const dir of ['gateway', 'services', 'packages']) {
    cpSync(join(repo, dir), join(root, dir), { recursive: true, filter: (source) => !/[/\\](node_modules|dist)$/.test(source) })
  }
  const { deployables } = await import('../src/components.ts')
  const { checkDependencies } = await import('../src/dependencies.ts')
  const { fleet, devnet } = await deployables(repo)
  const check = () => {
    const problems: string[] = []
    checkDependencies(root, [...fleet, devnet], problems, [])
    return problems
  }
  t.same(check(), [], 'the copy passes as it is')
  const file = join(root, 'services/automation/package.json')
  const manifest = JSON.parse(readFileSync(file, 'utf8'))
  manifest.devDependencies['@ats/chain'] = manifest.dependencies['@ats/chain']
  delete manifest.dependencies['@ats/chain']
  writeFileSync(file, JSON.stringify(manifest))
  t.match(
    check().join('\n'),
    /services\/automation\/src\/\S+\.ts: imports @ats\/chain, which @ats\/automation does not list in "dependencies"/,
  )
})
