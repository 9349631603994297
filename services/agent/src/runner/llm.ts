// The runner with a language model: any OpenAI-compatible chat-completions API, in a
// tool-calling loop bounded by a step limit.
import { createHttpClient } from '@ats/service-kit'
import type { Runner, RunInput } from './runner.ts'
import { RunnerError } from './runner.ts'
import type { Toolbox } from './toolbox.ts'
import { addUsage, countUsage, type Usage } from './usage.ts'
import { aborted, ownerWallet } from './tools.ts'

interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  tool_calls?: ToolCall[]
  tool_call_id?: string
}
interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}
interface Completion {
  choices?: Array<{ message?: { content?: string | null; tool_calls?: ToolCall[] }; finish_reason?: string }>
  usage?: { prompt_tokens?: number; completion_tokens?: number }
}

/** The tokens of one turn: as the model reported them, else counted over what was sent and answered. */
function turnUsage(completion: Completion, messages: ChatMessage[], answer: { content?: string | null; tool_calls?: ToolCall[] }): Usage {
  const { prompt_tokens: prompt, completion_tokens: done } = completion.usage ?? {}
  if (Number.isInteger(prompt) && Number.isInteger(done)) return { promptTokens: prompt!, completionTokens: done! }
  const calls = (answer.tool_calls ?? []).map((c) => `${c.function.name}(${c.function.arguments})`).join('\n')
  return countUsage(messages, [answer.content ?? '', calls].filter(Boolean).join('\n'))
}

export interface LlmSettings {
  baseUrl: string
  apiKey: string | undefined
  model: string
  maxSteps: number
  timeoutMs: number
}

const plain = (schema: unknown) => JSON.parse(JSON.stringify(schema)) as Record<string, unknown>

export function systemPrompt(input: RunInput): string {
  const wallet = ownerWallet(input.owner)
  return [
    'You are the agent of the Agent Trading Service: you trade and read DeFi markets on Arbitrum for the user through the tools given.',
    'Amounts in tool arguments are whole tokens ("1.5"), never base units. Use a tool for every number you report; never invent prices or balances.',
    wallet ? `The user's wallet is ${wallet}.` : "The user has no wallet bound: ask for an address when one is needed.",
    'Answer briefly and plainly, with the numbers the tools returned.',
  ].join(' ')
}

export function createLlmRunner(settings: LlmSettings): Runner & { close(): Promise<void> } {
  const client = createHttpClient({
    name: 'the language model',
    baseUrl: settings.baseUrl.replace(/\/+$/, ''),
    timeoutMs: settings.timeoutMs,
    retries: 2,
    ...(settings.apiKey ? { headers: { authorization: `Bearer ${settings.apiKey}` } } : {}),
  })

  return {
    name: `llm:${settings.model}`,
    async run(input: RunInput, toolbox: Toolbox, signal: AbortSignal) {
      const tools = toolbox.definitions.map((t) => ({ type: 'function' as const, function: { name: t.name, description: t.description, parameters: plain(t.parameters) } }))
      const messages: ChatMessage[] = [
        { role: 'system', content: systemPrompt(input) },
        ...(input.instructions ? [{ role: 'system' as const, content: `Instructions from the caller: ${input.instructions}` }] : []),
        ...(input.context === undefined ? [] : [{ role: 'system' as const, content: `Context from the caller (JSON): ${JSON.stringify(input.context)}` }]),
        ...input.history.map((m) => ({ role: m.role, content: m.content })),
        { role: 'user', content: input.prompt },
      ]
      let usage: Usage = { promptTokens: 0, completionTokens: 0 }
      for (let turn = 1; turn <= settings.maxSteps; turn++) {
        const completion = await Promise.race([
          // a completion is not idempotent on the model's side, but repeating one changes nothing of ours
          // the signal ends the request too: a stopping worker does not wait for the model to answer
          client.postJson<Completion>('/chat/completions', { model: settings.model, messages, tools, tool_choice: 'auto' }, { retry: true, signal }),
          aborted(signal),
        ])
        const message = completion?.choices?.[0]?.message
        if (!message) throw new RunnerError('the language model answered without a message')
        usage = addUsage(usage, turnUsage(completion, messages, message))
        const calls = message.tool_calls ?? []
        if (calls.length === 0) return { text: (message.content ?? '').trim(), modelTurns: turn, usage }
        messages.push({ role: 'assistant', content: message.content ?? null, tool_calls: calls })
        for (const call of calls) {
          let args: unknown
          try {
            args = call.function.arguments ? JSON.parse(call.function.arguments) : {}
          } catch {
            messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ error: 'the arguments were not valid JSON' }) })
            continue
          }
          const outcome = await toolbox.call(call.function.name, args)
          messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(outcome.ok ? outcome.output : { error: outcome.error }) })
        }
      }
      throw new RunnerError(`the model did not reach an answer within ${settings.maxSteps} steps (LLM_MAX_STEPS)`)
    },
    close: () => client.close(),
  }
}
