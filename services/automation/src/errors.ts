// The automation service's error registry: every error it answers with, one code each (ATS_ERR_AUTOMATION_*).
import { createError } from '@ats/service-kit'

/** One more active or paused automation than AUTOMATION_MAX_PER_KEY allows. */
export const AutomationLimit = createError<[string]>('ATS_ERR_AUTOMATION_LIMIT', '%s', 409)
