// Small DOM and time helpers.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

export const DAY = 86400000;
// Transaction times carry microseconds, which Date drops: compare them as microseconds
// since the epoch (below 2^53 until the year 2255), and send the API's own text back.
export function us(iso) {
  if (!iso) return null;
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(iso);
  if (!m) return Date.parse(iso) * 1000;
  const frac = (m[2] || "").padEnd(6, "0").slice(0, 6);
  return Date.parse(m[1] + m[3]) * 1000 + Number(frac);
}
export const ms = (iso) => (iso ? Date.parse(iso) : null);
export const day = (t) => new Date(t).toISOString().slice(0, 10);
export const instant = (t) => new Date(t).toISOString().replace(".000Z", "Z");
export const short = (uuid) => (uuid || "").slice(0, 8);

// "YYYY-MM-DD" as ms since the epoch (UTC midnight), or null if it is not such a day.
export function isoDay(text) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text.trim());
  if (!m) return null;
  const t = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return day(t) === text.trim() ? t : null;
}

// A time as a person reads it: the day if it is midnight UTC, else to the second (UTC).
export function when(iso) {
  if (!iso) return "…";
  const t = Date.parse(iso);
  return t % DAY === 0 ? day(t) : `${new Date(t).toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

export function interval(from, to) {
  return `${when(from)} → ${to ? when(to) : "open"}`;
}

// A table; a header given as [text, "num"] is right-aligned over its numbers.
export function table(headers, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => (Array.isArray(h)
      ? el("th", { scope: "col", class: h[1] }, h[0]) : el("th", { scope: "col" }, h))))),
    el("tbody", {}, rows));
}

export function say(node, text, kind = "") {
  node.textContent = text;
  node.className = `status ${kind}`;
}

// A fact version's own key: its fact's id and when kg wrote it (versions share the fact's id).
export const versionOf = (f) => `${f.id}@${f.known_from}`;

// Mark a button busy while its request runs (it keeps its colours and its focus, unlike a
// disabled one, and says so to assistive technology); `true` if it already was.
export function busy(button, on, text) {
  const was = button.getAttribute("aria-busy") === "true";
  if (on) button.setAttribute("aria-busy", "true");
  else button.removeAttribute("aria-busy");
  if (text) button.textContent = text;
  return was;
}
