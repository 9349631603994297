export * from './tokens.ts'
export * from './networks.ts'
export * from './clients.ts'
export * from './addressBook.ts'
