import type { ComponentChildren } from "preact";
import { ApiError } from "./api";
import type { Action } from "./app";

export function ErrorNote({ error }: { error: Error | undefined }) {
  if (!error) return null;
  const api = error instanceof ApiError ? error : undefined;
  return (
    <p role="alert" class="error" data-testid="error">
      {api && api.code ? <strong>{api.code} {api.status}: </strong> : null}
      {error.message}
      {api?.details ? (
        <ul>
          {Object.entries(api.details).map(([id, why]) => (
            <li key={id}>
              <code>{id}</code>: {why}
            </li>
          ))}
        </ul>
      ) : null}
    </p>
  );
}

export function Busy({ label, onCancel }: { label: string; onCancel?: () => void }) {
  return (
    <div class="busy" role="status" aria-live="polite">
      <span>{label}</span>
      <progress aria-label={label} />
      {onCancel ? (
        <button type="button" class="secondary outline" onClick={onCancel}>
          Cancel
        </button>
      ) : null}
    </div>
  );
}

/** A form action's state under its form: progress, the API's error, or what it did. */
export function ActionState({ action, label = "Working…" }: { action: Action; label?: string }) {
  if (action.busy) return <Busy label={label} />;
  if (action.error) return <ErrorNote error={action.error} />;
  if (action.done)
    return (
      <p role="status" class="done" data-testid="done">
        {action.done}
      </p>
    );
  return null;
}

export function Loading<T>({
  loaded,
  label,
  children,
}: {
  loaded: { data: T | undefined; error: Error | undefined; loading: boolean };
  label: string;
  children: (data: T) => ComponentChildren;
}) {
  if (loaded.data === undefined) {
    if (loaded.error) return <ErrorNote error={loaded.error} />;
    return <Busy label={`Loading ${label}…`} />;
  }
  return (
    <>
      {loaded.error ? <ErrorNote error={loaded.error} /> : null}
      {children(loaded.data)}
    </>
  );
}

export function Field({ label, children, hint }: { label: string; children: ComponentChildren; hint?: string }) {
  return (
    <label>
      {label}
      {children}
      {hint ? <small>{hint}</small> : null}
    </label>
  );
}

export function Confirmed({
  label,
  question,
  onConfirm,
  disabled,
}: {
  label: string;
  question: string;
  onConfirm: () => void;
  disabled?: boolean;
}) {
  return (
    <button
      type="button"
      class="secondary"
      disabled={disabled}
      onClick={() => {
        if (window.confirm(question)) onConfirm();
      }}
    >
      {label}
    </button>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** The buttons of a list the API answers a page at a time (``pageToken``/``nextPageToken``):
 * back to the first page once past it, and on to the next while there is one. */
export function Pager({ current, next, onPage }: { current: string; next: string; onPage: (token: string) => void }) {
  if (!current && !next) return null;
  return (
    <p class="row">
      {current ? (
        <button type="button" class="secondary outline" onClick={() => onPage("")}>
          First page
        </button>
      ) : null}
      {next ? (
        <button type="button" class="secondary outline" onClick={() => onPage(next)}>
          Next page
        </button>
      ) : null}
    </p>
  );
}
