/**
 * A module-loading hook (node:module register) used only by the release checks (contracts.ts):
 * @ats/contracts' NATS channels hold codecs, not the TypeBox schemas they were compiled from, so
 * the module that makes codecs (common/messages, as TypeScript source or as compiled dist/) is
 * loaded with one export more, `schemaOfCodec`: every codec made, mapped to its schema. The
 * contracts themselves are not changed; no process but the checks' loads this hook.
 */
const messagesModule = /\/packages\/contracts\/(src\/common\/messages\.ts|dist\/common\/messages\.js)$/

// `codec` is a function declaration of that module, so this assignment re-points its every caller (endpoint, topic)
const recorder = `
export const schemaOfCodec = new WeakMap()
{
  const made = codec
  codec = (schema) => {
    const compiled = made(schema)
    schemaOfCodec.set(compiled, schema)
    return compiled
  }
}
`

export async function load(url, context, nextLoad) {
  const loaded = await nextLoad(url, context)
  if (!messagesModule.test(new URL(url).pathname)) return loaded
  const source = typeof loaded.source === 'string' ? loaded.source : new TextDecoder().decode(loaded.source)
  return { ...loaded, source: `${source}\n${recorder}` }
}
