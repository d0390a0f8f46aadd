// Signing in and out: the token (from ?token=, kept out of the address bar, or the sign-in
// form) in sessionStorage, checked with GET /api/v1/whoami; showing the dashboard or the
// sign-in form, and starting or stopping the live connection.

import { api, isUnauthorized } from "./api.js";
import { ALL_PARTS, markDirty } from "./refresh.js";
import { store } from "./store.js";
import { connect, disconnect, setLive } from "./stream.js";
import { $, showMessage } from "./util.js";

const TOKEN_KEY = "gpufleet.token";

export function takeToken() {
  const url = new URL(window.location.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    url.searchParams.delete("token");
    // keep the token out of the address bar, history and bookmarks
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

export function signOut(message) {
  disconnect();
  store.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#dashboard").hidden = true;
  $("#sign-out").hidden = true;
  $("#whoami").textContent = "";
  setLive("disconnected", "signed out");
  showMessage($("#sign-in-error"), message);
  $("#sign-in").hidden = false;
  $("#token-input").focus();
}

export async function start(token) {
  store.token = token;
  let who;
  try {
    who = await api("/whoami");
  } catch (error) {
    signOut(isUnauthorized(error) ? "That token was refused." : error.message);
    return;
  }
  $("#sign-in").hidden = true;
  $("#dashboard").hidden = false;
  $("#sign-out").hidden = false;
  $("#whoami").textContent = `${who.tenant} · ${who.role}`;
  markDirty(...ALL_PARTS);
  connect();
}

export function wireSession() {
  $("#sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("#token-input").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#token-input").value = "";
    start(token);
  });
  $("#sign-out").addEventListener("click", () => signOut(""));
}
