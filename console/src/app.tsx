import { createContext } from "preact";
import { useCallback, useContext, useEffect, useRef, useState } from "preact/hooks";
import { Api, ApiError, type User } from "./api";

export const BASE = "/console";
export const href = (path: string): string => `${BASE}${path}`;

export interface Session {
  api: Api;
  user: User;
  reloadUser: () => Promise<void>;
  signOut: () => void;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside a signed-in page");
  return session;
}

export interface Loaded<T> {
  data: T | undefined;
  error: ApiError | Error | undefined;
  loading: boolean;
  reload: () => void;
}

/** Runs ``load`` on mount and whenever ``deps`` change (and on reload), keeping the last data
 * while a new load runs; a load that a newer one overtook is ignored. */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    const ctl = new AbortController();
    setLoading(true);
    load(ctl.signal).then(
      (value) => {
        if (ctl.signal.aborted) return;
        setData(value);
        setError(undefined);
        setLoading(false);
      },
      (err: unknown) => {
        if (ctl.signal.aborted) return;
        setError(err instanceof Error ? err : new Error(String(err)));
        setLoading(false);
      },
    );
    return () => ctl.abort();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  return { data, error, loading, reload };
}

/** Calls ``tick`` every ``ms`` while the component is mounted and the tab is visible. */
export function useInterval(tick: () => void, ms: number): void {
  const saved = useRef(tick);
  saved.current = tick;
  useEffect(() => {
    const id = window.setInterval(() => {
      if (document.visibilityState !== "hidden") saved.current();
    }, ms);
    return () => window.clearInterval(id);
  }, [ms]);
}

export interface Action {
  busy: boolean;
  error: Error | undefined;
  done: string;
  run: (what: () => Promise<string | void>) => Promise<boolean>;
  clear: () => void;
}

/** One form's action: busy while it runs, its error (the API's message) or its outcome. */
export function useAction(): Action {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [done, setDone] = useState("");
  const run = useCallback(async (what: () => Promise<string | void>) => {
    setBusy(true);
    setError(undefined);
    setDone("");
    try {
      const said = await what();
      setDone(said || "Done");
      return true;
    } catch (err) {
      setError(err instanceof Error ? err : new Error(String(err)));
      return false;
    } finally {
      setBusy(false);
    }
  }, []);
  const clear = useCallback(() => {
    setError(undefined);
    setDone("");
  }, []);
  return { busy, error, done, run, clear };
}
