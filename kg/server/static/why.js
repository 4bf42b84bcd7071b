// The why panel: every version of a fact, the episodes behind it (what each said, its
// channel, trust and extractor), the episode that closed it; and "that changed".
import { get, post } from "./api.js";
import { rollbackDialog } from "./dialog.js";
import { can } from "./state.js";
import { statusAt } from "./timeline.js";
import { day, el, interval, say, short, table, when } from "./util.js";

const TRUST = ["agent", "document", "tool", "user"];
const $ = (id) => document.getElementById(id);

export async function openWhy(version, { onChange } = {}) {
  const panel = $("why");
  const body = $("why-body");
  panel.hidden = false;
  $("why-h").textContent = `Why: ${version.predicate} ${version.object}`;
  body.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
  panel.focus();
  $("why-close").onclick = () => {
    panel.hidden = true;
    const bar = document.querySelector(`[data-version="${version.edge.uuid}"].bar-g`);
    if (bar) bar.focus();
  };
  let x;
  try {
    x = await get(`/v1/facts/${encodeURIComponent(version.edge.uuid)}/why`);
  } catch (err) {
    body.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    return;
  }
  const episodes = new Map(x.episodes.map((e) => [e.uuid, e]));
  const closers = new Set(x.versions.map((v) => v.edge.invalidated_by).filter(Boolean));
  const creator = x.versions[0].edge.episodes[0];
  const rows = x.versions.map((v) => {
    const e = v.edge;
    const status = statusAt(v, null);
    const closer = e.invalidated_by ? episodes.get(e.invalidated_by) : null;
    return el("tr", { class: e.uuid === version.edge.uuid ? "picked" : "", dataset: { version: e.uuid } },
      el("td", {}, v.object),
      el("td", {}, interval(e.valid_at, e.invalid_at)),
      el("td", {}, `${when(e.created_at)} → ${e.expired_at ? when(e.expired_at) : "still believed"}`),
      el("td", {}, el("span", { class: `badge ${status}`, text: status })),
      el("td", {}, closer ? `${closer.name || short(closer.uuid)}${e.invalidation_reason ? ` — ${e.invalidation_reason}` : ""}` :
        e.invalidation_reason || ""));
  });
  const said = new Map();
  for (const s of x.statements) {
    if (!said.has(s.episode_uuid)) said.set(s.episode_uuid, []);
    said.get(s.episode_uuid).push(s);
  }
  const cards = x.episodes.map((ep) => {
    const roles = [];
    if (ep.uuid === creator) roles.push("created it");
    else if (x.versions.some((v) => v.edge.episodes.includes(ep.uuid))) roles.push("supports it");
    if (closers.has(ep.uuid)) roles.push("closed it");
    const statements = said.get(ep.uuid) || [];
    return el("article", { class: "episode", dataset: { episode: ep.uuid, roles: roles.join(",") } },
      el("h4", {}, ep.name || `episode ${short(ep.uuid)}`, " ",
        ...roles.map((r) => el("span", { class: `tag ${r.replace(" ", "-")}`, text: r }))),
      el("dl", { class: "meta" },
        el("dt", { text: "channel" }), el("dd", { text: ep.channel }),
        el("dt", { text: "trust" }), el("dd", { text: TRUST[ep.trust] ?? String(ep.trust) }),
        el("dt", { text: "extractor" }), el("dd", { text: ep.extractor }),
        el("dt", { text: "source" }), el("dd", { text: `${ep.source}${ep.source_description ? ` · ${ep.source_description}` : ""}` }),
        el("dt", { text: "happened" }), el("dd", { text: when(ep.valid_at) }),
        el("dt", { text: "stored" }), el("dd", { text: when(ep.created_at) }),
        el("dt", { text: "status" }), el("dd", { text: ep.status })),
      statements.length
        ? el("ul", { class: "said" }, statements.map((s) =>
          el("li", {},
            el("q", { text: s.passage || s.said.fact || `${s.said.subject} ${s.said.predicate} ${s.said.object}` }),
            " ", el("span", { class: "hint", text: statementTime(s.said) }))))
        : ep.source !== "facts" ? el("blockquote", { text: ep.content.slice(0, 600) }) : null,
      ep.status === "ingested"
        ? el("button", { type: "button", class: "small", onclick: () => rollbackDialog(ep.uuid, ep.name || `episode ${short(ep.uuid)}`, onChange) },
          can("admin") ? "Roll back…" : "Preview rollback…")
        : null);
  });
  body.replaceChildren(
    el("p", { class: "fact-text", text: version.edge.fact }),
    el("h3", { text: "Versions" }),
    table(["value", "valid", "known (written → retired)", "status", "closed by"], rows, { class: "versions", "data-testid": "why-versions" }),
    el("h3", { text: "Episodes" }),
    el("div", { class: "episodes" }, cards),
    can("write") ? correctForm(version, onChange) : null,
  );
}

function statementTime(f) {
  if (!f.valid_at && !f.invalid_at) return "(from the episode's time)";
  return `(${interval(f.valid_at, f.invalid_at)})`;
}

// "That's wrong / that changed": stored as a user-channel structured episode.
function correctForm(version, onChange) {
  const value = el("input", { id: "correct-value", required: true, autocomplete: "off" });
  const since = el("input", { id: "correct-since", type: "date", required: true, value: day(Date.now()) });
  const status = el("p", { class: "status", role: "status" });
  const form = el("form", { class: "correct", "aria-labelledby": "correct-h" },
    el("h3", { id: "correct-h", text: "That's wrong / that changed" }),
    el("p", { class: "hint" }, `Give the right value of ${version.predicate} for ${version.subject} and when it ` +
      "became true. It is stored as your (user-channel) episode; the old value is closed, never overwritten, " +
      "and a rollback of that episode undoes it."),
    el("label", { for: "correct-value", text: "Right value" }), value,
    el("label", { for: "correct-since", text: "True since" }), since,
    el("button", { type: "submit", text: "Save correction" }), status);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await post(`/v1/facts/${encodeURIComponent(version.edge.uuid)}/correct`, {
        object: value.value.trim(),
        valid_at: `${since.value}T00:00:00Z`,
      });
      say(status, `Saved as episode ${short(r.episode_uuid)}: ${r.summary.facts_added} added, ` +
        `${r.summary.facts_closed} closed.`, "ok");
      if (onChange) await onChange();
      say($("subject-status"), `Correction saved (episode ${short(r.episode_uuid)}).`, "ok");
    } catch (err) {
      say(status, err.message, "error");
    }
  });
  return form;
}

