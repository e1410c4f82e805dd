// The AuthN bindings page's rules that need no browser (pages/authn.tsx): its calls go to the
// management API that `ams serve` answers under /authn/v1 for the console (docs/authn.md,
// "Managing bindings from the console / through ams serve"), with the signed-in user's token.
// Unit-tested in authn.test.ts with vitest.

import { Api, ApiError, seg, userPath, type User } from "./api";

/** Where `ams serve` answers AuthN's management calls (service types and bindings). */
export const AUTHN_BASE = "/authn/v1";

/** The AuthN management API as the signed-in user: the session's token, the /authn/v1 base. */
export function authnApi(api: Api): Api {
  return new Api(api.token, AUTHN_BASE);
}

// ---------------------------------------------------------------- shapes (ams_app/authn/openapi.yaml)
export interface ServiceType {
  name: string;
  hosts: string[];
  auth_types: string[];
  type: string;
  uuid: string;
  created_on: string;
  updated_on?: string;
}
export interface Binding {
  name: string;
  service_uuid: string;
  host: string;
  uuid: string;
  /** The certificate's subject DN (RFC 4514). */
  auth_identifier: string;
  /** The AMS user's uuid. */
  unique_key: string;
  auth_type: string;
  created_on: string;
  updated_on?: string;
  last_auth?: string;
}
export interface BindingsPage {
  bindings: Binding[];
  nextPageToken: string;
  totalSize: number;
}

export const serviceTypePath = (name: string) => `/service-types/${seg(name)}`;
export const bindingPath = (name: string) => `/bindings/${seg(name)}`;

// ---------------------------------------------------------------------------- form values
/** Hosts typed one per line, or separated by commas or spaces: each once, in the order typed. */
export function parseHosts(text: string): string[] {
  const out: string[] = [];
  for (const host of text.split(/[\s,]+/)) {
    if (host && !out.includes(host)) out.push(host);
  }
  return out;
}

/** A DN as pasted: without the blanks around it (a trailing space escaped as "\ " is kept) and
 * without the "subject=" that `openssl x509 -noout -subject` prints before it. */
export function cleanDn(text: string): string {
  const trimmed = text.replace(/^\s+/, "").replace(/(?<!\\)\s+$/, "");
  return trimmed.replace(/^subject\s*=\s*/i, "");
}

/** The name of a binding's service type, or its uuid when no listed type has it. */
export function serviceTypeName(types: ServiceType[], uuid: string): string {
  return types.find((t) => t.uuid === uuid)?.name ?? uuid;
}

/** The hosts a new binding may be on: the chosen service type's (none before a choice). */
export function hostsOf(types: ServiceType[], name: string): string[] {
  return types.find((t) => t.name === name)?.hosts ?? [];
}

export interface NewBinding {
  service_uuid: string;
  host: string;
  auth_identifier: string;
  unique_key: string;
}

/** The body of POST /bindings/{name} but its user (``unique_key``, looked up by name after
 * this); throws, saying what is missing, before any call. */
export function newBindingBody(
  types: ServiceType[],
  form: { serviceType: string; host: string; dn: string },
): Omit<NewBinding, "unique_key"> {
  const st = types.find((t) => t.name === form.serviceType);
  if (!st) throw new Error("Choose a service type");
  if (!st.hosts.includes(form.host)) throw new Error(`Choose one of the hosts of ${st.name}`);
  const dn = cleanDn(form.dn);
  if (!dn) throw new Error("Give the certificate's subject DN");
  return { service_uuid: st.uuid, host: form.host, auth_identifier: dn };
}

/** The body of PUT /bindings/{name}: only what changed (empty: nothing to save). */
export function bindingChanges(binding: Binding, dn: string, userUuid: string): Partial<NewBinding> {
  const changes: Partial<NewBinding> = {};
  const cleaned = cleanDn(dn);
  if (cleaned && cleaned !== binding.auth_identifier) changes.auth_identifier = cleaned;
  if (userUuid && userUuid !== binding.unique_key) changes.unique_key = userUuid;
  return changes;
}

// ---------------------------------------------------------------------------- users
/** The users a page of bindings names, each once, in order. */
export function distinctUsers(bindings: Binding[]): string[] {
  return [...new Set(bindings.map((b) => b.unique_key))];
}

/** What is known of a user's name, by uuid: the name, or null for no such user. A uuid absent
 * from the map could not be looked up. */
export type UserNames = Map<string, string | null>;

/** Looks up the name of each user (GET /v1/users:byUUID/{uuid}), a few at a time. A user that
 * does not exist is null; a lookup that fails otherwise leaves the uuid out (shown as it is). */
export async function resolveUsers(api: Api, uuids: string[], signal?: AbortSignal, atOnce = 8): Promise<UserNames> {
  const names: UserNames = new Map();
  for (let i = 0; i < uuids.length; i += atOnce) {
    await Promise.all(
      uuids.slice(i, i + atOnce).map(async (uuid) => {
        try {
          names.set(uuid, (await api.get<User>(`/users:byUUID/${seg(uuid)}`, undefined, signal)).name);
        } catch (err) {
          if (err instanceof ApiError && err.code === 404) names.set(uuid, null);
          else if (err instanceof DOMException && err.name === "AbortError") throw err;
        }
      }),
    );
  }
  return names;
}

/** How a binding's user shows: the name, or the uuid with why there is no name. */
export function userLabel(names: UserNames | undefined, uuid: string): string {
  const name = names?.get(uuid);
  if (name) return name;
  return name === null ? `${uuid} (no such user)` : uuid;
}

/** The uuid of the user called ``name`` (GET /v1/users/{name}): what a binding's unique_key holds. */
export async function userUuid(api: Api, name: string): Promise<string> {
  const wanted = name.trim();
  if (!wanted) throw new Error("Give the AMS user's name");
  try {
    return (await api.get<User>(userPath(wanted))).uuid;
  } catch (err) {
    if (err instanceof ApiError && err.code === 404) throw new Error(`There is no AMS user ${wanted}`);
    throw err;
  }
}

/** When a binding was last used to get a token, or that it never was. */
export function lastAuthText(binding: Binding): string {
  return binding.last_auth || "never";
}
