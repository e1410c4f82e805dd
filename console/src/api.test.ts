import { describe, expect, it } from "vitest";
import { Api, ApiError, errorFrom, subPath, topicPath } from "./api";
import { forgetToken, storedToken, storeToken } from "./session";

function fakeFetch(status: number, body: string) {
  const calls: { url: string; init: RequestInit }[] = [];
  const fetcher = async (url: string, init: RequestInit) => {
    calls.push({ url, init });
    return new Response(body, { status, headers: { "content-type": "application/json" } });
  };
  return { calls, fetcher };
}

describe("Api", () => {
  it("sends the token in x-api-key, never in the URL", async () => {
    const { calls, fetcher } = fakeFetch(200, '{"ok": true}');
    const api = new Api("secret-token", "/v1", fetcher);
    await api.get("/users/profile", { details: true });
    expect(calls[0].url).toBe("/v1/users/profile?details=true");
    expect(calls[0].url).not.toContain("secret-token");
    expect((calls[0].init.headers as Record<string, string>)["x-api-key"]).toBe("secret-token");
    expect(calls[0].init.credentials).toBe("omit");
  });

  it("sends JSON bodies and leaves out empty query values", async () => {
    const { calls, fetcher } = fakeFetch(200, "{}");
    const api = new Api("t", "/v1", fetcher);
    await api.post("/x", { a: 1 });
    await api.get("/y", { pageToken: "", pageSize: 5, gone: undefined });
    expect(calls[0].init.body).toBe('{"a":1}');
    expect((calls[0].init.headers as Record<string, string>)["content-type"]).toBe("application/json");
    expect(calls[1].url).toBe("/v1/y?pageSize=5");
  });

  it("raises the API's error envelope", async () => {
    const { fetcher } = fakeFetch(403, '{"error": {"code": 403, "message": "Access to this resource is forbidden", "status": "FORBIDDEN"}}');
    const err = await new Api("t", "/v1", fetcher).get("/projects").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 403, status: "FORBIDDEN", message: "Access to this resource is forbidden" });
  });

  it("raises a clear error for an answer that is not the API's", async () => {
    const { fetcher } = fakeFetch(502, "<html>bad gateway</html>");
    const err = (await new Api("t", "/v1", fetcher).get("/projects").catch((e: unknown) => e)) as ApiError;
    expect(err.code).toBe(502);
    expect(err.message).toContain("502");
  });

  it("raises UNREACHABLE when the request fails", async () => {
    const api = new Api("t", "/v1", async () => {
      throw new TypeError("network");
    });
    await expect(api.get("/status")).rejects.toMatchObject({ status: "UNREACHABLE" });
  });

  it("keeps exactly-once ack id errors", () => {
    const e = errorFrom(400, { error: { code: 400, message: "m", status: "INVALID_ARGUMENT", ackIdErrors: { a: "expired" } } });
    expect(e.details).toEqual({ a: "expired" });
  });

  it("encodes path segments", () => {
    expect(topicPath("p 1", "t/x")).toBe("/projects/p%201/topics/t%2Fx");
    expect(subPath("p", "s")).toBe("/projects/p/subscriptions/s");
  });
});

describe("session", () => {
  it("keeps the token in session storage only", () => {
    storeToken("abc");
    expect(sessionStorage.getItem("ams-console-token")).toBe("abc");
    expect(localStorage.length).toBe(0);
    expect(storedToken()).toBe("abc");
    forgetToken();
    expect(storedToken()).toBe("");
  });
});
