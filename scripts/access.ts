// `pnpm access:config [dir]`: writes the NATS users and Postgres roles compose and the dev overlay
// use (k8s/overlays/dev/access/), or, for another NATS_NAMESPACE (production), into dir.
// The generation itself is packages/fleet/src/access.ts.
import { writeFile } from 'node:fs/promises'
import { basename, join } from 'node:path'
import { defaultNamespace } from '@ats/contracts'
import { root } from '@ats/fleet'
import { accessConfig, accessFiles } from '@ats/fleet/access'

const files = await accessConfig(process.env.NATS_NAMESPACE || defaultNamespace)
const dir = process.argv[2]
const paths = {
  nats: dir ? join(dir, basename(accessFiles.nats)) : join(root, accessFiles.nats),
  postgres: dir ? join(dir, basename(accessFiles.postgres)) : join(root, accessFiles.postgres),
}
await writeFile(paths.nats, files.nats)
await writeFile(paths.postgres, files.postgres)
process.stdout.write(`wrote ${paths.nats} and ${paths.postgres}\n`)
