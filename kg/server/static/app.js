// The inspector's shell: sign-in, roles, tabs, and the state the views share.
import { dom } from "./dom.js";
import { ApiError, get, session } from "./api.js";
import { showOverview } from "./overview.js";
import { showReview } from "./review.js";
import { showSearch } from "./search.js";
import { initSubject, linked, openSubject } from "./subject.js";

import { can, state } from "./state.js";

function showView(name) {
  for (const b of dom.tabs.querySelectorAll("button")) {
    if (b.dataset.view === name) b.setAttribute("aria-current", "page");
    else b.removeAttribute("aria-current");
  }
  for (const v of ["subject", "search", "review", "overview"]) dom[`view${v[0].toUpperCase()}${v.slice(1)}`].hidden = v !== name;
  if (name === "overview") showOverview();
  if (name === "search") showSearch();
  if (name === "review") {
    dom.reviewStatus.textContent = "";
    showReview();
  }
}
state.navigate = (view, subject) => {
  showView(view);
  if (subject) openSubject(subject);
};

async function signIn(key) {
  const who = await get("/v1/whoami", undefined, key);
  state.who = who;
  session.key = key;
  dom.login.hidden = true;
  dom.tabs.hidden = false;
  dom.who.hidden = false;
  dom.whoText.textContent = `group ${who.group_id} · role ${who.role}`;
  document.body.dataset.role = who.role;
  for (const node of document.querySelectorAll("[data-role]")) {
    if (!can(node.dataset.role)) node.remove();
  }
  initSubject();
  showView("subject");
  const shared = linked(location.hash);
  if (shared) await openSubject(shared.subject, { at: shared.at });
}

function signOut() {
  session.key = null;
  location.reload();
}

dom.loginForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = dom.key;
  const key = input.value.trim();
  input.value = "";
  try {
    await signIn(key);
  } catch (err) {
    session.key = null;
    dom.loginError.textContent =
      err instanceof ApiError ? `Not signed in: ${err.message}` : "Not signed in: the server did not answer.";
  }
});
dom.logout.addEventListener("click", signOut);
for (const b of dom.tabs.querySelectorAll("button")) {
  b.addEventListener("click", () => showView(b.dataset.view));
}

if (session.key) {
  signIn(session.key).catch(() => {
    session.key = null;
  });
}
