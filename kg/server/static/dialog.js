// One modal dialog (the platform's <dialog>: focus trapped, Escape closes).
import { dom } from "./dom.js";
import { busy, el, interval, when } from "./util.js";
import { post } from "./api.js";
import { can } from "./state.js";

export function openDialog(title, children) {
  const d = dom.dialog;
  dom.dialogH.textContent = title;
  dom.dialogBody.replaceChildren(...children);
  if (!d.open) d.showModal();
  const first = dom.dialogBody.querySelector("input, button");
  if (first) first.focus();
}

export function closeDialog() {
  const d = dom.dialog;
  if (d.open) d.close();
}

const said = (c) => `${c.subject} ${c.predicate} ${c.object}`;
const span = (c) => interval(c.valid_at, c.invalid_at);
const word = (status) => (status === "active" ? "current" : status); // the store's word, the page's

function changes(title, items, testid) {
  if (!items.length) return null;
  return el("div", {}, el("h3", { text: title }), el("ul", { "data-testid": testid }, items));
}

// The dry run as a person reads it: a fact whose closed version goes and whose open one
// comes back is one line ("Oslo: end 2023-01-01 removed → current again"), never listed
// as both removed and restored.
function report(r) {
  const back = new Map(r.restored.map((c) => [said(c), c]));
  const reopened = [];
  const removed = [];
  for (const c of r.removed) {
    const again = back.get(said(c));
    if (again) {
      back.delete(said(c));
      const change = c.invalid_at && !again.invalid_at
        ? `end ${when(c.invalid_at)} removed → ${again.status === "contested" ? "contested" : "current"} again`
        : `${span(c)} becomes ${span(again)}`;
      reopened.push(el("li", {}, el("strong", { text: said(c) }), `: ${change}`));
    } else {
      removed.push(el("li", {}, el("strong", { text: said(c) }), " ",
        el("span", { class: "hint", text: `(${span(c)}, ${word(c.status)}) no longer believed` })));
    }
  }
  const restored = [...back.values()].map((c) => el("li", {}, el("strong", { text: said(c) }), " ",
    el("span", { class: "hint", text: `(${span(c)}) believed again` })));
  const nothing = !removed.length && !reopened.length && !restored.length;
  return el("div", { class: "rollback-report" },
    changes("No longer believed", removed, "removed"),
    changes("Believed again (what this episode had closed)", reopened, "reopened"),
    changes("Believed again", restored, "restored"),
    nothing ? el("p", { class: "hint", text: "No fact changes: what this episode said is also said by others." }) : null,
    el("p", { class: "hint", "data-testid": "version-counts" },
      `Stored versions of these facts: ${r.versions_deleted} deleted, ${r.versions_created} written, ` +
      `${r.versions_reopened} re-opened, and ${r.versions_kept} kept as they are ` +
      "(the rest of these facts' history, which other episodes still support)."),
    r.already_rolled_back.length ? el("p", { text: "Already rolled back: " + r.already_rolled_back.join(", ") }) : null);
}

// Roll back an episode: the dry run's diff first; applying it needs an admin key.
export async function rollbackDialog(episodeId, label, onDone) {
  const out = el("div", { "aria-live": "polite" });
  openDialog(`Roll back ${label}`, [el("p", { class: "hint", text: "Dry run…" }), out]);
  let plan;
  try {
    plan = await post("/v1/rollback", { episode_ids: [episodeId] });
  } catch (err) {
    openDialog(`Roll back ${label}`, [el("p", { class: "error", role: "alert", text: err.message })]);
    return;
  }
  const body = [
    el("p", {}, "Dry run: what undoing this episode would change. The graph then answers " +
      "every as-of question as if it had never been ingested."),
    el("div", { "data-testid": "dry-run" }, report(plan)),
    out,
  ];
  if (can("admin")) {
    const apply = el("button", { type: "button", class: "danger", text: "Apply rollback" });
    apply.addEventListener("click", async () => {
      if (busy(apply, true, "Applying…")) return;
      try {
        const done = await post("/v1/rollback", { episode_ids: [episodeId], dry_run: false });
        busy(apply, false, "Applied");
        apply.disabled = true; // done: once is all
        out.replaceChildren(el("p", { class: "ok", role: "status", "data-testid": "rollback-applied",
          text: `Applied: ${done.restored.length} restored, ${done.removed.length} removed.` }));
        if (onDone) await onDone();
      } catch (err) {
        busy(apply, false, "Apply rollback");
        out.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
      }
    });
    body.splice(2, 0, apply);
  } else {
    body.splice(2, 0, el("p", { class: "hint", text: "Applying a rollback needs an admin key." }));
  }
  openDialog(`Roll back ${label}`, body);
}
