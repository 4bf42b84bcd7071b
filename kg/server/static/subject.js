// The subject view: pick an entity, see each fact version as a bar, move the two cursors.
import { dom } from "./dom.js";
import { get, getAll } from "./api.js";
import { eraseDialog } from "./erase.js";
import { drawNeighbourhood } from "./neighbourhood.js";
import { can, state } from "./state.js";
import { domain, drawTimeline, knownBy, statusAt } from "./timeline.js";
import { DAY, day, el, instant, interval, isoDay, say, short, table, us, versionOf, when } from "./util.js";
import { openWhy } from "./why.js";

// This view's state lives in the one shared state object (state.subjectView, see state.js).
const view = () => state.subjectView;

export function initSubject() {
  let timer = 0;
  dom.entityQ.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(listEntities, 150);
  });
  dom.validAt.addEventListener("input", () => {
    state.valid = Number(dom.validAt.value) * DAY;
    dom.validDate.value = day(state.valid);
    redraw();
  });
  dom.validDate.addEventListener("change", () => {
    const t = isoDay(dom.validDate.value);
    dom.validDate.setAttribute("aria-invalid", t === null ? "true" : "false");
    if (t === null) return;
    state.valid = t;
    widen(t);
    dom.validAt.value = String(Math.round(t / DAY));
    redraw();
  });
  dom.validNow.addEventListener("click", () => {
    state.valid = null;
    dom.validAt.value = String(Math.floor(Date.now() / DAY));
    dom.validDate.value = "";
    redraw();
  });
  dom.knownAt.addEventListener("input", () => {
    state.known = view().steps[Number(dom.knownAt.value)];
    redraw();
  });
  dom.showRetired.addEventListener("change", () => {
    view().retired = dom.showRetired.checked;
    draw();
  });
  // The bars are drawn at the box's pixel width: again when that width changes.
  new ResizeObserver(() => requestAnimationFrame(() => {
    if (dom.timeline.clientWidth !== view().width && view().drawn) draw();
  })).observe(dom.timeline);
  const erase = dom.eraseOpen;
  if (erase) erase.addEventListener("click", () => eraseDialog(state.subject, erased));
  listEntities();
}

export async function listEntities() {
  const list = dom.entityList;
  try {
    const found = (await get("/v1/entities", { q: dom.entityQ.value.trim(), limit: 200 })).items;
    list.replaceChildren(
      ...found.map((s) =>
        el("li", {},
          el("button", {
            type: "button",
            class: s.name === state.subject ? "picked" : "",
            "aria-pressed": s.name === state.subject ? "true" : "false",
            dataset: { entity: s.name },
            onclick: () => openSubject(s.name),
          }, el("span", { class: "name", text: s.name }),
          el("span", { class: "count", text: `${s.as_subject}`, title: "fact versions as subject" }))),
      ),
    );
    if (!found.length) list.replaceChildren(el("li", { class: "hint", text: "No entity matches." }));
  } catch (err) {
    list.replaceChildren(el("li", { class: "error", text: err.message }));
  }
}

// Load a subject's every version; the cursors reset to now, or are kept (`keepTime`), or
// set from a shared link (`at`: {valid: ms|null, known: ISO text|null}).
export async function openSubject(name, { keepTime = false, at = null } = {}) {
  state.subject = name;
  dom.atCursor.dataset.ready = "false";
  dom.subjectH.textContent = name;
  dom.why.hidden = true;
  say(dom.subjectStatus, "");
  try {
    view().versions = await getAll("/v1/history", { subject: name, limit: 1000 });
  } catch (err) {
    say(dom.subjectStatus, err.message, "error");
    view().versions = [];
  }
  view().steps = stepsOf(view().versions);
  await describeSteps(view().steps);
  view().steps.push(null);
  view().span = domain(view().versions);
  const known = dom.knownAt;
  known.max = String(view().steps.length - 1);
  if (at) {
    keepTime = true;
    state.valid = at.valid;
    state.known = at.known ? view().steps.find((s) => s && s.us === us(at.known)) || null : null;
    if (state.valid !== null) widen(state.valid);
  }
  if (!keepTime || !view().steps.some((s) => s && state.known && s.us === state.known.us)) {
    state.known = null;
    known.value = known.max;
  } else {
    known.value = String(view().steps.findIndex((s) => s && s.us === state.known.us));
  }
  if (!keepTime) state.valid = null;
  const valid = dom.validAt;
  valid.min = String(Math.floor(view().span.lo / DAY));
  valid.max = String(Math.floor(view().span.hi / DAY));
  valid.value = String(Math.floor((state.valid ?? Date.now()) / DAY));
  dom.validDate.value = state.valid === null ? "" : day(state.valid);
  dom.timeControls.hidden = false;
  dom.legend.hidden = false;
  dom.versionsBox.hidden = false;
  const erase = dom.eraseOpen;
  if (erase) erase.hidden = !can("admin") || !view().versions.length;
  if (!view().versions.length) say(dom.subjectStatus, `No fact has ${name} as its subject.`);
  for (const b of dom.entityList.querySelectorAll("button")) {
    const picked = b.dataset.entity === name;
    b.classList.toggle("picked", picked);
    b.setAttribute("aria-pressed", picked ? "true" : "false");
  }
  await redraw();
}

function widen(t) {
  if (t >= view().span.lo && t <= view().span.hi) return;
  view().span = { lo: Math.min(view().span.lo, t - 30 * DAY), hi: Math.max(view().span.hi, t + 30 * DAY) };
  dom.validAt.min = String(Math.floor(view().span.lo / DAY));
  dom.validAt.max = String(Math.floor(view().span.hi / DAY));
}

// Re-draw for the cursors: the set "true at V as known at T" comes from the API (/v1/facts,
// the same filter as `kg as-of`); the bars are the versions kg had written by T.
export async function redraw() {
  const known = state.known;
  const subject = state.subject; // a later pick may change state.subject while this reads
  const validText = state.valid === null ? "now" : day(state.valid);
  const knownText = known === null ? "now" : stepLabel(known);
  dom.validText.textContent = `true at ${validText}`;
  dom.validAt.setAttribute("aria-valuetext", validText);
  dom.knownText.textContent = known === null ? "as known now (every episode)" : `as known after ${knownText}`;
  dom.knownText.dataset.iso = known === null ? "" : known.iso;
  dom.knownAt.setAttribute("aria-valuetext", known === null ? "now" : `after ${knownText}`);
  const box = dom.atCursor;
  box.dataset.ready = "false";
  const mine = ++view().asked;
  let found = [];
  const at = { valid_at: state.valid === null ? null : instant(state.valid), known_at: known === null ? null : known.iso };
  try {
    found = await getAll("/v1/facts", { subject, ...at, limit: 1000 });
  } catch (err) {
    if (mine === view().asked) say(dom.subjectStatus, err.message, "error");
  }
  if (mine !== view().asked || subject !== state.subject) return;
  view().holds = new Set(found.map((f) => versionOf(f)));
  draw();
  box.replaceChildren(
    el("h3", { text: `True at ${validText}, as known ${known === null ? "now" : `after ${knownText}`}` }),
    found.length
      ? el("ul", { class: "facts" }, found.map((f) =>
        el("li", { dataset: { version: versionOf(f) } },
          el("strong", { text: f.predicate }), ` ${f.object} `,
          el("span", { class: "hint", text: interval(f.valid_from, f.valid_to) }))))
      : el("p", { class: "hint", text: "Nothing about this subject was true then, as known then." }),
  );
  await drawNeighbourhood(subject, found, at, (name) => openSubject(name, { keepTime: true }),
    () => mine === view().asked && subject === state.subject);
  if (mine !== view().asked || subject !== state.subject) return;
  box.dataset.subject = subject;
  box.dataset.valid = validText;
  box.dataset.known = knownText;
  box.dataset.ready = "true";
  share();
  versionTable(known && known.us);
}

// The view in the address (its fragment: never sent to the server), so a link shows the
// same subject, valid-time cursor and known-at step to whoever opens it with their key.
function share() {
  const q = new URLSearchParams({ subject: state.subject });
  if (state.valid !== null) q.set("valid", day(state.valid));
  if (state.known !== null) q.set("known", state.known.iso);
  history.replaceState(null, "", `#${q}`);
}

// The view a link names ({subject, at}), or null.
export function linked(hash) {
  const q = new URLSearchParams(hash.replace(/^#/, ""));
  const subject = q.get("subject");
  if (!subject) return null;
  const valid = q.get("valid") ? isoDay(q.get("valid")) : null;
  return { subject, at: { valid, known: q.get("known") || null } };
}

// The bars for the current cursors, at the box's width; focus stays on the bar it was on.
function draw() {
  const known = state.known;
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.version : undefined;
  view().width = dom.timeline.clientWidth;
  view().drawn = true;
  dom.timeline.replaceChildren(drawTimeline({
    versions: view().versions, known: known && known.us, valid: state.valid, holds: view().holds, span: view().span,
    onOpen: (v) => openWhy(v, { onChange: refresh }), width: view().width, retired: view().retired,
  }));
  if (focused) {
    const again = dom.timeline.querySelector(`.bar-g[data-version="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

// The known-at steps: each moment kg wrote or retired a version of this subject's facts,
// with the episode that did it (the one whose new fact appears then, else the one that
// closed a fact then, else the one behind a version written then).
export function stepsOf(versions) {
  const first = new Map(); // fact id -> its earliest known_from (us)
  for (const v of versions) {
    const u = us(v.known_from);
    if (!first.has(v.id) || u < first.get(v.id)) first.set(v.id, u);
  }
  const steps = new Map();
  const at = (iso) => {
    const u = us(iso);
    if (!steps.has(u)) steps.set(u, { iso, us: u, created: null, closed: null, other: null });
    return steps.get(u);
  };
  for (const v of versions) {
    const s = at(v.known_from);
    if (first.get(v.id) === s.us) s.created = s.created || v.episode_id;
    else if (v.closed_by_episode_id) s.closed = s.closed || v.closed_by_episode_id;
    else s.other = s.other || v.episode_id;
    if (v.known_to) at(v.known_to);
  }
  return [...steps.values()].sort((a, b) => a.us - b.us)
    .map((s) => ({ iso: s.iso, us: s.us, episode: s.created || s.closed || s.other }));
}

// Each step's episode (name, source, channel, when it happened, first words), fetched once.
async function describeSteps(steps) {
  const wanted = [...new Set(steps.map((s) => s.episode).filter((id) => id && !view().episodes.has(id)))];
  await Promise.all(wanted.map(async (id) => {
    try {
      view().episodes.set(id, await get(`/v1/episodes/${encodeURIComponent(id)}`));
    } catch {
      view().episodes.set(id, null);
    }
  }));
}

export function firstWords(text, n = 8) {
  const words = (text || "").replace(/\s+/g, " ").trim().split(" ");
  return words.length > n ? `${words.slice(0, n).join(" ")}…` : words.join(" ");
}

// A step as a person reads it: the episode that kg took in then, not a timestamp.
function stepLabel(step) {
  const ep = step.episode ? view().episodes.get(step.episode) : null;
  if (!ep) return `a change stored ${when(step.iso)}`;
  const said = ep.source === "facts" ? "" : `: “${firstWords(ep.content)}”`;
  return `“${ep.name || `episode ${short(ep.id)}`}” (${ep.source}, ${ep.channel} channel, ` +
    `happened ${when(ep.reference_time)})${said}`;
}

async function refresh() {
  await openSubject(state.subject, { keepTime: false });
  await listEntities();
}

function versionTable(known) {
  const shown = knownBy(view().versions, known);
  const rows = shown.map((v) => {
    const e = v;
    const status = statusAt(v, known);
    const closer = e.closed_by_episode_id
      ? el("span", { dataset: { episode: e.closed_by_episode_id } },
        `${view().episodeNames.get(e.closed_by_episode_id) || `episode ${short(e.closed_by_episode_id)}`}`)
      : "";
    return el("tr", { dataset: { version: versionOf(e) } },
      el("td", {}, v.predicate), el("td", {}, v.object),
      el("td", {}, interval(e.valid_from, e.valid_to)),
      el("td", {}, `${when(e.known_from)} → ${e.known_to ? when(e.known_to) : "still believed"}`),
      el("td", {}, el("span", { class: `badge ${status}`, text: status }), view().holds.has(versionOf(e)) ? " ✓ at cursor" : ""),
      el("td", {}, closer));
  });
  dom.versionsTable.replaceChildren(
    table(["predicate", "value", "valid", "known (written → retired)", "status", "closed by"], rows,
      { "aria-label": `Versions of ${state.subject}'s facts`, class: "versions" }),
  );
  nameEpisodes(shown.map((v) => v.closed_by_episode_id).filter(Boolean));
}

// Which episode closed a version: its name, fetched once per episode.
async function nameEpisodes(ids) {
  for (const id of new Set(ids)) {
    const known = view().episodes.get(id);
    if (known && !view().episodeNames.has(id)) view().episodeNames.set(id, `${known.name || `episode ${short(id)}`} (${known.channel})`);
    if (!view().episodeNames.has(id)) {
      try {
        const ep = await get(`/v1/episodes/${encodeURIComponent(id)}`);
        view().episodeNames.set(id, `${ep.name || `episode ${short(id)}`} (${ep.channel})`);
      } catch {
        view().episodeNames.set(id, `episode ${short(id)}`);
      }
    }
    for (const node of dom.versionsTable.querySelectorAll(`[data-episode="${id}"]`)) {
      node.firstChild.textContent = view().episodeNames.get(id);
    }
  }
}

// After an erasure: the view no longer shows the subject.
function erased(name) {
  state.subject = null;
  view().versions = [];
  dom.subjectH.textContent = `${name} was erased`;
  dom.timeline.replaceChildren();
  dom.atCursor.replaceChildren();
  dom.neighbourhood.replaceChildren();
  dom.versionsTable.replaceChildren();
  dom.timeControls.hidden = true;
  dom.eraseOpen.hidden = true;
  listEntities();
}
