// The HTTP API, with the key from session storage as a bearer header (never in a URL).
const KEY = "kg.key";

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export const session = {
  get key() { return sessionStorage.getItem(KEY); },
  set key(value) {
    if (value) sessionStorage.setItem(KEY, value);
    else sessionStorage.removeItem(KEY);
  },
};

export async function api(method, path, { query, body, key } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  const headers = { Authorization: `Bearer ${key || session.key}`, Accept: "application/json" };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(url, init);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new ApiError(r.status, (data && data.detail) || `HTTP ${r.status}`);
  return data;
}

export const get = (path, query, key) => api("GET", path, { query, key });

// Every item of a list, page after page (`next_cursor`), up to `most` items.
export async function getAll(path, query, most = 10000) {
  const out = [];
  let cursor;
  do {
    const page = await get(path, { ...query, cursor });
    out.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && out.length < most);
  return out;
}
export const post = (path, body) => api("POST", path, { body });
