import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import axe from "axe-core";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Api, type User } from "./api";
import { SessionContext, type Session } from "./app";
import { AuthnPage } from "./pages/authn";

const admin: User = {
  uuid: "u-admin",
  name: "root",
  email: "root@example.org",
  service_roles: ["service_admin"],
  created_on: "",
  modified_on: "",
};

const serviceTypes = {
  service_types: [
    { name: "ams", hosts: ["msg.example.org", "msg2.example.org"], auth_types: ["x509"], type: "ams", uuid: "st-1", created_on: "c" },
  ],
};
const bindings = {
  bindings: [
    {
      name: "robot",
      service_uuid: "st-1",
      host: "msg.example.org",
      uuid: "b-1",
      auth_identifier: "CN=robot,O=Example",
      unique_key: "u-1",
      auth_type: "x509",
      created_on: "c",
      last_auth: "2026-11-29T08:00:00Z",
    },
    {
      name: "orphan",
      service_uuid: "st-1",
      host: "msg2.example.org",
      uuid: "b-2",
      auth_identifier: "CN=orphan",
      unique_key: "u-gone",
      auth_type: "x509",
      created_on: "c",
    },
  ],
  nextPageToken: "",
  totalSize: 2,
};

interface Call {
  method: string;
  url: string;
  body: unknown;
  token: string;
}
let calls: Call[] = [];

function answer(status: number, body: unknown): Response {
  return new Response(status === 204 ? null : JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

const notFound = { error: { code: 404, message: "User doesn't exist", status: "NOT_FOUND" } };

beforeEach(() => {
  calls = [];
  vi.stubGlobal("fetch", async (url: string, init: RequestInit) => {
    const headers = init.headers as Record<string, string>;
    const body = init.body ? JSON.parse(String(init.body)) : undefined;
    calls.push({ method: init.method ?? "GET", url, body, token: headers["x-api-key"] });
    const key = `${init.method} ${url.split("?")[0]}`;
    switch (key) {
      case "GET /authn/v1/service-types":
        return answer(200, serviceTypes);
      case "GET /authn/v1/bindings":
        return answer(200, bindings);
      case "GET /v1/users:byUUID/u-1":
        return answer(200, { uuid: "u-1", name: "alice" });
      case "GET /v1/users/bob":
        return answer(200, { uuid: "u-2", name: "bob" });
      case "POST /authn/v1/bindings/new-robot":
        return answer(201, { ...bindings.bindings[0], ...body, name: "new-robot" });
      case "PUT /authn/v1/bindings/robot":
        return answer(200, { ...bindings.bindings[0], ...body });
      case "DELETE /authn/v1/bindings/orphan":
        return answer(204, null);
      default:
        return answer(404, notFound);
    }
  });
});

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

function renderAs(user: User) {
  const session: Session = { api: new Api("tok"), user, reloadUser: async () => undefined, signOut: () => undefined };
  return render(
    <SessionContext.Provider value={session}>
      <AuthnPage />
    </SessionContext.Provider>,
  );
}

const input = (label: string) => screen.getByLabelText(label, { exact: false }) as HTMLInputElement;

describe("AuthnPage", () => {
  it("is for service admins only, and calls nothing for anyone else", () => {
    renderAs({ ...admin, service_roles: ["admin_viewer"] });
    expect(screen.getByText(/Only service admins/)).toBeTruthy();
    expect(calls).toEqual([]);
  });

  it("lists service types and bindings with their users' names, and passes axe", async () => {
    const { container } = renderAs(admin);
    await screen.findByText("alice");
    const [types, table] = screen.getAllByRole("table");
    expect(within(types).getByText("msg.example.org, msg2.example.org")).toBeTruthy();
    const robot = within(table).getByText("robot").closest("tr") as HTMLElement;
    expect([...robot.querySelectorAll("td")].slice(0, 6).map((td) => td.textContent)).toEqual([
      "robot",
      "ams",
      "msg.example.org",
      "CN=robot,O=Example",
      "alice",
      "2026-11-29T08:00:00Z",
    ]);
    expect(within(table).getByText("u-gone (no such user)")).toBeTruthy();
    expect(within(table).getByText("never")).toBeTruthy();
    expect(container.querySelectorAll("th:not([scope='col'])").length).toBe(0);
    expect(calls.every((c) => c.token === "tok")).toBe(true);
    const results = await axe.run(container, { rules: { "color-contrast": { enabled: false } } });
    const serious = results.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
    expect(serious.map((v) => v.id)).toEqual([]);
  });

  it("creates a binding for a user named, on a host of the service type chosen", async () => {
    renderAs(admin);
    await screen.findByText("alice");
    fireEvent.input(input("Binding name"), { target: { value: "new-robot" } });
    fireEvent.input(screen.getAllByLabelText("AMS user")[0], { target: { value: "bob" } });
    fireEvent.change(screen.getByLabelText("Host"), { target: { value: "msg2.example.org" } });
    fireEvent.input(screen.getAllByLabelText("Certificate DN", { exact: false })[0], { target: { value: "subject=CN=new\n" } });
    fireEvent.submit(screen.getByRole("button", { name: "Create binding" }).closest("form") as HTMLFormElement);
    await screen.findByText(/Binding new-robot created/);
    const post = calls.find((c) => c.method === "POST");
    expect(post).toEqual({
      method: "POST",
      url: "/authn/v1/bindings/new-robot",
      body: { service_uuid: "st-1", host: "msg2.example.org", auth_identifier: "CN=new", unique_key: "u-2" },
      token: "tok",
    });
  });

  it("edits a binding's DN and user, sending only what changed", async () => {
    renderAs(admin);
    await screen.findByText("alice");
    fireEvent.click(screen.getByRole("button", { name: "Edit binding robot" }));
    const form = screen.getByRole("heading", { name: "Change binding robot" }).nextElementSibling as HTMLFormElement;
    const dn = within(form).getByLabelText("Certificate DN", { exact: false }) as HTMLInputElement;
    expect(dn.value).toBe("CN=robot,O=Example");
    expect((within(form).getByLabelText("AMS user") as HTMLInputElement).value).toBe("alice");
    fireEvent.input(within(form).getByLabelText("AMS user"), { target: { value: "bob" } });
    fireEvent.submit(form);
    await screen.findByText("Binding robot saved");
    await waitFor(() => expect(screen.queryByRole("heading", { name: "Change binding robot" })).toBeNull());
    expect(calls.find((c) => c.method === "PUT")?.body).toEqual({ unique_key: "u-2" });
  });

  it("deletes a binding once confirmed", async () => {
    renderAs(admin);
    await screen.findByText("alice");
    const row = screen.getByText("orphan").closest("tr") as HTMLElement;
    vi.stubGlobal("confirm", () => false);
    fireEvent.click(within(row).getByRole("button", { name: "Delete" }));
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    vi.stubGlobal("confirm", () => true);
    fireEvent.click(within(row).getByRole("button", { name: "Delete" }));
    await screen.findByText("Binding orphan deleted");
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.url)).toEqual(["/authn/v1/bindings/orphan"]);
  });
});
