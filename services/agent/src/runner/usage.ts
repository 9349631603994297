// Token counts of a run, for `usage` in /v1 answers and job results. A language model reports
// its own; what it does not report, and everything the offline planner does (it has no model),
// is counted with GPT-4o's tokenizer (o200k_base) over the same text.
// The tokenizer's tables are 2.4 MB of JavaScript: loaded on the first count, not with the module
// (the agent API, tests and tools that import the runner never pay for it unless they count).
type Tokenizer = typeof import('gpt-tokenizer/model/gpt-4o')
let tokenizer: Promise<Tokenizer> | undefined
const loadTokenizer = (): Promise<Tokenizer> => (tokenizer ??= import('gpt-tokenizer/model/gpt-4o'))

export interface Usage {
  promptTokens: number
  completionTokens: number
}

type Role = 'system' | 'user' | 'assistant' | 'tool'

/** The tokens of a chat-format conversation (message overhead included) and of an answer. */
export async function countUsage(messages: Array<{ role: Role; content: string | null }>, answer: string): Promise<Usage> {
  const { countTokens, encodeChat } = await loadTokenizer()
  const chat = messages.map((m) => ({ role: m.role === 'tool' ? ('user' as const) : m.role, content: m.content ?? '' }))
  return { promptTokens: encodeChat(chat).length, completionTokens: countTokens(answer) }
}

/** The tokens of a text (a piece of an answer). */
export async function countText(text: string): Promise<number> {
  const { countTokens } = await loadTokenizer()
  return countTokens(text)
}

export const addUsage = (a: Usage, b: Usage): Usage => ({
  promptTokens: a.promptTokens + b.promptTokens,
  completionTokens: a.completionTokens + b.completionTokens,
})
