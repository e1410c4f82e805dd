// The charts: uPlot (a small, kept charting library), in a module of their own so that what
// does not draw charts does not load it.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

/** The x range of samples at ``times``: at least the last minute before the latest (or ``now``). */
export function timeRange(times: ArrayLike<number>, now: number): [number, number] {
  if (!times.length) return [now - 60, now];
  const first = times[0];
  const last = times[times.length - 1];
  return last - first < 60 ? [last - 60, last + 1] : [first, last];
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
        // at least the last minute, so that the first samples do not stretch over years
        // (from the samples themselves: uPlot widens a single point to 86,400 of its units)
        scales: { x: { time: true, range: (u) => timeRange(u.data[0] as number[], Date.now() / 1000) } },
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

