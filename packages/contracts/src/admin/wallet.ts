import { Type, type Static } from 'typebox'
import { codec } from '../common/messages.ts'
import { EpochMs, StrictObject } from '../common/primitives.ts'

/**
 * The server wallet's kill switch: admin writes it to a JetStream KV bucket of the fleet's
 * namespace (`<ns>-wallet-control`, one key); every trading and automation replica watches it.
 */
export const WalletControl = Type.Object({
  paused: Type.Boolean({
    description: 'true: nothing is spent from the server wallet (swaps, agent swaps, automation runs, launches) until resumed',
  }),
  reason: Type.Union([Type.String({ maxLength: 500 }), Type.Null()], { description: 'why it was paused (null when not paused)' }),
  since: Type.Union([EpochMs('when the current state was set'), Type.Null()], { description: 'null: never paused' }),
  by: Type.Union([Type.String({ maxLength: 64 }), Type.Null()], { description: 'the admin key that set the current state' }),
})
export type WalletControl = Static<typeof WalletControl>
export const walletControlCodec = codec(WalletControl)

/** The one key of the bucket. */
export const walletControlKey = 'server-wallet'

/** The state before anyone paused the wallet. */
export const walletRunning: WalletControl = { paused: false, reason: null, since: null, by: null }

export const PauseWalletBody = StrictObject({
  reason: Type.Optional(Type.String({ minLength: 1, maxLength: 500, description: 'shown in every refusal while paused' })),
})
