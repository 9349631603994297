// The wallet package's errors, declared with the kit's registry function, so the error handler shows them as `{error}`.
import { createError } from '@ats/service-kit'

/** A spend refused because an admin paused the server wallet. */
export const WalletPaused = createError<[string]>('ATS_ERR_WALLET_PAUSED', '%s', 423)
