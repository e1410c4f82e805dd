// The REST API v1 (ams_app/openapi.yaml) as the signed-in user: every call carries the user's own
// token in the x-api-key header, never in a URL, so nothing the API refuses is possible here.

export class ApiError extends Error {
  readonly code: number;
  readonly status: string;
  readonly details?: Record<string, string>;

  constructor(code: number, status: string, message: string, details?: Record<string, string>) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

/** The API's error envelope {"error": {code, message, status}} as an ApiError; anything else
 * (a proxy's HTML page, a cut connection) as one too, with what can be told about it. */
export function errorFrom(httpStatus: number, body: unknown): ApiError {
  if (body && typeof body === "object" && "error" in body) {
    const e = (body as { error: unknown }).error;
    if (e && typeof e === "object") {
      const env = e as { code?: unknown; message?: unknown; status?: unknown; ackIdErrors?: unknown };
      const message = typeof env.message === "string" ? env.message : `HTTP ${httpStatus}`;
      const status = typeof env.status === "string" ? env.status : "UNKNOWN";
      const code = typeof env.code === "number" ? env.code : httpStatus;
      const details =
        env.ackIdErrors && typeof env.ackIdErrors === "object"
          ? (env.ackIdErrors as Record<string, string>)
          : undefined;
      return new ApiError(code, status, message, details);
    }
  }
  return new ApiError(httpStatus, "UNKNOWN", `The server answered HTTP ${httpStatus} without an API error`);
}

export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export interface CallOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined>;
  signal?: AbortSignal;
}

export class Api {
  readonly token: string;
  private readonly base: string;
  private readonly fetcher: Fetch;

  constructor(token: string, base = "/v1", fetcher: Fetch = (i, r) => fetch(i, r)) {
    this.token = token;
    this.base = base;
    this.fetcher = fetcher;
  }

  url(path: string, query?: CallOptions["query"]): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== "") params.set(k, String(v));
    }
    const qs = params.toString();
    return `${this.base}${path}${qs ? `?${qs}` : ""}`;
  }

  async call<T = unknown>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    const headers: Record<string, string> = { "x-api-key": this.token, accept: "application/json" };
    const init: RequestInit = { method, headers, signal: options.signal, credentials: "omit", cache: "no-store" };
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    let response: Response;
    try {
      response = await this.fetcher(this.url(path, options.query), init);
    } catch (err) {
      if (err instanceof DOMException && err.name === "AbortError") throw err;
      throw new ApiError(0, "UNREACHABLE", "The service could not be reached");
    }
    const text = await response.text();
    let parsed: unknown = undefined;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
    }
    if (!response.ok) throw errorFrom(response.status, parsed);
    return (parsed ?? {}) as T;
  }

  get<T = unknown>(path: string, query?: CallOptions["query"], signal?: AbortSignal): Promise<T> {
    return this.call<T>("GET", path, { query, signal });
  }
  post<T = unknown>(path: string, body: unknown = {}, signal?: AbortSignal): Promise<T> {
    return this.call<T>("POST", path, { body, signal });
  }
  put<T = unknown>(path: string, body: unknown = {}): Promise<T> {
    return this.call<T>("PUT", path, { body });
  }
  del<T = unknown>(path: string): Promise<T> {
    return this.call<T>("DELETE", path);
  }
}

/** A path segment of the API: a project, topic, subscription, user or schema name. */
export const seg = (name: string): string => encodeURIComponent(name);

export const projectPath = (project: string) => `/projects/${seg(project)}`;
export const topicPath = (project: string, topic: string) => `${projectPath(project)}/topics/${seg(topic)}`;
export const subPath = (project: string, sub: string) => `${projectPath(project)}/subscriptions/${seg(sub)}`;
export const schemaPath = (project: string, schema: string) => `${projectPath(project)}/schemas/${seg(schema)}`;
export const userPath = (user: string) => `/users/${seg(user)}`;

// ---------------------------------------------------------------- shapes (ams_app/openapi.yaml)
export interface Membership {
  project: string;
  roles: string[];
  topics: string[];
  subscriptions: string[];
}
export interface User {
  uuid: string;
  name: string;
  email: string;
  first_name?: string;
  last_name?: string;
  organization?: string;
  description?: string;
  token?: string;
  service_roles: string[];
  projects?: Membership[];
  created_on: string;
  modified_on: string;
  created_by?: string;
}
export interface Project {
  name: string;
  description?: string;
  created_on: string;
  modified_on: string;
  created_by?: string;
}
export interface Topic {
  name: string;
  schema?: string;
  schemaEncoding?: string;
  messageRetentionDuration?: string;
  created_on: string;
}
export interface PushConfig {
  type: string;
  pushEndpoint: string;
  maxMessages: number;
  authorizationHeader: { type?: string; value?: string };
  retryPolicy: { type?: string; period?: number };
  verificationHash: string;
  verified: boolean;
  mattermostUrl: string;
  mattermostUsername: string;
  mattermostChannel: string;
  base64Decode: boolean;
}
export interface Subscription {
  name: string;
  topic: string;
  pushConfig: PushConfig;
  ackDeadlineSeconds: number;
  retryPolicy?: { minimumBackoff?: string; maximumBackoff?: string };
  deadLetterPolicy?: { deadLetterTopic: string; maxDeliveryAttempts?: number };
  filter?: string;
  enableMessageOrdering?: boolean;
  enableExactlyOnceDelivery?: boolean;
  pushStatus?: string;
  createdOn: string;
}
export interface Message {
  messageId: string;
  data: string;
  attributes?: Record<string, string>;
  publishTime: string;
  orderingKey?: string;
}
export interface ReceivedMessage {
  ackId: string;
  message: Message;
  deliveryAttempt?: number;
}
export interface Offsets {
  max: number;
  min: number;
  current: number;
}
export interface Schema {
  uuid: string;
  name: string;
  type: "json" | "avro" | "protobuf";
  schema: unknown;
}
export interface Metric {
  metric: string;
  metric_type: string;
  value_type: string;
  resource_type: string;
  resource_name: string;
  timeseries: { timestamp: string; value: number }[];
  description: string;
  labels?: Record<string, string>;
}
export interface Registration {
  uuid: string;
  name: string;
  first_name?: string;
  last_name?: string;
  email: string;
  organization?: string;
  description?: string;
  status: string;
  registered_at?: string;
  modified_at?: string;
  modified_by?: string;
  decline_comment?: string;
}
export interface Status {
  status: string;
  push_servers?: { endpoint: string; status: string }[];
  push_functionality?: string;
  unavailable?: string[];
}
