// One modal dialog (the platform's <dialog>: focus trapped, Escape closes).
import { dom } from "./dom.js";
import { el, interval, table } from "./util.js";
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

function changes(title, list, testid) {
  if (!list.length) return el("p", { class: "hint", text: `${title}: none.` });
  return el("div", {}, el("h3", { text: title }),
    el("ul", { "data-testid": testid }, list.map((c) =>
      el("li", {}, el("strong", { text: c.predicate }), ` ${c.subject} → ${c.object} `,
        el("span", { class: "hint", text: `${interval(c.valid_at, c.invalid_at)}, ${c.status}` })))));
}

function report(r) {
  return el("div", { class: "rollback-report" },
    changes("Removed (believed now before, gone after)", r.removed, "removed"),
    changes("Restored (re-opened)", r.restored, "restored"),
    table(["versions", "count"], [
      ["deleted", r.versions_deleted], ["created", r.versions_created],
      ["re-opened", r.versions_reopened], ["kept", r.versions_kept],
    ].map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), el("td", {}, String(v))))),
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
      apply.disabled = true;
      try {
        const done = await post("/v1/rollback", { episode_ids: [episodeId], dry_run: false });
        out.replaceChildren(el("p", { class: "ok", role: "status", "data-testid": "rollback-applied",
          text: `Applied: ${done.restored.length} restored, ${done.removed.length} removed.` }));
        if (onDone) await onDone();
      } catch (err) {
        apply.disabled = false;
        out.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
      }
    });
    body.splice(2, 0, apply);
  } else {
    body.splice(2, 0, el("p", { class: "hint", text: "Applying a rollback needs an admin key." }));
  }
  openDialog(`Roll back ${label}`, body);
}
