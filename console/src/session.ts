// The token lives in this tab's session storage only: gone when the tab closes, never in a URL,
// a cookie or local storage (docs/console.md).
const KEY = "ams-console-token";

export function storedToken(storage: Storage = sessionStorage): string {
  return storage.getItem(KEY) ?? "";
}

export function storeToken(token: string, storage: Storage = sessionStorage): void {
  storage.setItem(KEY, token);
}

export function forgetToken(storage: Storage = sessionStorage): void {
  storage.removeItem(KEY);
}
