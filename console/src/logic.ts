// The console's rules that need no browser: encoding, roles, backlogs, rates and the cluster's
// nodes. Unit-tested in logic.test.ts with vitest.

import type { Membership, Metric, Offsets, User } from "./api";

// ------------------------------------------------------------------------- message data
const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** Text as the API's base64 data (UTF-8 first, so any text round-trips). */
export function encodeText(text: string): string {
  let binary = "";
  for (const byte of encoder.encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

export interface Decoded {
  /** The data as text when it is valid UTF-8 without control characters other than whitespace. */
  text: string | null;
  bytes: number;
  /** Printable hexadecimal of the first bytes, for binary data. */
  hex: string;
}

export function decodeData(data: string): Decoded {
  let raw: string;
  try {
    raw = atob(data);
  } catch {
    return { text: null, bytes: 0, hex: "(not base64)" };
  }
  const bytes = Uint8Array.from(raw, (c) => c.charCodeAt(0));
  const hex = Array.from(bytes.slice(0, 64), (b) => b.toString(16).padStart(2, "0")).join(" ");
  let text: string | null = null;
  try {
    const decoded = strictDecoder.decode(bytes);
    // eslint-disable-next-line no-control-regex
    text = /[\u0000-\u0008\u000e-\u001f\u007f]/.test(decoded) ? null : decoded;
  } catch {
    text = null;
  }
  return { text, bytes: bytes.length, hex: bytes.length > 64 ? `${hex} …` : hex };
}

/** "key=value" lines as attributes; blank lines skipped. Throws on a line without "=" or a
 * repeated key, naming the line, so the form can say what is wrong. */
export function parseAttributes(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`Attribute line ${i + 1} is not key=value`);
    const key = line.slice(0, at).trim();
    if (key in out) throw new Error(`Attribute ${key} is given twice`);
    out[key] = line.slice(at + 1);
  });
  return out;
}

// ---------------------------------------------------------------------------- names
/** The last part of a full name: "/projects/p/topics/t" or "projects/p/schemas/s" gives the last. */
export function shortName(full: string): string {
  const parts = full.split("/");
  return parts[parts.length - 1] ?? full;
}

/** The project of a full name ("projects/p/topics/t" → "p"), or "" when it has none. */
export function projectOf(full: string): string {
  const parts = full.replace(/^\//, "").split("/");
  return parts[0] === "projects" && parts.length > 1 ? parts[1] : "";
}

// ---------------------------------------------------------------------------- roles
export const SERVICE_ADMIN = "service_admin";
export const ADMIN_VIEWER = "admin_viewer";
export const METRICS_VIEWER = "metrics_viewer";

export interface Capabilities {
  serviceAdmin: boolean;
  projectAdmin: boolean;
  publisher: boolean;
  consumer: boolean;
  /** Topics and subscriptions the user is in the ACL of (publishers and consumers see only these). */
  topics: string[];
  subscriptions: string[];
}

/** What the console offers a user in a project: what the API's roles allow them (the API still
 * decides: this only keeps out of sight what would be refused). */
export function capabilities(user: User | null, project: string): Capabilities {
  const serviceAdmin = !!user?.service_roles.includes(SERVICE_ADMIN);
  const member: Membership | undefined = user?.projects?.find((m) => m.project === project);
  const roles = member?.roles ?? [];
  const projectAdmin = serviceAdmin || roles.includes("project_admin");
  return {
    serviceAdmin,
    projectAdmin,
    publisher: projectAdmin || roles.includes("publisher"),
    consumer: projectAdmin || roles.includes("consumer"),
    topics: member?.topics ?? [],
    subscriptions: member?.subscriptions ?? [],
  };
}

export function isOperator(user: User | null): boolean {
  return !!user && [SERVICE_ADMIN, ADMIN_VIEWER, METRICS_VIEWER].some((r) => user.service_roles.includes(r));
}

// ---------------------------------------------------------------------------- offsets
/** Messages after the subscription's cursor: the topic's end minus the cursor. */
export function backlog(offsets: Offsets): number {
  return Math.max(offsets.max - offsets.current, 0);
}

/** Seconds left of a lease pulled at ``pulledAt`` (ms) with ``deadline`` seconds, at ``now``. */
export function leaseLeft(pulledAt: number, deadline: number, now: number): number {
  return Math.max(0, Math.ceil((pulledAt + deadline * 1000 - now) / 1000));
}

/** A datetime-local input's value (the browser's local time) as RFC 3339 in UTC, to the second. */
export function localToRfc3339(value: string): string {
  const when = new Date(value);
  if (Number.isNaN(when.getTime())) throw new Error("Give a date and time");
  return when.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** Seconds as "42 s", "3 min 5 s", "2 h 10 min", "3 d 4 h". */
export function humanSeconds(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// ---------------------------------------------------------------------------- metrics
/** The latest value of a metric by name (and labels, when given), or undefined. */
export function metricValue(metrics: Metric[], name: string, labels?: Record<string, string>): number | undefined {
  const found = metrics.find(
    (m) =>
      m.metric === name &&
      (!labels || Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)) &&
      m.timeseries.length > 0,
  );
  if (!found) return undefined;
  return found.timeseries[found.timeseries.length - 1].value;
}

/** Samples taken while a page is open, at most ``capacity`` (the oldest dropped), each a time in
 * seconds and a value per series; ``rate`` turns a counter's samples into per-second rates. */
export class Samples {
  readonly names: string[];
  readonly capacity: number;
  readonly times: number[] = [];
  readonly values: number[][];

  constructor(names: string[], capacity = 120) {
    this.names = names;
    this.capacity = capacity;
    this.values = names.map(() => []);
  }

  add(time: number, values: Record<string, number | undefined>): void {
    if (this.times.length && time <= this.times[this.times.length - 1]) return; // clock went back: skip
    this.times.push(time);
    this.names.forEach((n, i) => this.values[i].push(values[n] ?? Number.NaN));
    if (this.times.length > this.capacity) {
      this.times.shift();
      for (const v of this.values) v.shift();
    }
  }

  get length(): number {
    return this.times.length;
  }

  series(name: string): number[] {
    const i = this.names.indexOf(name);
    if (i < 0) throw new Error(`No series ${name}`);
    return this.values[i];
  }

  /** Per-second increase of a counter between consecutive samples (the first is NaN: no
   * interval yet). A counter that went down (a restart, a reset) counts from zero again. */
  rate(name: string): number[] {
    const v = this.series(name);
    return v.map((value, i) => {
      if (i === 0) return Number.NaN;
      const dt = this.times[i] - this.times[i - 1];
      const prev = v[i - 1];
      if (!(dt > 0) || Number.isNaN(value) || Number.isNaN(prev)) return Number.NaN;
      const delta = value >= prev ? value - prev : value;
      return delta / dt;
    });
  }
}

// ---------------------------------------------------------------------------- cluster
export interface NodeState {
  name: string;
  live: boolean;
  /** Seconds since the epoch when the console last saw it serving, 0 when never. */
  lastSeen: number;
  cpu?: number;
  memory?: number;
  workers: string[];
}

/** A push worker's node: its id is "{node}-{pid}-{6 hex}" (ams_app/push/coordination.py). */
export function workerNode(worker: string): string {
  const m = /^(.*)-\d+-[0-9a-f]{6}$/.exec(worker);
  return m ? m[1] : worker;
}

/** The cluster's nodes from one look: the nodes that have reported metrics (every node that ever
 * served /v1/metrics, from the store) and the live push workers (ZooKeeper's, or the one node's
 * own on the embedded backend), merged with what the console saw before. A node seen before and
 * now without a live worker is down; a node is never forgotten while the page is open. */
export function mergeNodes(
  previous: NodeState[],
  reported: { name: string; cpu?: number; memory?: number }[],
  liveWorkers: string[],
  now: number,
): NodeState[] {
  const byName = new Map<string, NodeState>();
  for (const n of previous) byName.set(n.name, { ...n, live: false, workers: [] });
  for (const r of reported) {
    const n = byName.get(r.name) ?? { name: r.name, live: false, lastSeen: 0, workers: [] };
    byName.set(r.name, { ...n, cpu: r.cpu, memory: r.memory });
  }
  for (const w of liveWorkers) {
    const name = workerNode(w);
    const n = byName.get(name) ?? { name, live: false, lastSeen: 0, workers: [] };
    byName.set(name, { ...n, live: true, lastSeen: now, workers: [...n.workers, w] });
  }
  return [...byName.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/** ams_node.* operational metrics (GET /v1/metrics) as one entry per node. */
export function nodesFromMetrics(metrics: Metric[]): { name: string; cpu?: number; memory?: number }[] {
  const out = new Map<string, { name: string; cpu?: number; memory?: number }>();
  for (const m of metrics) {
    if (m.resource_type !== "ams_node" || !m.timeseries.length) continue;
    const entry = out.get(m.resource_name) ?? { name: m.resource_name };
    const value = m.timeseries[m.timeseries.length - 1].value;
    if (m.metric === "ams_node.cpu_usage") entry.cpu = value;
    if (m.metric === "ams_node.memory_usage") entry.memory = value;
    out.set(m.resource_name, entry);
  }
  return [...out.values()];
}

/** What a look at GET /v1/status says is unreachable: the names in its "unavailable" list
 * (ZooKeeper: the node serves on), or those of a 503's message ("Backend is unavailable:
 * Kafka, ZooKeeper": the node refuses calls). */
export function unreachableFrom(status: { unavailable?: string[] } | undefined, error?: { code: number; message: string }): string[] {
  if (error && error.code === 503) {
    const m = /unavailable:\s*(.+)$/i.exec(error.message);
    return m ? m[1].split(",").map((s) => s.trim()).filter(Boolean) : ["the backend"];
  }
  return status?.unavailable ?? [];
}

/** A dead letter's own attributes: without the CloudPubSubDeadLetter* ones the service added when
 * it moved the message (its source subscription, project, delivery count, publish time). */
export function withoutDeadLetterAttributes(attributes: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(attributes ?? {}).filter(([k]) => !k.startsWith("CloudPubSubDeadLetter")));
}
