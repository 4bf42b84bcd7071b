// The why panel: every version of a fact, the episodes behind it (what each said, its
// channel, trust and extractor), the episode that closed it; and "that changed".
import { dom } from "./dom.js";
import { get, post } from "./api.js";
import { rollbackDialog } from "./dialog.js";
import { can } from "./state.js";
import { statusAt } from "./timeline.js";
import { day, el, interval, isoDay, say, short, table, versionOf, when } from "./util.js";


export async function openWhy(version, { onChange } = {}) {
  const panel = dom.why;
  const body = dom.whyBody;
  panel.hidden = false;
  dom.whyH.textContent = `Why: ${version.predicate} ${version.object}`;
  body.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
  panel.focus();
  dom.whyClose.onclick = () => {
    panel.hidden = true;
    const bar = document.querySelector(`[data-version="${versionOf(version)}"].bar-g`);
    if (bar) bar.focus();
  };
  let x;
  try {
    x = await get(`/v1/facts/${encodeURIComponent(version.id)}/why`);
  } catch (err) {
    body.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    return;
  }
  const episodes = new Map(x.episodes.map((e) => [versionOf(e), e]));
  const closers = new Set(x.versions.map((v) => v.closed_by_episode_id).filter(Boolean));
  const creator = x.versions[0].episode_id;
  const rows = x.versions.map((v) => {
    const e = v;
    const status = statusAt(v, null);
    const closer = e.closed_by_episode_id ? episodes.get(e.closed_by_episode_id) : null;
    // Three columns, so the panel's width holds them: the value, its two times, its status.
    return el("tr", { class: versionOf(e) === versionOf(version) ? "picked" : "", dataset: { version: versionOf(e) } },
      el("td", {}, v.object),
      el("td", {}, el("div", { text: `true ${interval(e.valid_from, e.valid_to)}` }),
        el("div", { class: "hint", text: `written ${when(e.known_from)}${e.known_to ? `, retired ${when(e.known_to)}` : ", still believed"}` })),
      el("td", {}, el("span", { class: `badge ${status}`, text: status }),
        closer ? el("div", { class: "hint", text: `closed by ${closer.name || short(closer.id)}` }) : null));
  });
  const said = new Map();
  for (const s of x.statements) {
    if (!said.has(s.episode_id)) said.set(s.episode_id, []);
    said.get(s.episode_id).push(s);
  }
  const cards = x.episodes.map((ep) => {
    const roles = [];
    if (ep.id === creator) roles.push("created it");
    else if (said.has(ep.id)) roles.push("supports it");
    if (closers.has(ep.id)) roles.push("closed it");
    const statements = said.get(ep.id) || [];
    return el("article", { class: "episode", dataset: { episode: ep.id, roles: roles.join(",") } },
      el("h4", {}, ep.name || `episode ${short(ep.id)}`, " ",
        ...roles.map((r) => el("span", { class: `tag ${r.replace(" ", "-")}`, text: r }))),
      el("dl", { class: "meta" },
        el("dt", { text: "channel" }), el("dd", { text: ep.channel }),
        el("dt", { text: "trust" }), el("dd", { text: ep.trust }),
        el("dt", { text: "extractor" }), el("dd", { text: ep.extractor }),
        el("dt", { text: "source" }), el("dd", { text: `${ep.source}${ep.source_description ? ` · ${ep.source_description}` : ""}` }),
        el("dt", { text: "happened" }), el("dd", { text: when(ep.reference_time) }),
        el("dt", { text: "stored" }), el("dd", { text: when(ep.created_at) }),
        el("dt", { text: "status" }), el("dd", { text: ep.status })),
      statements.length
        ? el("ul", { class: "said" }, statements.map((s) =>
          el("li", {},
            el("q", { text: s.passage || s.said.fact || `${s.said.subject} ${s.said.predicate} ${s.said.object}` }),
            " ", el("span", { class: "hint", text: statementTime(s.said) }))))
        : ep.source !== "facts" ? el("blockquote", { text: ep.content.slice(0, 600) }) : null,
      ep.status === "ingested"
        ? el("button", { type: "button", class: "small", onclick: () => rollbackDialog(ep.id, ep.name || `episode ${short(ep.id)}`, onChange) },
          can("admin") ? "Roll back…" : "Preview rollback…")
        : null);
  });
  body.replaceChildren(
    el("p", { class: "fact-text", text: version.text }),
    el("h3", { text: "Versions" }),
    table(["value", "true (valid) · written (known)", "status"], rows, { class: "versions", "data-testid": "why-versions" }),
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
  const since = el("input", { id: "correct-since", type: "text", required: true, value: day(Date.now()),
    inputmode: "numeric", pattern: "\\d{4}-\\d{2}-\\d{2}", placeholder: "YYYY-MM-DD", "aria-describedby": "correct-since-hint" });
  const status = el("p", { class: "status", role: "status" });
  const form = el("form", { class: "correct", "aria-labelledby": "correct-h" },
    el("h3", { id: "correct-h", text: "That's wrong / that changed" }),
    el("p", { class: "hint" }, `Give the right value of ${version.predicate} for ${version.subject} and when it ` +
      "became true. It is stored as your (user-channel) episode; the old value is closed, never overwritten, " +
      "and a rollback of that episode undoes it."),
    el("label", { for: "correct-value", text: "Right value" }), value,
    el("label", { for: "correct-since", text: "True since" }), since,
    el("span", { id: "correct-since-hint", class: "hint", text: "a day, YYYY-MM-DD (UTC)" }),
    el("button", { type: "submit", text: "Save correction" }), status);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (isoDay(since.value) === null) {
      say(status, `True since: "${since.value}" is not a day like 2024-03-01.`, "error");
      return;
    }
    try {
      const r = await post(`/v1/facts/${encodeURIComponent(version.id)}/correct`, {
        object: value.value.trim(),
        valid_at: `${since.value.trim()}T00:00:00Z`,
      });
      say(status, `Saved as episode ${short(r.episode_uuid)}: ${r.summary.facts_added} added, ` +
        `${r.summary.facts_closed} closed.`, "ok");
      if (onChange) await onChange();
      say(dom.subjectStatus, `Correction saved (episode ${short(r.episode_uuid)}).`, "ok");
    } catch (err) {
      say(status, err.message, "error");
    }
  });
  return form;
}

