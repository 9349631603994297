import type { AddressInfo } from 'node:net'
import { networkInterfaces } from 'node:os'
import { baseTestEnv } from '@ats/service-kit/testing'
import { createService } from '@ats/service-kit'
import t from 'tap'
import { memberEnv } from '../../scripts/services.ts'
import { gatewayService } from '../src/service.ts'

t.test('pnpm start binds the operations port (/ready, /metrics) to loopback; the public port follows HOST', async (t) => {
  const { env } = memberEnv({ name: 'gateway', dir: '', definition: gatewayService }, {}, {})
  t.match(env, { HOST: '0.0.0.0', OPS_HOST: '127.0.0.1' })
  t.equal(memberEnv({ name: 'gateway', dir: '', definition: gatewayService }, {}, { OPS_HOST: '0.0.0.0' }).env.OPS_HOST, '0.0.0.0', 'unless OPS_HOST says otherwise')

  const svc = await createService(gatewayService, { ...(await baseTestEnv(t)), HOST: env.HOST, OPS_HOST: env.OPS_HOST, PORT: '0', OPS_PORT: '0' })
  t.teardown(() => svc.close())
  await svc.listen()
  const ops = svc.ops.server.address() as AddressInfo
  const app = svc.app.server.address() as AddressInfo
  t.equal(ops.address, '127.0.0.1')
  t.equal(app.address, '0.0.0.0')
  t.equal((await fetch(`http://127.0.0.1:${ops.port}/ready`)).status, 200)
  // from another interface of this machine, when it has one: the public port answers, the operations port does not
  const external = Object.values(networkInterfaces())
    .flat()
    .find((entry) => entry?.family === 'IPv4' && !entry.internal)
  if (external) {
    t.equal((await fetch(`http://${external.address}:${app.port}/health`)).status, 200)
    await t.rejects(fetch(`http://${external.address}:${ops.port}/ready`), 'the operations port is not on it')
  }
})

t.test('without OPS_HOST (compose, k8s) the operations port follows HOST, where their probes reach it', async (t) => {
  const svc = await createService(gatewayService, { ...(await baseTestEnv(t)), HOST: '0.0.0.0', PORT: '0', OPS_PORT: '0' })
  t.teardown(() => svc.close())
  await svc.listen()
  t.equal((svc.ops.server.address() as AddressInfo).address, '0.0.0.0')
})
