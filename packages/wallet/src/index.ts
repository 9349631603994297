// The server wallet's shared rules: its kill switch, the error a paused wallet answers, the payment price.
export { WalletPaused } from './errors.ts'
export { paymentSettings } from './settings.ts'
export { pauseMessage, watchWalletControl, type WalletControlWatch } from './walletControl.ts'
