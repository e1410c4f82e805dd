import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
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

export interface ChartSeries {
  label: string;
  values: number[];
  unit?: string;
}

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

/** A time chart (uPlot) of series sampled at ``times`` (seconds since the epoch), with its
 * latest values in text beside it for screen readers and narrow screens. */
export function TimeChart({ title, times, series }: { title: string; times: number[]; series: ChartSeries[] }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const key = series.map((s) => s.label).join("|");

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const width = Math.max(280, el.clientWidth || 600);
    plot.current = new uPlot(
      {
        width,
        height: 220,
        series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLOURS[i % COLOURS.length], width: 2 }))],
        axes: [{}, { size: 60 }],
        scales: { x: { time: true } },
        legend: { show: true },
      },
      [times, ...series.map((s) => s.values)],
      el,
    );
    const resize = () => plot.current?.setSize({ width: Math.max(280, el.clientWidth), height: 220 });
    const observer = typeof ResizeObserver === "function" ? new ResizeObserver(resize) : undefined;
    observer?.observe(el);
    return () => {
      observer?.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  useEffect(() => {
    plot.current?.setData([times, ...series.map((s) => s.values)]);
  });

  const latest = series.map((s) => {
    const v = [...s.values].reverse().find((x) => !Number.isNaN(x));
    return `${s.label}: ${v === undefined ? "—" : Number.isInteger(v) ? v : v.toFixed(2)}${s.unit ? ` ${s.unit}` : ""}`;
  });
  return (
    <figure class="chart" data-testid={`chart-${title}`} data-points={times.length}>
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={`${title}: ${latest.join(", ")}`} />
      <p class="chart-latest">
        <small>
          {times.length} samples; latest {latest.join(", ")}
        </small>
      </p>
    </figure>
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
