// Forget a subject: the server's dry run first, worded as a person thinks ("also deletes:
// Minji HAS_PET Mochi"), then the erasure after the name is typed exactly, and its receipt.
import { openDialog } from "./dialog.js";
import { post } from "./api.js";
import { el, interval, table } from "./util.js";

const said = (c) => `${c.subject} ${c.predicate} ${c.object}`;
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

// The dry run in words: what goes with the subject, and what goes with its episodes.
function plan(name, r) {
  const also = r.other_facts_removed.map((c) => el("li", {}, el("strong", { text: said(c) }), " ",
    el("span", { class: "hint", text: `(true ${interval(c.valid_at, c.invalid_at)})` })));
  return el("div", { "data-testid": "erase-plan" },
    el("p", {}, `Deletes ${name} and everything said about ${name}: ` +
      `${plural(r.episodes_deleted, "episode")} that mention ${name}` +
      `${r.queue_records_deleted ? ` (${r.queue_records_deleted} still waiting in the queue)` : ""}, ` +
      `${plural(r.fact_versions_deleted, "stored fact version")} and ${plural(r.entities_deleted, "entity", "entities")}.`),
    also.length
      ? el("div", {}, el("h3", { text: "Also deletes (said only in those episodes)" }),
        el("ul", { "data-testid": "also-deletes" }, also))
      : el("p", { class: "hint", "data-testid": "also-deletes-none", text: `Nothing else is lost: every other fact in those episodes is also said elsewhere.` }),
    r.other_facts_recomputed
      ? el("p", { class: "hint", text: `${plural(r.other_facts_recomputed, "other fact")} had support from those ` +
        "episodes; their histories are recomputed without them (as a rollback would)." })
      : null);
}

export async function eraseDialog(name, onErased) {
  openDialog(`Forget ${name}`, [el("p", { class: "hint", text: "Dry run…" })]);
  let dry;
  try {
    dry = await post("/v1/erase/entity", { subject: name, dry_run: true });
  } catch (err) {
    openDialog(`Forget ${name}`, [el("p", { class: "error", role: "alert", text: err.message })]);
    return;
  }
  const input = el("input", { id: "erase-confirm", autocomplete: "off", spellcheck: "false" });
  const keep = el("input", { id: "erase-keep", type: "checkbox" });
  const go = el("button", { type: "button", class: "danger", disabled: true, text: "Erase for good" });
  const out = el("div", { "aria-live": "polite" });
  input.addEventListener("input", () => { go.disabled = input.value !== name; });
  go.addEventListener("click", async () => {
    go.disabled = true;
    try {
      const r = await post("/v1/erase/entity", { subject: name, confirm: input.value, keep_others: keep.checked });
      out.replaceChildren(el("h3", { text: "Receipt" }), receipt(r));
      input.disabled = true;
      onErased(name);
    } catch (err) {
      go.disabled = false;
      out.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    }
  });
  openDialog(`Forget ${name}`, [
    el("p", {}, "Erasure deletes physically; it cannot be undone (a rollback cannot bring it back)."),
    plan(name, dry),
    dry.other_facts_removed.length
      ? el("label", { class: "toggle" }, keep, " keep those other facts (re-stated from a copy of " +
        `their episode with ${name} taken out)`)
      : null,
    el("label", { for: "erase-confirm" }, `Type ${name} to confirm`),
    input, go, out,
  ]);
}

function receipt(r) {
  return table(["what", "count"], [
    ["episodes deleted", r.episodes_deleted], ["entities deleted", r.entities_deleted],
    ["fact versions deleted", r.fact_versions_deleted],
    ["other facts recomputed", r.other_facts_recomputed],
    ["other facts kept (redacted copies)", r.other_facts_kept.length],
    ["communities deleted", r.communities_deleted],
    ["data files compacted", r.files_compacted ? "yes" : "no"],
    ...(r.residue ? [["what remains on disk", r.residue]] : []), // Neo4j: see the receipt
  ].map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), el("td", {}, String(v)))),
  { class: "receipt", "data-testid": "receipt" });
}
