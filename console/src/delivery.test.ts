import { describe, expect, it } from "vitest";
import { Api } from "./api";
import { giveBack, peek } from "./delivery";

function recording(answers: unknown[]) {
  const calls: { url: string; body: unknown }[] = [];
  const api = new Api("t", "/v1", async (url, init) => {
    calls.push({ url, body: init.body ? JSON.parse(String(init.body)) : undefined });
    return new Response(JSON.stringify(answers.shift() ?? {}), { status: 200 });
  });
  return { api, calls };
}

const message = (ackId: string) => ({ ackId, message: { messageId: "1", data: "", publishTime: "" } });

describe("peek", () => {
  it("pulls without waiting and gives everything back at once", async () => {
    const { api, calls } = recording([{ receivedMessages: [message("a:1"), message("a:2")] }]);
    const got = await peek(api, "/projects/p/subscriptions/s", 20);
    expect(got.map((m) => m.ackId)).toEqual(["a:1", "a:2"]);
    expect(calls).toEqual([
      { url: "/v1/projects/p/subscriptions/s:pull", body: { maxMessages: "20", returnImmediately: "true" } },
      { url: "/v1/projects/p/subscriptions/s:modifyAckDeadline", body: { ackIds: ["a:1", "a:2"], ackDeadlineSeconds: 0 } },
    ]);
  });

  it("gives nothing back when nothing came", async () => {
    const { api, calls } = recording([{}]);
    expect(await peek(api, "/projects/p/subscriptions/s", 5)).toEqual([]);
    expect(calls).toHaveLength(1);
    await giveBack(api, "/x", []);
    expect(calls).toHaveLength(1);
  });
});
