// Search: the fused results in the subject view's time view, and on demand each branch's
// hits and each result's rank in every branch that found it (the CLI's --explain).
import { dom } from "./dom.js";
import { post } from "./api.js";
import { state } from "./state.js";
import { el, instant, interval, table } from "./util.js";


export function showSearch() {
  if (!state.searchWired) {
    state.searchWired = true;
    dom.searchForm.addEventListener("submit", (ev) => {
      ev.preventDefault();
      run();
    });
    dom.searchExplain.addEventListener("change", () => { if (dom.searchQ.value) run(); });
  }
  describeView();
  dom.searchQ.focus();
}

function view() {
  if (!dom.searchTimeview.checked) return {};
  return {
    valid_at: state.valid === null ? undefined : instant(state.valid),
    known_at: state.known === null ? undefined : state.known.iso,
  };
}

function describeView() {
  const v = view();
  dom.searchView.textContent = `Time view: true at ${v.valid_at || "now"}, as known at ${v.known_at || "now"}` +
    (dom.searchTimeview.checked ? " (the subject view's cursors)." : ".");
}

function ranks(hit, explain) {
  const score = el("td", { class: "num", text: hit.score.toFixed(3) });
  if (!explain) return [score];
  const r = Object.entries(hit.ranks).map(([b, n]) => `${b} #${n}`).join(", ");
  const s = Object.entries(hit.branch_scores).map(([b, x]) => `${b} ${x.toFixed(3)}`).join(", ");
  return [score, el("td", { class: "num", text: hit.fused_score.toFixed(3) }), el("td", { text: r }), el("td", { text: s })];
}

async function run() {
  describeView();
  const explain = dom.searchExplain.checked;
  const out = dom.searchResults;
  const body = {
    query: dom.searchQ.value,
    include_closed: dom.searchHistory.checked,
    ...view(),
  };
  if (dom.searchRecipe.value) body.recipe = dom.searchRecipe.value;
  let r;
  try {
    r = await post("/v1/search", body);
  } catch (err) {
    out.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    return;
  }
  const extra = explain ? [["fused", "num"], "rank per branch", "branch scores"] : [];
  const parts = [];
  // Each hit with how it ranked (rankings[i] is hits[i]'s), grouped by kind, best first.
  const of = (kind) => r.hits.map((h, i) => ({ ...h, ...r.rankings[i], score: h.score })).filter((h) => h.kind === kind);
  const facts = of("fact");
  const entities = of("entity");
  const episodes = of("episode");
  if (facts.length) {
    parts.push(el("h3", { text: `Facts (${facts.length})` }), table(["fact", "subject", "valid", "status", ["score", "num"], ...extra],
      facts.map((h) => el("tr", { dataset: { fact: h.id } },
        el("td", { text: h.text }),
        el("td", {}, el("button", { type: "button", class: "link", onclick: () => state.navigate("subject", h.subject) }, h.subject)),
        el("td", { text: interval(h.valid_from, h.valid_to) }),
        el("td", { text: h.status || "" }),
        ...ranks(h, explain))), { class: "results", "data-testid": "fact-hits" }));
  }
  if (entities.length) {
    parts.push(el("h3", { text: `Entities (${entities.length})` }), table(["entity", ["score", "num"], ...extra],
      entities.map((h) => el("tr", { dataset: { entity: h.name } },
        el("td", {}, el("button", { type: "button", class: "link", onclick: () => state.navigate("subject", h.name) }, h.name)),
        ...ranks(h, explain))), { class: "results", "data-testid": "entity-hits" }));
  }
  if (episodes.length) {
    parts.push(el("h3", { text: `Episodes (${episodes.length})` }), table(["episode", "text", ["score", "num"], ...extra],
      episodes.map((h) => el("tr", { dataset: { episode: h.id } },
        el("td", { text: h.name || h.id.slice(0, 8) }),
        el("td", { text: h.text.slice(0, 200) }),
        ...ranks(h, explain))), { class: "results", "data-testid": "episode-hits" }));
  }
  if (!parts.length) {
    const why = Object.keys(r.abstained).length ? " (abstained: nothing close enough)" : "";
    parts.push(el("p", { class: "hint", "data-testid": "no-results", text: `No results${why}.` }));
  }
  if (explain) {
    parts.push(el("h3", { text: "Branches" }), table(["scope", "method", ["hits", "num"], ["ms", "num"], "error"],
      r.branches.map((b) => el("tr", {},
        el("td", { text: b.scope }), el("td", { text: b.method }), el("td", { class: "num", text: String(b.hits) }),
        el("td", { class: "num", text: b.latency_ms.toFixed(1) }), el("td", { text: b.error || "" }))),
      { class: "branches", "data-testid": "branches" }));
  }
  parts.push(el("p", { class: "hint", text: `${r.latency_ms.toFixed(1)} ms` }));
  out.replaceChildren(...parts);
}
