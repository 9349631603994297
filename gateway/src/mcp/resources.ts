// The MCP server's resources (what an agent reads before it calls tools) and its prompts.
import type { Token } from '@ats/chain'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  McpError,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js'

const tokensResource = {
  uri: 'ats://tokens',
  name: 'tokens',
  description: "The tokens of this deployment's chain (symbol, name, decimals, address): what quotes, swaps and automations take by symbol",
  mimeType: 'application/json',
}

/** The resources, readable by every caller: they hold nothing a key or a payment guards. */
export function registerResources(server: Server, tokens: () => readonly Token[]) {
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: [tokensResource] }))
  server.setRequestHandler(ReadResourceRequestSchema, async ({ params }) => {
    // -32002: the code the MCP specification gives an unknown resource
    if (params.uri !== tokensResource.uri)
      throw new McpError(-32002 as ErrorCode, `unknown resource ${params.uri}: this server has ${tokensResource.uri}`)
    return { contents: [{ uri: tokensResource.uri, mimeType: 'application/json', text: JSON.stringify({ tokens: tokens() }) }] }
  })
}

const swapPrompt = {
  name: 'swap',
  description: "Quote a swap, check its price impact, then execute it from the server wallet under this key's spend policy",
  arguments: [
    { name: 'tokenIn', description: 'the token to sell (a symbol such as USDC, or an address)', required: true },
    { name: 'tokenOut', description: 'the token to buy', required: true },
    { name: 'amount', description: 'how much tokenIn to sell, in whole tokens (e.g. 25.5)', required: true },
  ],
}

/** Prompt templates: the steps of a common task, in the tools' own words. */
export function registerPrompts(server: Server) {
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: [swapPrompt] }))
  server.setRequestHandler(GetPromptRequestSchema, async ({ params }) => {
    if (params.name !== swapPrompt.name)
      throw new McpError(ErrorCode.InvalidParams, `unknown prompt ${params.name}: this server has ${swapPrompt.name}`)
    const { tokenIn, tokenOut, amount } = params.arguments ?? {}
    const missing = swapPrompt.arguments.filter((a) => !params.arguments?.[a.name]).map((a) => a.name)
    if (missing.length) throw new McpError(ErrorCode.InvalidParams, `missing prompt argument ${missing.join(', ')}`)
    const text = [
      `Swap ${amount} ${tokenIn} for ${tokenOut}.`,
      `1. Read the resource ats://tokens for ${tokenIn}'s decimals and convert ${amount} to base units.`,
      '2. Call get_swap_quote with tokenIn, tokenOut and amountIn (base units); report amountOut, the route and priceImpactBps.',
      '3. If exceedsPriceImpactCeiling is true, stop and say so. Otherwise call execute_swap with the same arguments and an idempotencyKey of your choosing; if it fails for lack of an answer, repeat it with the same idempotencyKey.',
      '4. Report the transaction hash, amountOut received and the executionId.',
    ].join('\n')
    return { description: swapPrompt.description, messages: [{ role: 'user', content: { type: 'text', text } }] }
  })
}
