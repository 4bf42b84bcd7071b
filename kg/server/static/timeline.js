// The subject's fact versions as bars on the valid-time axis: one row per predicate, a lane
// per overlapping version, the status as colour *and* pattern, word and label.
import { DAY, day, interval, ms, short, svg, us, versionOf } from "./util.js";

const GUTTER = 150;
const NARROW = 320; // the least width drawn (the box is narrower only on a phone)
const LANE = 28;
const AXIS = 30;
const RIGHT = 16;

// The status of a version as known at transaction time `known` (microseconds; null = now).
export function statusAt(v, known) {
  const e = v;
  if (e.known_to && (known === null || us(e.known_to) <= known)) return "retired";
  if (e.status === "contested") return "contested";
  if (e.valid_to) return "closed";
  return "current";
}

// Versions kg had written by `known` (retired ones included: they were beliefs once).
export const knownBy = (versions, known) =>
  versions.filter((v) => known === null || us(v.known_from) <= known);

export function domain(versions) {
  const now = Date.now();
  const times = [now];
  for (const v of versions) {
    times.push(ms(v.valid_from));
    if (v.valid_to) times.push(ms(v.valid_to));
  }
  let lo = Math.min(...times);
  let hi = Math.max(...times);
  const pad = Math.max((hi - lo) * 0.05, 30 * DAY);
  lo = Math.floor((lo - pad) / DAY) * DAY;
  hi = Math.ceil((hi + pad) / DAY) * DAY;
  return { lo, hi };
}

export function describe(v, status) {
  const e = v;
  let text = `${v.predicate} ${v.object}, valid ${interval(e.valid_from, e.valid_to)}, ${status}`;
  if (status === "closed" && e.closed_by_episode_id) {
    text += ` by episode ${short(e.closed_by_episode_id)}`;
  }
  if (status === "retired") text += ` at ${e.known_to}`;
  return text;
}

// `text` cut to what `room` pixels hold at about `per` pixels a character ("" if too little).
function fit(text, room, per) {
  const n = Math.floor(room / per);
  return text.length <= n ? text : n > 3 ? `${text.slice(0, n - 1)}…` : "";
}

function lanes(rows) {
  // Greedy interval packing per predicate: overlapping versions get their own lane.
  const placed = [];
  for (const [predicate, versions] of rows) {
    const ends = [];
    const sorted = [...versions].sort(
      (a, b) => ms(a.valid_from) - ms(b.valid_from) || ms(a.known_from) - ms(b.known_from),
    );
    const items = sorted.map((v) => {
      const start = ms(v.valid_from);
      const end = v.valid_to ? ms(v.valid_to) : Infinity;
      let lane = ends.findIndex((x) => x <= start);
      if (lane < 0) lane = ends.push(end) - 1;
      else ends[lane] = end;
      return { v, lane };
    });
    placed.push({ predicate, items, lanes: Math.max(ends.length, 1) });
  }
  return placed;
}

function ticks(lo, hi) {
  const out = [];
  const years = (hi - lo) / (365 * DAY);
  const step = years > 12 ? 5 : years > 3 ? 1 : 0;
  const start = new Date(lo);
  if (step) {
    for (let y = start.getUTCFullYear(); ; y += 1) {
      const t = Date.UTC(y, 0, 1);
      if (t > hi) break;
      if (t >= lo && y % step === 0) out.push([t, String(y)]);
    }
  } else {
    const every = years > 1 ? 3 : 1;
    for (let m = Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), 1); m <= hi; ) {
      const d = new Date(m);
      if (m >= lo && d.getUTCMonth() % every === 0) out.push([m, day(m).slice(0, 7)]);
      m = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
    }
  }
  return out;
}

// The SVG, `width` pixels wide (the box's own width: no scaling, no scrolling). `holds` is
// the set of versions true at the cursor (from the API); retired versions only if `retired`.
export function drawTimeline({ versions, known, valid, holds, span, onOpen, width, retired = false }) {
  const WIDTH = Math.max(Math.floor(width || 1000), NARROW);
  const shown = knownBy(versions, known).filter((v) => retired || statusAt(v, known) !== "retired");
  const rows = new Map();
  for (const v of shown) {
    if (!rows.has(v.predicate)) rows.set(v.predicate, []);
    rows.get(v.predicate).push(v);
  }
  const placed = lanes([...rows.entries()].sort(([a], [b]) => a.localeCompare(b)));
  const height = AXIS + placed.reduce((n, r) => n + r.lanes * LANE + 8, 0) + 8;
  const gutter = Math.min(GUTTER, WIDTH / 4);
  const x = (t) => gutter + ((t - span.lo) / (span.hi - span.lo)) * (WIDTH - gutter - RIGHT);
  const root = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${height}`,
    width: WIDTH,
    height,
    class: "timeline-svg",
    role: "group",
    "aria-label": `Timeline: ${shown.length} fact versions, one row per predicate`,
  });
  root.append(svg("defs", {},
    svg("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      svg("rect", { width: 6, height: 6, class: "hatch-bg" }),
      svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, class: "hatch-line" })),
    svg("pattern", { id: "dots", width: 5, height: 5, patternUnits: "userSpaceOnUse" },
      svg("rect", { width: 5, height: 5, class: "dots-bg" }),
      svg("circle", { cx: 2.5, cy: 2.5, r: 1, class: "dots-dot" }))));
  const axis = svg("g", { class: "axis", "aria-hidden": "true" });
  let free = gutter; // a tick's label only where it fits whole, apart from the last one
  for (const [t, label] of ticks(span.lo, span.hi)) {
    axis.append(svg("line", { x1: x(t), x2: x(t), y1: AXIS - 6, y2: height, class: "tick" }));
    const width = label.length * 7 + 6;
    if (x(t) < free || x(t) + width > WIDTH) continue;
    axis.append(svg("text", { x: x(t) + 3, y: AXIS - 10, text: label }));
    free = x(t) + width;
  }
  root.append(axis);
  let y = AXIS;
  for (const row of placed) {
    const h = row.lanes * LANE;
    root.append(svg("rect", { x: 0, y, width: WIDTH, height: h + 4, class: "row-bg" }));
    root.append(svg("text", { x: 8, y: y + 18, class: "row-label", text: fit(row.predicate, gutter - 14, 7.5) },
      svg("title", { text: row.predicate })));
    for (const { v, lane } of row.items) {
      const e = v;
      const status = statusAt(v, known);
      const x0 = x(ms(e.valid_from));
      const x1 = e.valid_to ? x(ms(e.valid_to)) : WIDTH - RIGHT;
      const w = Math.max(x1 - x0, 4);
      const by = y + lane * LANE + 3;
      const holding = holds.has(versionOf(e));
      const label = `${v.object} · ${status}`;
      const text = fit(label, w - 10, 7) === label ? label : fit(v.object, w - 10, 7);
      const g = svg("g", {
        class: `bar-g ${status}${holding ? " holds" : ""}`,
        tabindex: 0,
        role: "button",
        "aria-label": `${describe(v, status)}${holding ? "; true at the cursor" : ""}. Enter: why`,
        "data-version": versionOf(e),
        "data-fact": e.id,
        "data-status": status,
        "data-object": v.object,
        "data-predicate": v.predicate,
        "data-holds": holding ? "true" : "false",
        onclick: () => onOpen(v),
        onkeydown: (ev) => {
          if (ev.key === "Enter" || ev.key === " ") {
            ev.preventDefault();
            onOpen(v);
          }
        },
      },
        svg("title", { text: describe(v, status) }),
        svg("rect", { x: x0, y: by, width: w, height: LANE - 6, rx: 3, class: `bar ${status}${holding ? " holds" : ""}` }),
        e.valid_to ? null : svg("path", { d: `M${x1 - 7},${by + 3} l6,${(LANE - 12) / 2} l-6,${(LANE - 12) / 2}`, class: "open-end" }),
        svg("text", { x: x0 + 5, y: by + 15, class: "bar-label", text }));
      root.append(g);
    }
    y += h + 8;
  }
  const cursor = valid ?? Date.now();
  if (cursor >= span.lo && cursor <= span.hi) {
    root.append(svg("line", { x1: x(cursor), x2: x(cursor), y1: AXIS - 4, y2: height, class: "cursor", "aria-hidden": "true" }));
  }
  const now = Date.now();
  root.append(svg("line", { x1: x(now), x2: x(now), y1: AXIS - 4, y2: height, class: "now", "aria-hidden": "true" }));
  return root;
}
