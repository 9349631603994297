// Builds the web console (served by the gateway at /console) into gateway/console-dist/: one
// bundled, minified script (Preact and htm included: nothing is fetched from elsewhere), the
// stylesheet and the page. Run by the gateway's `generate` (pnpm install's postinstall, so a
// fresh checkout and the image's build stage have it) and by hand: node console/build.mjs
import { copyFileSync, mkdirSync } from 'node:fs'
import { build } from 'esbuild'

const here = new URL('.', import.meta.url)
const out = new URL('../console-dist/', import.meta.url)
mkdirSync(out, { recursive: true })
await build({
  entryPoints: [new URL('main.ts', here).pathname],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022'],
  outfile: new URL('app.js', out).pathname,
  legalComments: 'none',
  logLevel: 'warning',
})
for (const file of ['index.html', 'app.css']) copyFileSync(new URL(file, here), new URL(file, out))
