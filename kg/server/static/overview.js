// The group at a glance: counts, recent episodes (failed ones retryable), what the
// instruction guard quarantined, the audit log, and ingest and query metrics as small charts.
import { dom } from "./dom.js";
import { get, post } from "./api.js";
import { rollbackDialog } from "./dialog.js";
import { can, state } from "./state.js";
import { busy, day, el, short, svg, table, when } from "./util.js";


function card(title, ...children) {
  return el("section", { class: "card", "aria-label": title }, el("h3", { text: title }), ...children);
}

// Horizontal bars with the value written beside each: the numbers are the text alternative.
function barChart(title, entries) {
  const max = Math.max(1, ...entries.map(([, v]) => v));
  const row = 20;
  const chart = svg("svg", { viewBox: `0 0 360 ${entries.length * row + 4}`, class: "chart", role: "img",
    "aria-label": `${title}: ${entries.map(([k, v]) => `${k} ${v}`).join(", ")}` });
  entries.forEach(([label, value], i) => {
    const y = i * row + 2;
    chart.append(svg("text", { x: 0, y: y + 13, class: "chart-label", text: label }));
    chart.append(svg("rect", { x: 150, y, width: Math.max((value / max) * 170, value ? 2 : 0), height: row - 6, class: "chart-bar" }));
    chart.append(svg("text", { x: 155 + (value / max) * 170, y: y + 13, class: "chart-value", text: String(value) }));
  });
  return el("figure", {}, chart, el("figcaption", { class: "visually-hidden", text: title }));
}

// Episodes by when they happened (reference time, by month: an imported history spreads
// over its own dates, not the second it was stored), stacked by status.
function dayChart(episodes) {
  const months = new Set(episodes.map((ep) => ep.reference_time.slice(0, 7)));
  const byYear = months.size > 12; // a long history by year, a short one by month
  const byDay = new Map();
  for (const ep of episodes) {
    const d = day(Date.parse(ep.reference_time)).slice(0, byYear ? 4 : 7);
    const c = byDay.get(d) || { ingested: 0, failed: 0, rolled_back: 0 };
    c[ep.status] = (c[ep.status] || 0) + 1;
    byDay.set(d, c);
  }
  const days = [...byDay.keys()].sort().slice(-16);
  const max = Math.max(1, ...days.map((d) => Object.values(byDay.get(d)).reduce((a, b) => a + b, 0)));
  const w = 360 / Math.max(days.length, 1);
  const chart = svg("svg", { viewBox: "0 0 360 110", class: "chart", role: "img",
    "aria-label": `Episodes by the ${byYear ? "year" : "month"} they happened: ` + days.map((d) => {
      const c = byDay.get(d);
      return `${d}: ${c.ingested} ingested, ${c.failed} failed, ${c.rolled_back} rolled back`;
    }).join("; ") });
  days.forEach((d, i) => {
    let y = 90;
    for (const status of ["ingested", "failed", "rolled_back"]) {
      const h = (byDay.get(d)[status] / max) * 80;
      if (!h) continue;
      y -= h;
      chart.append(svg("rect", { x: i * w + 2, y, width: w - 4, height: h, class: `col ${status}` }));
    }
    const every = Math.ceil((d.length * 7 + 4) / w); // labels that fit, every n-th column
    if (i % every === 0) chart.append(svg("text", { x: i * w + w / 2, y: 104, class: "chart-label mid", text: d }));
  });
  return el("figure", {}, chart, el("figcaption", { class: "hint", text: `Episodes by the ${byYear ? "year" : "month"} they happened (the latest 200 stored): ingested (green), failed (red), rolled back (grey).` }));
}

export async function showOverview() {
  const root = dom.overview;
  root.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
  let stats, episodes, quarantine, log;
  try {
    let episodePage;
    [stats, episodePage, quarantine, log] = await Promise.all([
      get("/v1/stats"), get("/v1/episodes", { limit: 200 }), get("/v1/quarantine", { limit: 1000 }), get("/v1/log", { limit: 20 }),
    ]);
    episodes = episodePage.items;
    log = log.items;
    await withContent(episodes.slice(0, SHOWN));
  } catch (err) {
    root.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    return;
  }
  const s = stats.stats;
  const ingest = stats.metrics.ingest;
  const q = stats.metrics.queries;
  const counts = el("dl", { class: "counts", "data-testid": "counts" },
    ...[["episodes", s.episodes], ["entities", s.entities], ["fact versions", s.edge_versions],
      ["true now", s.current_facts], ["contested", s.contested_facts], ["communities", s.communities],
      ["quarantined", `${quarantine.items.length}${quarantine.next_cursor ? "+" : ""}`]]
      .map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { dataset: { count: k }, text: String(v) }))));
  const failedCount = episodes.filter((e) => e.status === "failed").length;
  const shown = episodes.slice(0, SHOWN).sort((a, b) => Date.parse(b.reference_time) - Date.parse(a.reference_time));
  const rows = shown.map((ep) => el("tr", { dataset: { episode: ep.id, status: ep.status } },
    el("td", {}, when(ep.reference_time), el("div", { class: "hint", text: `stored ${when(ep.created_at)}` })),
    el("td", {}, el("strong", { text: ep.name || `episode ${short(ep.id)}` }),
      ep.content ? el("div", { class: "said-text", "data-testid": "episode-content", text: clip(saidIn(ep)) }) : null),
    el("td", { text: `${ep.source} · ${ep.channel}` }),
    el("td", {}, el("span", { class: `badge ${ep.status}`, text: ep.status.replace("_", " ") }),
      ep.error ? el("div", { class: "error small", text: ep.error }) : null),
    el("td", { text: factsText(ep) }),
    el("td", {}, actions(ep))));
  const lowered = Object.entries(q.branch_hits).sort(([a], [b]) => a.localeCompare(b));
  root.replaceChildren(
    card(`Group ${state.who.group_id}`, counts),
    card("Ingest", barChart("Ingest metrics", [
      ["episodes", ingest.episodes], ["facts added", ingest.facts_added],
      ["facts reinforced", ingest.facts_reinforced], ["facts closed", ingest.facts_closed],
      ["facts contested", ingest.facts_contested], ["facts dropped", ingest.facts_dropped],
      ["facts quarantined", ingest.facts_quarantined], ["LLM calls", ingest.llm_calls],
    ]), dayChart(episodes)),
    card("Queries", barChart("Query metrics", [
      ["queries", q.queries], ["no result", q.zero_result_queries], ["branch errors", q.branch_errors],
      ["contexts", q.contexts],
    ]), el("p", { class: "hint", text: `mean latency ${q.queries ? (q.latency_ms_total / q.queries).toFixed(1) : "–"} ms; ` +
      `tokens injected ${q.context_tokens}` }),
    lowered.length ? barChart("Hits per branch", lowered) : el("p", { class: "hint", text: "No branch hits yet." })),
    el("section", { class: "card wide", "aria-label": "Recent episodes" },
      el("h3", {}, "Recent episodes ", failedCount ? el("span", { class: "badge failed", text: `${failedCount} failed` }) : null),
      table(["happened", "episode and what it said", "source · channel", "status", "facts", ""], rows, { class: "episodes-table", "data-testid": "episodes" })),
    card("Quarantined by the instruction guard", quarantine.items.length
      ? table(["when", "channel", "rule", "text"], quarantine.items.map((e) => el("tr", {},
        el("td", { text: when(e.created_at) }), el("td", { text: e.channel }),
        el("td", { text: e.item.reason }), el("td", { text: e.item.text }))), { "data-testid": "quarantine" })
      : el("p", { class: "hint", text: "Nothing quarantined." })),
    card("Audit log", log.length
      ? el("ul", { class: "log" }, log.map((ev) => el("li", {}, el("strong", { text: ev.kind }), ` ${when(ev.created_at)} `, el("span", { class: "hint", text: ev.detail || counted(ev.counts) }))))
      : el("p", { class: "hint", text: "No rollback, erasure or closure yet." })),
  );
}

const SHOWN = 50; // episodes listed (each with its text, fetched one by one)

// Each listed episode's text (the list itself carries none), fetched in parallel.
async function withContent(episodes) {
  await Promise.all(episodes.map(async (ep) => {
    try {
      ep.content = (await get(`/v1/episodes/${encodeURIComponent(ep.id)}`)).content;
    } catch {
      ep.content = "";
    }
  }));
}

// What an episode said: its text, or a structured episode's statements as sentences.
function saidIn(ep) {
  if (ep.source !== "facts") return ep.content;
  try {
    return JSON.parse(ep.content).map((f) =>
      `${f.subject} ${f.predicate} ${f.object}${f.valid_at ? ` from ${when(f.valid_at)}` : ""}` +
      `${f.invalid_at ? ` until ${when(f.invalid_at)}` : ""}`).join("; ");
  } catch {
    return ep.content;
  }
}

const clip = (text) => (text.length > 240 ? `${text.slice(0, 239)}…` : text);

// What an episode did to the facts, in words ("2 facts added, 1 closed"; "no fact" when its
// text was stored without any being extracted).
function factsText(ep) {
  if (ep.status === "queued" || ep.status === "processing") return "waiting for extraction";
  if (ep.status !== "ingested") return "";
  if (!ep.facts_added && !ep.facts_closed) {
    return ep.source === "facts" ? "nothing new (already known, or held back as contested)" : "no fact (text kept, searchable)";
  }
  return `${ep.facts_added} added, ${ep.facts_closed} closed`;
}

// A rollback's or an erasure's counts, as "facts removed 1, episodes 1".
function counted(counts) {
  return Object.entries(counts || {}).filter(([, n]) => n).map(([k, n]) => `${k.replaceAll("_", " ")} ${n}`).join(", ");
}

function actions(ep) {
  const out = [];
  if (ep.status === "failed" && can("write")) {
    const b = el("button", { type: "button", class: "small", text: "Retry" });
    b.addEventListener("click", async () => {
      if (busy(b, true, "Retrying…")) return;
      try {
        await post(`/v1/episodes/${encodeURIComponent(ep.id)}/retry`);
        await showOverview();
      } catch (err) {
        busy(b, false, "Retry");
        b.after(el("div", { class: "error small", role: "alert", text: err.message }));
      }
    });
    out.push(b);
  }
  if (ep.status === "ingested") {
    out.push(el("button", { type: "button", class: "small",
      onclick: () => rollbackDialog(ep.id, ep.name || `episode ${short(ep.id)}`, showOverview) },
    can("admin") ? "Roll back…" : "Preview rollback…"));
  }
  return out;
}

