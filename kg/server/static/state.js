// What the views share: the signed-in key's scope, the time view, and navigation.
const ROLES = ["read", "write", "admin"];

export const state = {
  who: null, // {group_id, role, key_id} from /v1/whoami
  subject: null, // the entity name the subject view shows
  valid: null, // valid-time cursor, ms since the epoch (null: now)
  known: null, // known-at step: {iso, us} (null: now)
  navigate: () => {}, // set by app.js: (view, subject?) => void
  // The subject view's own: the subject's every version, the known-at steps ({iso, us}; the
  // last is null: now), the valid-time axis, the versions true at the cursor, the latest
  // at-cursor request (older answers are dropped), and episode names already looked up.
  // Also: whether retired versions are drawn, the width last drawn at, and episodes by id.
  subjectView: {
    versions: [], steps: [], span: { lo: 0, hi: 1 }, holds: new Set(), asked: 0, episodeNames: new Map(),
    retired: false, width: 0, drawn: false, episodes: new Map(),
  },
  searchWired: false, // the search view's controls have their listeners
};

// Whether the signed-in key's role allows `role` (the API checks it again, always).
export const can = (role) =>
  state.who !== null && ROLES.indexOf(state.who.role) >= ROLES.indexOf(role);
