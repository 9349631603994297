// The web console: approvals, revenue, keys, the wallet switch and webhooks, over the API this
// gateway serves. Preact renders, htm writes the markup (no JSX build step); every call carries
// the API key signed in with, kept in this tab's sessionStorage only. A refused action shows the
// API's own `{error}` text.
import htm from 'htm'
import { h, render, type ComponentChildren } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'

const html = htm.bind(h)
const KEY_STORAGE = 'ats-console-key'

// ---------------------------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

/** an API answer, read field by field as docs/openapi.json documents it */
type Json = any

async function api(path: string, init: { method?: string; body?: unknown; key?: string } = {}): Promise<Json> {
  const key = init.key ?? sessionStorage.getItem(KEY_STORAGE) ?? ''
  const headers: Record<string, string> = { authorization: `Bearer ${key}` }
  if (init.body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(path, {
    method: init.method ?? 'GET',
    headers,
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
  })
  const text = await res.text()
  let body: Json
  try {
    body = text ? JSON.parse(text) : undefined
  } catch {
    body = undefined
  }
  if (!res.ok) throw new ApiError(res.status, typeof body?.error === 'string' ? body.error : `${res.status} ${res.statusText}`)
  return body
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** `load` now and every `everyMs` (0: once), again when `deps` change; `reload` asks at once. */
function usePoll<T>(load: () => Promise<T>, everyMs: number, deps: unknown[] = []) {
  const [data, setData] = useState<T | undefined>(undefined)
  const [error, setError] = useState<string | undefined>(undefined)
  const loadRef = useRef(load)
  loadRef.current = load
  const reload = useCallback(async () => {
    try {
      setData(await loadRef.current())
      setError(undefined)
    } catch (e) {
      setError(messageOf(e))
    }
  }, [])
  useEffect(() => {
    void reload()
    if (!everyMs) return
    const timer = setInterval(() => void reload(), everyMs)
    return () => clearInterval(timer)
  }, deps)
  return { data, error, reload }
}

// ---------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------

const when = (ms: number | null | undefined) => (ms ? new Date(ms).toLocaleString() : '—')

function inMinutes(ms: number) {
  const minutes = Math.round((ms - Date.now()) / 60_000)
  if (minutes <= 0) return 'now'
  return minutes < 90 ? `in ${minutes} min` : `in ${Math.round(minutes / 60)} h`
}

/** USDC base units (6 decimals) as dollars: "1234567" -> "$1.23" */
function usdc(baseUnits: string | bigint) {
  const n = BigInt(baseUnits)
  const cents = (n + 5_000n) / 10_000n
  return `$${cents / 100n}.${String(cents % 100n).padStart(2, '0')}`
}

/**
 * The decimals of the address book's tokens by symbol (a symbol in a swap names the address
 * book's token of that symbol, never another contract); amounts of other tokens stay in base units.
 */
const decimalsOf: Record<string, number> = { USDC: 6, 'USDC.e': 6, USDT: 6, WBTC: 8, WETH: 18, ETH: 18, ARB: 18, GMX: 18, LINK: 18 }

/** `baseUnits` of `token` for people: "50000000" USDC -> "50 USDC"; unknown decimals: "123 base units of 0x…" */
function amount(baseUnits: string, token: string) {
  const decimals = decimalsOf[token]
  if (decimals === undefined) return `${baseUnits} base units of ${token}`
  const n = BigInt(baseUnits)
  const unit = 10n ** BigInt(decimals)
  const fraction = (n % unit).toString().padStart(decimals, '0').slice(0, 6).replace(/0+$/, '')
  return `${n / unit}${fraction ? `.${fraction}` : ''} ${token}`
}

const usd = (n: number | null | undefined) =>
  n === null || n === undefined ? 'unknown' : `$${n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`
const bps = (n: number) => `${(n / 100).toFixed(2)}%`

function duration(ms: number) {
  if (ms < 1_000) return `${ms} ms`
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`
  return `${Math.round(ms / 3_600_000)} h`
}

// ---------------------------------------------------------------------------------------------
// Small parts
// ---------------------------------------------------------------------------------------------

/** What an action said: its notice (status) or the API's error (alert), read out by screen readers. */
function Outcome({ notice, error }: { notice?: string | undefined; error?: string | undefined }) {
  return html`<p role="status" class="notice">${notice ?? ''}</p>
    <p role="alert" class="error">${error ?? ''}</p>`
}

/** Runs an action: busy while it runs, its notice or the API's error after. */
function useAction() {
  const [busy, setBusy] = useState(false)
  const [notice, setNotice] = useState<string | undefined>(undefined)
  const [error, setError] = useState<string | undefined>(undefined)
  const run = async (action: () => Promise<string | undefined>) => {
    setBusy(true)
    setNotice(undefined)
    setError(undefined)
    try {
      setNotice(await action())
    } catch (e) {
      setError(messageOf(e))
    } finally {
      setBusy(false)
    }
  }
  return { busy, notice, error, run }
}

/** A state in words, coloured by `tone` (one of the stylesheet's badge colours; the state's own by default). */
function Badge({ state, tone = state }: { state: string; tone?: string }) {
  return html`<span class=${`badge ${tone}`}>${state}</span>`
}

function Facts({ rows }: { rows: Array<[string, ComponentChildren]> }) {
  return html`<dl class="facts">
    ${rows.map(([term, value]) => html`<dt>${term}</dt><dd>${value}</dd>`)}
  </dl>`
}

// ---------------------------------------------------------------------------------------------
// Sign-in
// ---------------------------------------------------------------------------------------------

function SignIn({ onSignedIn }: { onSignedIn: (key: string) => void }) {
  const [key, setKey] = useState('')
  const { busy, error, run } = useAction()
  const submit = (event: Event) => {
    event.preventDefault()
    void run(async () => {
      // a key that may list approvals: an admin key, or one a spend policy names as an approver
      await api('/approvals?limit=1', { key: key.trim() })
      sessionStorage.setItem(KEY_STORAGE, key.trim())
      onSignedIn(key.trim())
      return undefined
    })
  }
  return html`<main class="signin">
    <h1>Agent Trading Service console</h1>
    <p>Sign in with an API key: an admin key, or a key allowed to approve swaps. It is kept in this tab only, until you sign out or close it.</p>
    <form onSubmit=${submit}>
      <label for="api-key">API key</label>
      <input id="api-key" name="api-key" type="password" autocomplete="off" required value=${key}
        onInput=${(e: Event) => setKey((e.target as HTMLInputElement).value)} />
      <div class="actions"><button class="primary" type="submit" disabled=${busy}>Sign in</button></div>
    </form>
    <${Outcome} error=${error} />
  </main>`
}

// ---------------------------------------------------------------------------------------------
// Approvals
// ---------------------------------------------------------------------------------------------

function FreshQuote({ swap }: { swap: Json }) {
  const query = new URLSearchParams({
    tokenIn: swap.tokenInAddress,
    tokenOut: swap.tokenOutAddress,
    amountIn: swap.amountIn,
    dex: swap.dex,
  })
  const { data, error } = usePoll(() => api(`/swap/quote?${query}`), 15_000, [swap.tokenInAddress, swap.tokenOutAddress, swap.amountIn])
  if (error) return html`<span class="error">no fresh quote: ${error}</span>`
  if (!data) return html`<span>quoting…</span>`
  return html`<span>${amount(data.amountOut, swap.tokenOut)}, price impact ${bps(data.priceImpactBps)}, block ${data.blockNumber}</span>`
}

function ApprovalCard({ approval, focused, onDecided }: { approval: Json; focused: boolean; onDecided: (notice: string) => void }) {
  const a = approval
  const [reason, setReason] = useState('')
  const { busy, notice, error, run } = useAction()
  const approve = () =>
    run(async () => {
      const decided = await api(`/approvals/${a.id}/approve`, { method: 'POST' })
      const notice = decided.result
        ? `Approved ${a.id}: the swap was mined in transaction ${decided.result.hash}`
        : `Approved ${a.id} (${decided.status})${decided.error ? `: ${decided.error}` : ''}`
      // the card leaves the pending list: the page keeps the notice
      onDecided(notice)
      return notice
    })
  const reject = (event: Event) => {
    event.preventDefault()
    void run(async () => {
      await api(`/approvals/${a.id}/reject`, { method: 'POST', body: reason.trim() ? { reason: reason.trim() } : {} })
      const notice = `Rejected ${a.id}: nothing was sent`
      onDecided(notice)
      return notice
    })
  }
  const asked = a.requestedBy.keyId ? `key ${a.requestedBy.keyId}` : a.requestedBy.ownerId ? `payer ${a.requestedBy.ownerId}` : 'unknown'
  const behind = a.requestedBy.jobId
    ? `job ${a.requestedBy.jobId}`
    : a.requestedBy.automationRunId
      ? `automation run ${a.requestedBy.automationRunId}`
      : 'a direct swap'
  const pending = a.status === 'pending'
  return html`<article class=${`card${focused ? ' highlight' : ''}`} aria-labelledby=${`${a.id}-title`} data-approval=${a.id}>
    <h3 id=${`${a.id}-title`}>
      Swap ${amount(a.swap.amountIn, a.swap.tokenIn)} for ${a.swap.tokenOut} <${Badge} state=${a.status} />
    </h3>
    <${Facts}
      rows=${[
        ['Approval', a.id],
        [
          'Amount in',
          `${amount(a.swap.amountIn, a.swap.tokenIn)}${a.swap.from ? `, from wallet ${a.swap.from}` : ', from the server wallet'}`,
        ],
        ['USD value', usd(a.quote.usdValue)],
        ['Quoted when asked', `${amount(a.quote.amountOut, a.swap.tokenOut)}, price impact ${bps(a.quote.priceImpactBps)}`],
        ...(pending ? [['Fresh quote', html`<${FreshQuote} swap=${a.swap} />`] as [string, ComponentChildren]] : []),
        ['Why it waits', a.reason],
        ['Asked by', `${asked}, for ${behind}`],
        ['Asked at', when(a.createdAt)],
        pending
          ? ['Expires', `${when(a.expiresAt)} (${inMinutes(a.expiresAt)})`]
          : ['Decided', `${when(a.decidedAt)} by ${a.decidedBy ?? '—'}${a.decisionReason ? `: ${a.decisionReason}` : ''}`],
        ...(a.result
          ? [['Swap', `mined in ${a.result.hash}, received ${amount(a.result.amountOut, a.swap.tokenOut)}`] as [string, ComponentChildren]]
          : []),
        ...(a.error ? [['Error', a.error] as [string, ComponentChildren]] : []),
      ]}
    />
    ${
      pending &&
      html`<form class="actions" onSubmit=${reject}>
        <button type="button" class="primary" disabled=${busy} onClick=${approve}>Approve</button>
        <div>
          <label for=${`${a.id}-reason`}>Reason to reject <span class="hint">optional, shown to whoever asked</span></label>
          <input id=${`${a.id}-reason`} maxLength=${500} value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} />
        </div>
        <button type="submit" class="danger" disabled=${busy}>Reject</button>
      </form>`
    }
    <${Outcome} notice=${notice} error=${error} />
  </article>`
}

function ApprovalsPage({ focusId }: { focusId?: string | undefined }) {
  const pending = usePoll(() => api('/approvals?status=pending&limit=100'), 3_000)
  // the one a link opened, whatever became of it (decided elsewhere: shown so)
  const focused = usePoll(() => (focusId ? api(`/approvals/${focusId}`) : Promise.resolve(undefined)), focusId ? 3_000 : 0, [focusId])
  const list: Json[] = pending.data?.approvals ?? []
  const focusDecided = focused.data && focused.data.status !== 'pending' ? focused.data : undefined
  const [decisions, setDecisions] = useState<string[]>([])
  const reload = (notice?: string) => {
    if (notice) setDecisions((before) => [notice, ...before].slice(0, 5))
    void pending.reload()
    void focused.reload()
  }
  return html`<section aria-labelledby="approvals-title">
    <h2 id="approvals-title">Approvals</h2>
    <p>Swaps waiting for a person's decision. The list refreshes every few seconds: one decided elsewhere leaves it.</p>
    <${Outcome} error=${pending.error ?? focused.error} />
    <ul role="status" aria-label="Decided here" class="notice">${decisions.map((d) => html`<li>${d}</li>`)}</ul>
    ${focusDecided && html`<${ApprovalCard} approval=${focusDecided} focused=${true} onDecided=${reload} />`}
    ${pending.data && list.length === 0 && html`<p>Nothing waits for a decision.</p>`}
    ${list.map((a) => html`<${ApprovalCard} key=${a.id} approval=${a} focused=${a.id === focusId} onDecided=${reload} />`)}
  </section>`
}

// ---------------------------------------------------------------------------------------------
// Revenue
// ---------------------------------------------------------------------------------------------

function HistoryChart({ history }: { history: Json[] }) {
  const width = 600
  const height = 200
  const bottom = 24
  const max = history.reduce((m, d) => (BigInt(d.totalUsdc) > m ? BigInt(d.totalUsdc) : m), 0n)
  const bar = width / Math.max(1, history.length)
  const total = history.reduce((sum, d) => sum + BigInt(d.totalUsdc), 0n)
  return html`<figure>
    <svg class="chart" viewBox=${`0 0 ${width} ${height}`} role="img" aria-label=${`Revenue per day over the last ${history.length} days, ${usdc(total)} in all`}>
      ${history.map((d, i) => {
        const value = BigInt(d.totalUsdc)
        const barHeight = max === 0n ? 0 : Number((value * BigInt(height - bottom - 10)) / max)
        return html`<rect x=${i * bar + 1} y=${height - bottom - barHeight} width=${Math.max(1, bar - 2)} height=${barHeight}>
          <title>${d.date}: ${d.totalUsd}, ${d.count} payments</title>
        </rect>`
      })}
      ${history.length > 0 && html`<text x="0" y=${height - 6}>${history[0].date}</text>`}
      ${history.length > 1 && html`<text x=${width} y=${height - 6} text-anchor="end">${history[history.length - 1].date}</text>`}
      <text x="0" y="12">${max === 0n ? 'no payments' : `max ${usdc(max)} a day`}</text>
    </svg>
    <figcaption>Revenue per UTC day (settled and to be settled), last ${history.length} days.</figcaption>
  </figure>`
}

function RevenuePage() {
  const summary = usePoll(() => api('/admin/revenue'), 5_000)
  const history = usePoll(() => api('/admin/revenue/history?days=30'), 30_000)
  const r = summary.data
  const s = r?.settlements
  return html`<section aria-labelledby="revenue-title">
    <h2 id="revenue-title">Revenue</h2>
    <${Outcome} error=${summary.error ?? history.error} />
    ${
      r &&
      html`<div class="totals">
        <div class="card"><span>Earned</span><strong>${r.totalUsd}</strong>${r.requestCount} paid requests, ${r.uniquePayers} payers</div>
        ${
          s &&
          ['settled', 'pending', 'settling', 'failed', 'voided', 'skipped'].map(
            (state) =>
              html`<div class="card" data-state=${state}><span><${Badge} state=${state} /></span><strong>${s[state].count}</strong>${usdc(s[state].totalUsdc)}</div>`,
          )
        }
        ${
          r.backlog &&
          html`<div class="card"><span>Settlement backlog</span><strong>${r.backlog.count}</strong>${
            r.backlog.count ? `oldest waits ${duration(r.backlog.lagMs)}` : 'nothing waits'
          }</div>`
        }
      </div>`
    }
    ${history.data && html`<${HistoryChart} history=${history.data.history} />`}
    ${
      r &&
      html`<h3>Latest payments</h3>
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Paid</th><th scope="col">Payer</th><th scope="col">Route</th><th scope="col">Amount</th><th scope="col">Settlement</th></tr></thead>
          <tbody>
            ${r.recentPayments.map(
              (p: Json) => html`<tr data-request-id=${p.requestId}>
                <td>${when(p.paidAt)}</td><td>${p.payer}</td><td>${p.route}</td><td>${usdc(p.amount)}</td>
                <td><${Badge} state=${p.settlement} />${p.txHash ? html` <span class="hint">${p.txHash}</span>` : ''}${p.settleError || p.voidReason ? html` <span class="hint">${p.settleError ?? p.voidReason}</span>` : ''}</td>
              </tr>`,
            )}
          </tbody>
        </table></div>
        ${r.recentPayments.length === 0 && html`<p>No payments yet.</p>`}`
    }
  </section>`
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/** The spend-policy fields the console edits, with what each means. */
const policyFields = [
  ['maxUsdPerSwap', 'Most per swap (USD)', 'the most one swap may spend, in dollars', 'number'],
  ['maxUsdPerDay', 'Most per day (USD)', 'the most all swaps of this key may spend together in one UTC day', 'number'],
  ['approvalAboveUsd', 'Approval above (USD)', 'a swap worth more than this waits for a person to approve it here', 'number'],
  ['maxPriceImpactBps', 'Highest price impact (bps)', '100 bps = 1%; a swap above it is refused before anything is sent', 'integer'],
  ['allowedTokens', 'Allowed tokens', 'comma-separated symbols or addresses; both tokens of a swap must be listed (empty: any)', 'list'],
  ['approvers', 'Approvers', 'comma-separated key ids that may approve this key’s held swaps, besides admin keys', 'list'],
] as const

type PolicyDraft = Record<(typeof policyFields)[number][0], string>

const draftOf = (policy: Json): PolicyDraft =>
  Object.fromEntries(
    policyFields.map(([name, , , kind]) => {
      const value = policy?.[name]
      return [name, value === undefined || value === null ? '' : kind === 'list' ? value.join(', ') : String(value)]
    }),
  ) as PolicyDraft

/** The policy a draft makes (null: none), or the field that is wrong. */
function policyOf(draft: PolicyDraft): Json {
  const policy: Json = {}
  for (const [name, label, , kind] of policyFields) {
    const raw = draft[name].trim()
    if (!raw) continue
    if (kind === 'list')
      policy[name] = raw
        .split(',')
        .map((t) => t.trim())
        .filter(Boolean)
    else {
      const n = Number(raw)
      if (!Number.isFinite(n) || (kind === 'integer' && !Number.isInteger(n)))
        throw new Error(`${label}: "${raw}" is not a ${kind === 'integer' ? 'whole ' : ''}number`)
      policy[name] = n
    }
  }
  return Object.keys(policy).length ? policy : null
}

/**
 * The policy to save for a key: the draft's fields, and the fields the console does not edit
 * (maxLaunchesPerDay, selfApprove, allowedRecipients) kept as the key has them; null: none.
 */
function editedPolicy(existing: Json, draft: PolicyDraft): Json {
  const kept = Object.fromEntries(Object.entries(existing ?? {}).filter(([name]) => !policyFields.some(([field]) => field === name)))
  const policy = { ...kept, ...policyOf(draft) }
  return Object.keys(policy).length ? policy : null
}

function PolicyFields({ idPrefix, draft, onChange }: { idPrefix: string; draft: PolicyDraft; onChange: (d: PolicyDraft) => void }) {
  return html`<fieldset>
    <legend>Spend policy <span class="hint">empty fields are not limited; readwrite and admin keys only</span></legend>
    ${policyFields.map(
      ([name, label, hint]) => html`<div>
        <label for=${`${idPrefix}-${name}`}>${label} <span class="hint" id=${`${idPrefix}-${name}-hint`}>${hint}</span></label>
        <input id=${`${idPrefix}-${name}`} aria-describedby=${`${idPrefix}-${name}-hint`} value=${draft[name]}
          onInput=${(e: Event) => onChange({ ...draft, [name]: (e.target as HTMLInputElement).value })} />
      </div>`,
    )}
  </fieldset>`
}

function KeyRow({ apiKey, onChanged }: { apiKey: Json; onChanged: (notice?: string) => Promise<void> }) {
  const [editing, setEditing] = useState(false)
  const [draft, setDraft] = useState<PolicyDraft>(draftOf(apiKey.policy))
  const { busy, notice, error, run } = useAction()
  const revoke = () =>
    run(async () => {
      if (!window.confirm(`Revoke key ${apiKey.id} (${apiKey.label})? Every gateway refuses it within a second; this cannot be undone.`))
        return undefined
      await api(`/admin/keys/${apiKey.id}`, { method: 'DELETE' })
      // the row leaves the list: the page says it, once the list no longer shows it
      await onChanged(`Key ${apiKey.id} (${apiKey.label}) revoked`)
      return undefined
    })
  const save = (event: Event) => {
    event.preventDefault()
    void run(async () => {
      await api(`/admin/keys/${apiKey.id}/policy`, { method: 'PUT', body: { policy: editedPolicy(apiKey.policy, draft) } })
      setEditing(false)
      await onChanged()
      return `Policy of ${apiKey.id} saved`
    })
  }
  const policy = apiKey.policy
    ? Object.entries(apiKey.policy)
        .map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(', ') : v}`)
        .join('; ')
    : 'none'
  return html`<article class="card" data-key=${apiKey.id} aria-labelledby=${`${apiKey.id}-title`}>
    <h3 id=${`${apiKey.id}-title`}>${apiKey.label} <span class="badge">${apiKey.tier}</span></h3>
    <${Facts} rows=${[
      ['Id', apiKey.id],
      ['Starts with', apiKey.prefix],
      ['Created', when(apiKey.createdAt)],
      ['Bound to wallet', apiKey.wallet ?? '—'],
      ['Spend policy', policy],
    ]} />
    <div class="actions">
      ${apiKey.tier !== 'readonly' && html`<button type="button" aria-expanded=${editing} onClick=${() => setEditing(!editing)}>Edit policy</button>`}
      <button type="button" class="danger" disabled=${busy} onClick=${revoke}>Revoke</button>
    </div>
    ${
      editing &&
      html`<form onSubmit=${save}>
        <${PolicyFields} idPrefix=${apiKey.id} draft=${draft} onChange=${setDraft} />
        <div class="actions"><button class="primary" type="submit" disabled=${busy}>Save policy</button></div>
      </form>`
    }
    <${Outcome} notice=${notice} error=${error} />
  </article>`
}

function KeysPage() {
  const keys = usePoll(() => api('/admin/keys'), 0)
  const [tier, setTier] = useState('readwrite')
  const [label, setLabel] = useState('')
  const [wallet, setWallet] = useState('')
  const [draft, setDraft] = useState<PolicyDraft>(draftOf(null))
  const [created, setCreated] = useState<Json>(undefined)
  const [revoked, setRevoked] = useState<string | undefined>(undefined)
  const { busy, error, run } = useAction()
  const changed = async (notice?: string) => {
    await keys.reload()
    setRevoked(notice)
  }
  const create = (event: Event) => {
    event.preventDefault()
    void run(async () => {
      const policy = policyOf(draft)
      const body: Json = { tier, label: label.trim() }
      if (policy && tier !== 'readonly') body.policy = policy
      if (wallet.trim()) body.wallet = wallet.trim()
      setCreated(await api('/admin/keys', { method: 'POST', body }))
      setLabel('')
      setWallet('')
      setDraft(draftOf(null))
      void keys.reload()
      return undefined
    })
  }
  return html`<section aria-labelledby="keys-title">
    <h2 id="keys-title">API keys</h2>
    <details class="card" open=${!keys.data?.keys?.length}>
      <summary>Create a key</summary>
      <form onSubmit=${create}>
        <label for="new-tier">Tier <span class="hint">readonly reads; readwrite also trades; admin also runs the fleet</span></label>
        <select id="new-tier" value=${tier} onChange=${(e: Event) => setTier((e.target as HTMLSelectElement).value)}>
          <option value="readonly">readonly</option><option value="readwrite">readwrite</option><option value="admin">admin</option>
        </select>
        <label for="new-label">Label <span class="hint">who or what uses it (1 to 64 characters)</span></label>
        <input id="new-label" required maxLength=${64} value=${label} onInput=${(e: Event) => setLabel((e.target as HTMLInputElement).value)} />
        <label for="new-wallet">Wallet <span class="hint">optional: bind the key to a user's wallet (0x…)</span></label>
        <input id="new-wallet" value=${wallet} onInput=${(e: Event) => setWallet((e.target as HTMLInputElement).value)} />
        ${tier !== 'readonly' && html`<${PolicyFields} idPrefix="new" draft=${draft} onChange=${setDraft} />`}
        <div class="actions"><button class="primary" type="submit" disabled=${busy}>Create key</button></div>
      </form>
      <${Outcome} error=${error} />
    </details>
    ${
      created &&
      html`<div class="card highlight" role="region" aria-label="The new key">
        <p><strong>Key ${created.id} created.</strong> Copy it now: it is shown this once and cannot be read again.</p>
        <p class="secret" data-raw-key>${created.key}</p>
        <button type="button" onClick=${() => setCreated(undefined)}>I have copied it</button>
      </div>`
    }
    <${Outcome} notice=${revoked} error=${keys.error} />
    ${(keys.data?.keys ?? []).map((k: Json) => html`<${KeyRow} key=${k.id} apiKey=${k} onChanged=${changed} />`)}
  </section>`
}

// ---------------------------------------------------------------------------------------------
// Wallet
// ---------------------------------------------------------------------------------------------

function WalletPage() {
  const wallet = usePoll(() => api('/admin/wallet'), 5_000)
  const [reason, setReason] = useState('')
  const { busy, notice, error, run } = useAction()
  const w = wallet.data
  const pause = (event: Event) => {
    event.preventDefault()
    void run(async () => {
      if (!window.confirm('Pause every spend from the server wallet (swaps, agent swaps, automation runs, launches)?')) return undefined
      await api('/admin/wallet/pause', { method: 'POST', body: { reason: reason.trim() } })
      setReason('')
      await wallet.reload()
      return 'The server wallet is paused'
    })
  }
  const resume = () =>
    run(async () => {
      if (!window.confirm('Resume spends from the server wallet?')) return undefined
      await api('/admin/wallet/resume', { method: 'POST' })
      await wallet.reload()
      return 'The server wallet spends again'
    })
  return html`<section aria-labelledby="wallet-title">
    <h2 id="wallet-title">Server wallet</h2>
    <${Outcome} error=${wallet.error} />
    ${
      w &&
      html`<div class="card">
        <p>Spending is <${Badge} state=${w.paused ? 'paused' : 'running'} /></p>
        <${Facts} rows=${[['Why', w.reason ?? '—'], ['Since', when(w.since)], ['By', w.by ?? '—']]} />
        ${
          w.paused
            ? html`<div class="actions"><button type="button" class="primary" disabled=${busy} onClick=${resume}>Resume spending</button></div>`
            : html`<form onSubmit=${pause}>
                <label for="pause-reason">Reason <span class="hint">shown in every refusal while paused</span></label>
                <input id="pause-reason" required maxLength=${500} value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} />
                <div class="actions"><button type="submit" class="danger" disabled=${busy}>Pause spending</button></div>
              </form>`
        }
      </div>`
    }
    <${Outcome} notice=${notice} error=${error} />
  </section>`
}

// ---------------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------------

function Deliveries({ webhookId }: { webhookId: string }) {
  const deliveries = usePoll(() => api(`/webhooks/${webhookId}/deliveries`), 5_000)
  const { busy, notice, error, run } = useAction()
  const redeliver = (id: string) =>
    run(async () => {
      await api(`/webhooks/${webhookId}/deliveries/${id}/redeliver`, { method: 'POST' })
      await deliveries.reload()
      return `Delivery ${id} queued again`
    })
  const list: Json[] = deliveries.data?.deliveries ?? []
  const count = (status: string) => list.filter((d) => d.status === status).length
  return html`<div>
    <${Outcome} notice=${notice} error=${error ?? deliveries.error} />
    ${deliveries.data && list.length === 0 && html`<p>No deliveries yet.</p>`}
    ${
      list.length > 0 &&
      html`<p>The latest ${list.length}: ${count('failed')} failed, ${count('pending')} being tried, ${count('cancelled')} cancelled.</p>`
    }
    ${
      list.length > 0 &&
      html`<div class="table-wrap"><table>
        <thead><tr><th scope="col">Event</th><th scope="col">Status</th><th scope="col">Tries</th><th scope="col">Last answer</th><th scope="col"><span class="skip">Action</span></th></tr></thead>
        <tbody>${list.map(
          (d) => html`<tr>
            <td>${d.eventType}<br /><span class="hint">${when(d.createdAt)}</span></td>
            <td><${Badge} state=${d.status} tone=${d.status === 'succeeded' ? 'settled' : d.status} /></td>
            <td>${d.attempts}</td>
            <td>${d.lastAttempt ? `${d.lastAttempt.status ?? ''} ${d.lastAttempt.error ?? ''}` : '—'}${d.cancelReason ? html`<br /><span class="hint">${d.cancelReason}</span>` : ''}</td>
            <td><button type="button" disabled=${busy} onClick=${() => redeliver(d.id)} aria-label=${`Redeliver ${d.eventType} ${d.id}`}>Redeliver</button></td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
  </div>`
}

function WebhookCard({ webhook }: { webhook: Json }) {
  const [open, setOpen] = useState(false)
  const { busy, notice, error, run } = useAction()
  const test = () =>
    run(async () => {
      const sent = await api(`/webhooks/${webhook.id}/test`, { method: 'POST' })
      return sent.delivered
        ? `Test event delivered: the receiver answered ${sent.status} in ${sent.durationMs} ms`
        : `Test event not delivered: ${sent.error ?? `the receiver answered ${sent.status}`}`
    })
  return html`<article class="card" aria-labelledby=${`${webhook.id}-title`}>
    <h3 id=${`${webhook.id}-title`}>${webhook.url} <${Badge} state=${webhook.enabled ? 'running' : 'paused'} /></h3>
    <${Facts} rows=${[
      ['Id', webhook.id],
      ['Events', webhook.events.join(', ')],
      ['Description', webhook.description ?? '—'],
      ...(webhook.enabled ? [] : [['Disabled because', webhook.disabledReason ?? '—'] as [string, ComponentChildren]]),
      ['Created', when(webhook.createdAt)],
    ]} />
    <div class="actions">
      <button type="button" disabled=${busy} onClick=${test}>Send a test event</button>
      <button type="button" aria-expanded=${open} onClick=${() => setOpen(!open)}>${open ? 'Hide deliveries' : 'Show deliveries'}</button>
    </div>
    <${Outcome} notice=${notice} error=${error} />
    ${open && html`<${Deliveries} webhookId=${webhook.id} />`}
  </article>`
}

function WebhooksPage() {
  const webhooks = usePoll(() => api('/webhooks'), 10_000)
  const list: Json[] = webhooks.data?.webhooks ?? []
  return html`<section aria-labelledby="webhooks-title">
    <h2 id="webhooks-title">Webhooks</h2>
    <${Outcome} error=${webhooks.error} />
    ${webhooks.data && list.length === 0 && html`<p>No subscriptions. Create one with POST /webhooks (docs/webhooks.md).</p>`}
    ${list.map((w) => html`<${WebhookCard} key=${w.id} webhook=${w} />`)}
  </section>`
}

// ---------------------------------------------------------------------------------------------
// The shell
// ---------------------------------------------------------------------------------------------

const pages = [
  ['approvals', 'Approvals', false],
  ['revenue', 'Revenue', true],
  ['keys', 'Keys', true],
  ['wallet', 'Wallet', true],
  ['webhooks', 'Webhooks', false],
] as const

function App() {
  const [key, setKey] = useState(sessionStorage.getItem(KEY_STORAGE))
  const [hash, setHash] = useState(location.hash)
  const [admin, setAdmin] = useState<boolean | undefined>(undefined)
  useEffect(() => {
    const onHash = () => setHash(location.hash)
    addEventListener('hashchange', onHash)
    return () => removeEventListener('hashchange', onHash)
  }, [])
  useEffect(() => {
    if (!key) return
    // an admin key reads the wallet switch; another key gets 403 and sees approvals and webhooks only
    api('/admin/wallet').then(
      () => setAdmin(true),
      (e) => {
        if (e instanceof ApiError && e.status === 401) signOut()
        else setAdmin(false)
      },
    )
  }, [key])
  const signOut = () => {
    sessionStorage.removeItem(KEY_STORAGE)
    setKey(null)
    setAdmin(undefined)
  }
  if (!key) return html`<${SignIn} onSignedIn=${setKey} />`
  const [, page = 'approvals', id] = hash.split('/')
  const visible = pages.filter(([, , adminOnly]) => !adminOnly || admin)
  const current = visible.some(([name]) => name === page) ? page : 'approvals'
  return html`<a class="skip" href="#main">Skip to the page</a>
    <header>
      <h1>Agent Trading Service</h1>
      <nav aria-label="Console pages"><ul>
        ${visible.map(([name, title]) => html`<li><a href=${`#/${name}`} aria-current=${current === name ? 'page' : undefined}>${title}</a></li>`)}
      </ul></nav>
      <div class="who">${admin === undefined ? '' : admin ? 'admin key' : 'approver key'} <button type="button" onClick=${signOut}>Sign out</button></div>
    </header>
    <main id="main" tabIndex=${-1}>
      ${current === 'approvals' && html`<${ApprovalsPage} focusId=${page === 'approvals' ? id : undefined} />`}
      ${current === 'revenue' && html`<${RevenuePage} />`}
      ${current === 'keys' && html`<${KeysPage} />`}
      ${current === 'wallet' && html`<${WalletPage} />`}
      ${current === 'webhooks' && html`<${WebhooksPage} />`}
    </main>`
}

const root = document.getElementById('app')!
// the "Loading" line goes: the console renders into an empty element
root.replaceChildren()
render(html`<${App} />`, root)
