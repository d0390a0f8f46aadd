// Requests to /api/v1 (shapes in gpufleet/api/schemas.py) with the signed-in token, the error
// a refused one fails with, and the banner that reports what could not be read.

import { store } from "./store.js";
import { $, showMessage } from "./util.js";

export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// the server refused the token
export function isUnauthorized(error) {
  return error instanceof ApiError && error.status === 401;
}

export async function api(path) {
  const response = await fetch(API + path, {
    headers: { Authorization: `Bearer ${store.token}`, Accept: "application/json" },
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.message) message = body.message;
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(response.status, message);
  }
  return response.json();
}

export function showError(message) {
  showMessage($("#error-banner"), message);
}
