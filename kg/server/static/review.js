// The review queue: what kg holds back rather than believes (contested claims, quarantined
// items), each with why, and accept / reject / edit, each stored as the person's own
// user-channel episode (POST /v1/review/{id}/decision), so a rollback of it undoes it.
import { dom } from "./dom.js";
import { getAll, post } from "./api.js";
import { can, state } from "./state.js";
import { busy, el, interval, say, short, when } from "./util.js";

export async function showReview() {
  const root = dom.review;
  root.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
  let items;
  try {
    items = await getAll("/v1/review", { limit: 100 }, 500);
  } catch (err) {
    root.replaceChildren(el("p", { class: "error", role: "alert", text: err.message }));
    return;
  }
  const decides = can("write") && state.who.channel === "user";
  root.replaceChildren(
    el("p", { class: "hint" }, decides
      ? "Each decision is stored as your own user-channel episode, at the claim's own time, and " +
        "goes through the timeline rules like any statement: roll it back (Overview) to put the item back here."
      : "Deciding needs a write key on the user channel; this key can only look."),
    items.length
      ? el("ol", { class: "review-list", "data-testid": "review" }, items.map((it) => card(it, decides)))
      : el("p", { class: "hint", "data-testid": "review-empty", text: "Nothing waits for review." }),
  );
}

function card(it, decides) {
  const ep = it.episode;
  const status = el("p", { class: "status", role: "status" });
  const head = it.kind === "contested" ? "Contested claim" : "Quarantined by the instruction guard";
  return el("li", { class: "card review-item", dataset: { item: it.id, kind: it.kind } },
    el("h3", {}, el("span", { class: `badge ${it.kind}`, text: head }), " ", it.said
      ? `${it.said.subject} ${it.said.predicate} ${it.said.object}` : "a passage"),
    it.claim ? el("p", { class: "hint", text: `claimed true ${interval(it.claim.valid_from, it.claim.valid_to)}` }) : null,
    el("p", { class: "why-held", "data-testid": "why-held", text: it.why }),
    it.opposing.length ? el("p", {}, "kg believes instead: ", ...it.opposing.map((o, i) => el("span", {},
      i ? "; " : "", el("strong", { text: `${o.subject} ${o.predicate} ${o.object}` }),
      ` (${interval(o.valid_from, o.valid_to)}, ${o.trust} trust)`))) : null,
    it.quote ? el("blockquote", { "data-testid": "quote", text: it.quote }) : null,
    el("p", { class: "hint", text: `From “${ep.name || `episode ${short(ep.id)}`}”: ${ep.source}, ` +
      `${ep.channel} channel${it.source_description ? ` · ${it.source_description}` : ""}, happened ${when(ep.reference_time)}` }),
    decides ? actions(it, status) : null,
    status);
}

function actions(it, status) {
  const row = el("div", { class: "row review-actions" });
  const decide = async (button, action, object) => {
    if (busy(button, true, "Saving…")) return;
    try {
      const r = await post(`/v1/review/${encodeURIComponent(it.id)}/decision`, { action, ...(object ? { object } : {}) });
      say(status, `Saved as your episode ${short(r.episode_uuid)}: ${r.summary.facts_added} added, ` +
        `${r.summary.facts_closed} closed.`, "ok");
      await showReview();
      say(dom.reviewStatus, `Decision saved (episode ${short(r.episode_uuid)}); roll it back from the overview to undo it.`, "ok");
    } catch (err) {
      busy(button, false, label[action]);
      say(status, err.message, "error");
    }
  };
  const label = { accept: "Accept", reject: "Reject", edit: "Save the right value" };
  if (it.said) {
    const b = el("button", { type: "button", text: label.accept, title: "State it as true, as you" });
    b.addEventListener("click", () => decide(b, "accept"));
    row.append(b);
  }
  const no = el("button", { type: "button", text: label.reject, title: it.kind === "contested"
    ? "Restate what kg believes, as you" : "Keep it out of memory" });
  no.addEventListener("click", () => decide(no, "reject"));
  row.append(no);
  if (it.said) {
    const id = `edit-${it.id.replace(/[^a-zA-Z0-9-]/g, "-")}`;
    const value = el("input", { id, autocomplete: "off", required: true });
    const save = el("button", { type: "submit", text: label.edit });
    const form = el("form", { class: "review-edit" },
      el("label", { for: id, text: `Right value of ${it.said.predicate}` }), value, save);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (value.value.trim()) decide(save, "edit", value.value.trim());
    });
    row.append(form);
  }
  return row;
}
