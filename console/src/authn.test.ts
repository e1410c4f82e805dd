import { describe, expect, it } from "vitest";
import { Api, ApiError, type Fetch } from "./api";
import {
  AUTHN_BASE,
  authnApi,
  bindingChanges,
  bindingPath,
  cleanDn,
  distinctUsers,
  hostsOf,
  lastAuthText,
  newBindingBody,
  parseHosts,
  resolveUsers,
  serviceTypeName,
  serviceTypePath,
  userLabel,
  userUuid,
  type Binding,
  type ServiceType,
} from "./authn";

const ams: ServiceType = {
  name: "ams",
  hosts: ["msg.example.org", "msg2.example.org"],
  auth_types: ["x509"],
  type: "ams",
  uuid: "st-1",
  created_on: "2026-11-28T10:00:00Z",
};
const other: ServiceType = { ...ams, name: "other", hosts: ["o.example.org"], uuid: "st-2" };

const binding = (over: Partial<Binding> = {}): Binding => ({
  name: "robot",
  service_uuid: "st-1",
  host: "msg.example.org",
  uuid: "b-1",
  auth_identifier: "CN=robot,O=Example\\, Inc.",
  unique_key: "u-1",
  auth_type: "x509",
  created_on: "2026-11-28T10:00:00Z",
  ...over,
});

interface Sent {
  url: string;
  init: RequestInit;
}

/** A fetch that answers from ``routes`` (url -> [status, body]) and records what was asked. */
function fake(routes: Record<string, [number, unknown]>, sent: Sent[] = []): Fetch {
  return async (url, init) => {
    sent.push({ url, init });
    const [status, body] = routes[url] ?? [404, { error: { code: 404, message: "Not Found", status: "NOT_FOUND" } }];
    return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
  };
}

describe("the AuthN API", () => {
  it("is the session's token on ams serve's /authn/v1", () => {
    const authn = authnApi(new Api("secret"));
    expect(authn.token).toBe("secret");
    expect(AUTHN_BASE).toBe("/authn/v1");
    expect(authn.url("/bindings", { pageSize: 50, pageToken: "" })).toBe("/authn/v1/bindings?pageSize=50");
  });

  it("names service types and bindings as path segments", () => {
    expect(serviceTypePath("ams")).toBe("/service-types/ams");
    expect(bindingPath("a b/c")).toBe("/bindings/a%20b%2Fc");
  });
});

describe("form values", () => {
  it("reads hosts separated by commas, spaces or lines, each once", () => {
    expect(parseHosts(" a.example.org, b.example.org\nc.example.org  a.example.org,,")).toEqual([
      "a.example.org",
      "b.example.org",
      "c.example.org",
    ]);
    expect(parseHosts(" , \n")).toEqual([]);
  });

  it("takes a DN as openssl prints it, keeping an escaped trailing space", () => {
    expect(cleanDn("subject=CN=robot,O=Example\\, Inc.\n")).toBe("CN=robot,O=Example\\, Inc.");
    expect(cleanDn("  Subject = CN=x ")).toBe("CN=x");
    expect(cleanDn("CN=x\\ ")).toBe("CN=x\\ ");
    expect(cleanDn("CN=x\\   ")).toBe("CN=x\\ ");
    expect(cleanDn("   ")).toBe("");
  });

  it("offers the hosts of the chosen service type", () => {
    expect(hostsOf([ams, other], "other")).toEqual(["o.example.org"]);
    expect(hostsOf([ams, other], "")).toEqual([]);
  });

  it("makes a new binding's body, or says what is missing", () => {
    const form = { serviceType: "ams", host: "msg2.example.org", dn: "subject=CN=robot " };
    expect(newBindingBody([ams, other], form)).toEqual({
      service_uuid: "st-1",
      host: "msg2.example.org",
      auth_identifier: "CN=robot",
    });
    expect(() => newBindingBody([ams], { ...form, serviceType: "gone" })).toThrow("Choose a service type");
    expect(() => newBindingBody([ams], { ...form, host: "o.example.org" })).toThrow("Choose one of the hosts of ams");
    expect(() => newBindingBody([ams], { ...form, dn: " \n" })).toThrow("subject DN");
  });

  it("changes only what differs", () => {
    const b = binding();
    expect(bindingChanges(b, b.auth_identifier, b.unique_key)).toEqual({});
    expect(bindingChanges(b, " CN=new\n", b.unique_key)).toEqual({ auth_identifier: "CN=new" });
    expect(bindingChanges(b, b.auth_identifier, "u-2")).toEqual({ unique_key: "u-2" });
    expect(bindingChanges(b, "", "")).toEqual({}); // an emptied field keeps what is there
  });
});

describe("what a binding shows", () => {
  it("names its service type, or shows the uuid of one not listed", () => {
    expect(serviceTypeName([ams, other], "st-2")).toBe("other");
    expect(serviceTypeName([ams], "st-9")).toBe("st-9");
  });

  it("says when it was last used", () => {
    expect(lastAuthText(binding())).toBe("never");
    expect(lastAuthText(binding({ last_auth: "2026-11-29T08:00:00Z" }))).toBe("2026-11-29T08:00:00Z");
  });

  it("lists each user once", () => {
    const page = [binding(), binding({ uuid: "b-2", unique_key: "u-2" }), binding({ uuid: "b-3" })];
    expect(distinctUsers(page)).toEqual(["u-1", "u-2"]);
  });

  it("shows a user's name, a user that is gone, or the uuid it could not look up", () => {
    const names = new Map<string, string | null>([
      ["u-1", "alice"],
      ["u-2", null],
    ]);
    expect(userLabel(names, "u-1")).toBe("alice");
    expect(userLabel(names, "u-2")).toBe("u-2 (no such user)");
    expect(userLabel(names, "u-3")).toBe("u-3");
    expect(userLabel(undefined, "u-1")).toBe("u-1");
  });
});

describe("users by uuid and by name", () => {
  it("looks each uuid up in /v1/users:byUUID, a few at a time", async () => {
    const sent: Sent[] = [];
    const api = new Api(
      "t",
      "/v1",
      fake(
        {
          "/v1/users:byUUID/u-1": [200, { uuid: "u-1", name: "alice" }],
          "/v1/users:byUUID/u-3": [500, { error: { code: 500, message: "boom", status: "INTERNAL" } }],
          "/v1/users:byUUID/u-4": [200, { uuid: "u-4", name: "bob" }],
        },
        sent,
      ),
    );
    const names = await resolveUsers(api, ["u-1", "u-2", "u-3", "u-4"], undefined, 2);
    expect([...names.entries()]).toEqual(
      expect.arrayContaining([
        ["u-1", "alice"],
        ["u-2", null],
        ["u-4", "bob"],
      ]),
    );
    expect(names.has("u-3")).toBe(false);
    expect(sent.map((s) => s.url).sort()).toEqual(["u-1", "u-2", "u-3", "u-4"].map((u) => `/v1/users:byUUID/${u}`));
    expect(sent.every((s) => (s.init.headers as Record<string, string>)["x-api-key"] === "t")).toBe(true);
    expect(await resolveUsers(api, [])).toEqual(new Map());
  });

  it("finds the uuid of a user by name, or says there is none", async () => {
    const api = new Api("t", "/v1", fake({ "/v1/users/alice": [200, { uuid: "u-1", name: "alice" }] }));
    expect(await userUuid(api, " alice ")).toBe("u-1");
    await expect(userUuid(api, "nobody")).rejects.toThrow("There is no AMS user nobody");
    await expect(userUuid(api, "  ")).rejects.toThrow("Give the AMS user's name");
    const down = new Api("t", "/v1", fake({ "/v1/users/alice": [503, { error: { code: 503, message: "down", status: "UNAVAILABLE" } }] }));
    await expect(userUuid(down, "alice")).rejects.toBeInstanceOf(ApiError);
  });
});
