// What the views share: the signed-in key's scope, the time view, and navigation.
const ROLES = ["read", "write", "admin"];

export const state = {
  who: null, // {group_id, role, key_id} from /v1/whoami
  subject: null, // the entity name the subject view shows
  valid: null, // valid-time cursor, ms since the epoch (null: now)
  known: null, // known-at step: {iso, us} (null: now)
  navigate: () => {}, // set by app.js: (view, subject?) => void
};

// Whether the signed-in key's role allows `role` (the API checks it again, always).
export const can = (role) =>
  state.who !== null && ROLES.indexOf(state.who.role) >= ROLES.indexOf(role);
