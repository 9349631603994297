/** What a client sends through the gateway in these tests: an API key, a JSON body, headers. */
export interface JsonRequestInit {
  method?: string
  key?: string
  body?: unknown
  headers?: Record<string, string>
}

/** One request as a client makes it: the key as a Bearer token, the body as JSON; the answer's JSON body parsed (undefined when empty). */
export async function jsonRequest(url: string, init: JsonRequestInit = {}) {
  const res = await fetch(url, {
    method: init.method ?? 'GET',
    headers: {
      ...(init.key ? { authorization: `Bearer ${init.key}` } : {}),
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...init.headers,
    },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as any) : undefined }
}
