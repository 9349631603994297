import { JobEvent, agentRoutes } from '@ats/contracts'
import { validateDiscoveryExtension, type DiscoveryExtension } from '@x402/extensions/bazaar'
import t from 'tap'
import type { TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import { discoveryExamples, discoveryFor } from '../src/payments/discovery.ts'

t.test('every paid route has a bazaar extension that x402 validates, with its method and input schema', async (t) => {
  const requests: Array<[keyof typeof discoveryExamples, string, string]> = [
    ['prompt', 'POST', '/agent/prompt'],
    ['job', 'GET', '/agent/job/job_abc'],
    ['cancelJob', 'DELETE', '/agent/job/job_abc'],
    ['jobEvents', 'GET', '/agent/job/job_abc/events'],
    ['thread', 'GET', '/agent/thread/thr_abc'],
    ['skills', 'GET', '/agent/skills'],
  ]
  for (const [name, method, path] of requests) {
    const extensions = discoveryFor(method, path) as { bazaar: DiscoveryExtension & { info: { input: { method: string } }; routeTemplate: string } }
    t.ok(extensions, `${method} ${path}`)
    t.same(validateDiscoveryExtension(extensions.bazaar), { valid: true }, `${name} validates`)
    t.equal(extensions.bazaar.info.input.method, method)
    t.equal(extensions.bazaar.routeTemplate, agentRoutes[name].url)
  }
  const prompt = discoveryFor('POST', '/agent/prompt') as any
  t.match(prompt.bazaar.schema.properties.input.properties.body.properties.prompt, { type: 'string', maxLength: 4000, minLength: 1 })
  t.same(prompt.bazaar.info.output.example, discoveryExamples.prompt.output)
  t.match(prompt.bazaar.info.output.example, { jobId: /^job_/, threadId: /^thr_/, status: 'pending' })
  t.equal(discoveryFor('GET', '/agent/nothing'), undefined, 'a path that is no paid route has none')
  t.equal(discoveryFor('PUT', '/agent/prompt'), undefined)
})

t.test("each output example matches its route's response schema (they cannot drift)", async (t) => {
  const { jobEvents, ...plainJson } = discoveryExamples
  t.ok(Compile(JobEvent.properties.data).Check((jobEvents.output as { data: unknown }).data), 'the event example carries event data of the stream')
  for (const [name, example] of Object.entries(plainJson)) {
    const responses: Record<number, TSchema> = agentRoutes[name as keyof typeof discoveryExamples].schema.response
    const schema = responses[example.status]!
    const check = Compile(schema)
    t.ok(check.Check(example.output), `${name}: ${[...check.Errors(example.output)].map((e) => `${e.instancePath} ${e.message}`).join('; ')}`)
  }
})
