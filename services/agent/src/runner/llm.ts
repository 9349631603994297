// The runner with a language model: any OpenAI-compatible chat-completions API, in a
// tool-calling loop bounded by a step limit. The model's text streams out through `onText` as
// it is produced; the run's text is every turn's text, joined by a blank line.
import { createCompletions, type ChatMessage, type Turn } from './completions.ts'
import { RunnerError, type Runner, type RunInput } from './runner.ts'
import type { Toolbox } from './toolbox.ts'
import { addUsage, countUsage, type Usage } from './usage.ts'
import { ownerWallet } from './tools.ts'

/** The tokens of one turn: as the model reported them, else counted over what was sent and answered. */
function turnUsage(turn: Turn, messages: ChatMessage[]): Promise<Usage> {
  const { prompt_tokens: prompt, completion_tokens: done } = turn.usage ?? {}
  if (Number.isInteger(prompt) && Number.isInteger(done)) return Promise.resolve({ promptTokens: prompt!, completionTokens: done! })
  const calls = turn.toolCalls.map((c) => `${c.function.name}(${c.function.arguments})`).join('\n')
  return countUsage(messages, [turn.content, calls].filter(Boolean).join('\n'))
}

/**
 * The answer's text over a run's turns, as it streams: each turn's text trimmed, the turns'
 * texts joined by a blank line (a turn that ends in tool calls may say something first).
 * Whitespace is held back until text follows it, so what `emit` got, joined, is always `text`.
 */
export function answerText(emit: (text: string) => void = () => undefined) {
  let text = ''
  let held = ''
  let turnStarted = false
  return {
    add(delta: string) {
      let s = held + delta
      if (!turnStarted) s = s.trimStart()
      const body = s.trimEnd()
      held = s.slice(body.length)
      if (body === '') return
      const piece = `${!turnStarted && text !== '' ? '\n\n' : ''}${body}`
      turnStarted = true
      text += piece
      emit(piece)
    },
    endTurn() {
      held = ''
      turnStarted = false
    },
    get text() {
      return text
    },
  }
}

/**
 * The `max_tokens` of a turn of work paid by a credit hold: what the hold still covers after the
 * run so far and this turn's input (counted here with the tokenizer, before it is sent). A hold
 * that does not cover even the input ends the run before the model is asked.
 */
async function outputLimit(input: RunInput, messages: ChatMessage[]): Promise<number | undefined> {
  if (!input.budget) return undefined
  const { promptTokens } = await countUsage(messages, '')
  const limit = input.budget.outputTokens(promptTokens)
  if (limit === 0) throw new RunnerError('the credit held for this request does not cover another model turn')
  return limit
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
    wallet ? `The user's wallet is ${wallet}.` : 'The user has no wallet bound: ask for an address when one is needed.',
    'A swap held for approval is decided by a person other than the requester, never by you: say what waits and who decides it.',
    'Answer briefly and plainly, with the numbers the tools returned.',
  ].join(' ')
}

export function createLlmRunner(settings: LlmSettings): Runner {
  const completions = createCompletions(settings)

  return {
    name: `llm:${settings.model}`,
    async run(input: RunInput, toolbox: Toolbox, signal: AbortSignal) {
      const tools = toolbox.definitions.map((t) => ({
        type: 'function' as const,
        function: { name: t.name, description: t.description, parameters: plain(t.parameters) },
      }))
      const messages: ChatMessage[] = [
        { role: 'system', content: systemPrompt(input) },
        ...(input.instructions ? [{ role: 'system' as const, content: `Instructions from the caller: ${input.instructions}` }] : []),
        ...(input.context === undefined
          ? []
          : [{ role: 'system' as const, content: `Context from the caller (JSON): ${JSON.stringify(input.context)}` }]),
        ...input.history.map((m) => ({ role: m.role, content: m.content })),
        { role: 'user', content: input.prompt },
      ]
      const answer = answerText(input.onText)
      let usage: Usage = { promptTokens: 0, completionTokens: 0 }
      for (let step = 1; step <= settings.maxSteps; step++) {
        const limit = await outputLimit(input, messages)
        // the signal ends the request too: a stopping worker does not wait for the model to answer
        const turn = await completions.complete(
          { model: settings.model, messages, tools, tool_choice: 'auto', ...(limit === undefined ? {} : { max_tokens: limit }) },
          signal,
          (delta) => answer.add(delta),
        )
        answer.endTurn()
        usage = addUsage(usage, await turnUsage(turn, messages))
        input.onUsage?.(usage)
        if (turn.toolCalls.length === 0) return { text: answer.text, modelTurns: step, usage }
        messages.push({ role: 'assistant', content: turn.content || null, tool_calls: turn.toolCalls })
        for (const call of turn.toolCalls) {
          let args: unknown
          try {
            args = call.function.arguments ? JSON.parse(call.function.arguments) : {}
          } catch {
            messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ error: 'the arguments were not valid JSON' }) })
            continue
          }
          const outcome = await toolbox.call(call.function.name, args)
          messages.push({
            role: 'tool',
            tool_call_id: call.id,
            content: JSON.stringify(outcome.ok ? outcome.output : { error: outcome.error }),
          })
        }
      }
      throw new RunnerError(`the model did not reach an answer within ${settings.maxSteps} steps (LLM_MAX_STEPS)`)
    },
  }
}
