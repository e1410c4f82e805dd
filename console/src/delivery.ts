// A subscription's messages as the console handles them beyond a plain pull: taking what is there
// without waiting, and giving messages back at once (a nack), so that a look acknowledges nothing.

import type { Api, ReceivedMessage } from "./api";

/** Pulls up to ``max`` messages without waiting for more (``path``: the subscription's API path). */
export async function pullNow(api: Api, path: string, max: number): Promise<ReceivedMessage[]> {
  const r = await api.post<{ receivedMessages?: ReceivedMessage[] }>(`${path}:pull`, {
    maxMessages: String(max),
    returnImmediately: "true",
  });
  return r.receivedMessages ?? [];
}

/** Gives messages back at once, to be delivered again (modifyAckDeadline 0); nothing to do for none. */
export async function giveBack(api: Api, path: string, messages: ReceivedMessage[]): Promise<void> {
  if (!messages.length) return;
  await api.post(`${path}:modifyAckDeadline`, { ackIds: messages.map((m) => m.ackId), ackDeadlineSeconds: 0 });
}

/** The next ``max`` messages, given straight back: nothing is acknowledged. */
export async function peek(api: Api, path: string, max: number): Promise<ReceivedMessage[]> {
  const got = await pullNow(api, path, max);
  await giveBack(api, path, got);
  return got;
}
