/** The untyped YAML/JSON values the checks walk, and their guards. */
export type Obj = Record<string, any>
export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)
export const arr = (v: unknown): any[] => (Array.isArray(v) ? v : [])
