// The payment settings: what a paid request costs, the same number where it is charged and where it is recorded.
import { Type } from 'typebox'

/** What the gateway charges and admin records, reports and settles. */
export const paymentSettings = {
  PAYMENT_PRICE: Type.Integer({ minimum: 1, default: 10_000, description: 'price of a paid request in USDC base units (10000 = $0.01)' }),
}
