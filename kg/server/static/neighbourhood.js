// The neighbourhood: the subject and what is true of it at the cursors (as known then) as a
// small graph, drawn as SVG with no library: its own facts point out, facts about it point
// in; a neighbour is a button that opens it as the subject.
import { dom } from "./dom.js";
import { getAll } from "./api.js";
import { el, svg } from "./util.js";

const MOST = 16; // neighbours drawn; the rest are counted
const clip = (s, n = 18) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

// `outgoing`: the facts true of the subject at the cursors (already read); `at`: the same
// cursors for the facts about it; `open(name)`: show another entity as the subject;
// `current()`: whether this drawing is still wanted (a later one may have begun meanwhile).
export async function drawNeighbourhood(name, outgoing, at, open, current) {
  const box = dom.neighbourhood;
  let incoming = [];
  try {
    incoming = await getAll("/v1/facts", { object: name, ...at, limit: 1000 });
  } catch (err) {
    if (current()) box.replaceChildren(el("p", { class: "error", text: err.message }));
    return;
  }
  if (!current()) return;
  const near = new Map(); // neighbour -> [{predicate, out}]
  for (const f of outgoing) link(near, f.object, f.predicate, true);
  for (const f of incoming) if (f.subject !== name) link(near, f.subject, f.predicate, false);
  const names = [...near.keys()].sort().slice(0, MOST);
  box.dataset.neighbours = names.join("|");
  box.replaceChildren(...[
    el("h3", { text: `${name}'s neighbourhood at the cursors` }),
    names.length ? graph(name, names, near, open, box.clientWidth) :
      el("p", { class: "hint", text: "Nothing links it to another entity then, as known then." }),
    near.size > MOST ? el("p", { class: "hint", text: `and ${near.size - MOST} more` }) : null,
  ].filter(Boolean));
}

function link(near, other, predicate, out) {
  if (!near.has(other)) near.set(other, []);
  near.get(other).push({ predicate, out });
}

function graph(name, names, near, open, width) {
  const W = Math.max(320, width || 600);
  const H = names.length > 8 ? 340 : 260;
  const cx = W / 2, cy = H / 2, rx = W / 2 - 80, ry = H / 2 - 42;
  const out = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "neighbourhood-svg",
    role: "group", "aria-label": `${name} and ${names.length} neighbours` },
  svg("defs", {}, svg("marker", { id: "nb-arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 8,
    markerHeight: 8, orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L8,4 L0,8 z", class: "nb-arrowhead" }))));
  names.forEach((other, i) => {
    const a = (2 * Math.PI * i) / names.length - Math.PI / 2;
    const x = cx + rx * Math.cos(a), y = cy + ry * Math.sin(a);
    const links = near.get(other);
    const said = links.map((l) => (l.out ? `${l.predicate} →` : `← ${l.predicate}`)).join(", ");
    const both = links.some((l) => l.out) && links.some((l) => !l.out);
    const toward = links.some((l) => l.out);
    // The line stops short of both circles so the arrowhead shows.
    const dx = x - cx, dy = y - cy, len = Math.hypot(dx, dy) || 1;
    const [x1, y1] = [cx + (dx / len) * 30, cy + (dy / len) * 30];
    const [x2, y2] = [x - (dx / len) * 22, y - (dy / len) * 22];
    out.append(svg("line", { x1, y1, x2, y2, class: "nb-edge",
      "marker-end": toward || both ? "url(#nb-arrow)" : null, "marker-start": !toward || both ? "url(#nb-arrow)" : null }));
    out.append(svg("text", { x: (cx + x) / 2, y: (cy + y) / 2 - 4, class: "nb-predicate mid", text: clip(said, 28) }));
    const node = svg("g", { class: "nb-node", tabindex: 0, role: "button", "data-entity": other,
      "aria-label": `${other} (${name} ${said.replaceAll("→", "").replaceAll("←", "")}): open as the subject`,
      onclick: () => open(other),
      onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); open(other); } } },
    svg("circle", { cx: x, cy: y, r: 20 }), svg("text", { x, y: y < cy - 1 ? y - 26 : y + 36, class: "nb-name mid", text: clip(other) }));
    out.append(node);
  });
  out.append(svg("g", { class: "nb-center" }, svg("circle", { cx, cy, r: 28 }),
    svg("text", { x: cx, y: cy + 4, class: "nb-name mid", text: clip(name, 12) })));
  return out;
}
