import { describe, expect, it } from "vitest";
import type { Metric, User } from "./api";
import {
  backlog,
  capabilities,
  decodeData,
  encodeText,
  humanSeconds,
  isOperator,
  leaseLeft,
  localToRfc3339,
  mergeNodes,
  metricValue,
  nodesFromMetrics,
  parseAttributes,
  projectOf,
  Samples,
  shortName,
  unreachableFrom,
  withoutDeadLetterAttributes,
  workerNode,
} from "./logic";

const user = (over: Partial<User>): User => ({
  uuid: "u",
  name: "alice",
  email: "a@example.org",
  service_roles: [],
  created_on: "",
  modified_on: "",
  ...over,
});

const metric = (name: string, value: number, over: Partial<Metric> = {}): Metric => ({
  metric: name,
  metric_type: "counter",
  value_type: "int64",
  resource_type: "subscription",
  resource_name: "s",
  timeseries: [{ timestamp: "2026-11-28T10:00:00Z", value }],
  description: "",
  ...over,
});

describe("message data", () => {
  it("round-trips text through base64 as UTF-8", () => {
    for (const text of ["hello", "", "καλημέρα ✓ 🚀", "line\nbreak\ttab"]) {
      const d = decodeData(encodeText(text));
      expect(d.text).toBe(text);
      expect(d.bytes).toBe(new TextEncoder().encode(text).length);
    }
  });

  it("encodes as the API expects", () => {
    expect(encodeText("hi")).toBe("aGk=");
    expect(encodeText("é")).toBe("w6k=");
  });

  it("shows binary data as hex, not as text", () => {
    const d = decodeData(btoa(String.fromCharCode(0, 1, 2, 255)));
    expect(d.text).toBeNull();
    expect(d.hex).toBe("00 01 02 ff");
    expect(d.bytes).toBe(4);
  });

  it("cuts long binary data", () => {
    const d = decodeData(btoa(String.fromCharCode(...Array.from({ length: 100 }, () => 0))));
    expect(d.hex.endsWith("…")).toBe(true);
    expect(d.bytes).toBe(100);
  });

  it("says so when the data is not base64", () => {
    expect(decodeData("%%%").hex).toBe("(not base64)");
  });
});

describe("attributes", () => {
  it("reads key=value lines, values keeping their '='", () => {
    expect(parseAttributes("a=1\n\nb = x=y\r\n")).toEqual({ a: "1", b: " x=y" });
  });
  it("refuses a line without a key", () => {
    expect(() => parseAttributes("a=1\nnope")).toThrow("line 2");
    expect(() => parseAttributes("=v")).toThrow("line 1");
  });
  it("refuses a key given twice", () => {
    expect(() => parseAttributes("a=1\na=2")).toThrow("a is given twice");
  });
});

describe("names", () => {
  it("takes the last part and the project", () => {
    expect(shortName("/projects/p1/topics/t1")).toBe("t1");
    expect(shortName("projects/p1/schemas/s")).toBe("s");
    expect(projectOf("/projects/p1/topics/t1")).toBe("p1");
    expect(projectOf("projects/p2/topics/dlq")).toBe("p2");
    expect(projectOf("t1")).toBe("");
  });
});

describe("capabilities", () => {
  it("gives a service admin everything in every project", () => {
    const c = capabilities(user({ service_roles: ["service_admin"] }), "any");
    expect(c).toMatchObject({ serviceAdmin: true, projectAdmin: true, publisher: true, consumer: true });
  });
  it("gives a project's roles only in that project", () => {
    const u = user({ projects: [{ project: "p1", roles: ["consumer"], topics: [], subscriptions: ["s1"] }] });
    expect(capabilities(u, "p1")).toMatchObject({ projectAdmin: false, publisher: false, consumer: true, subscriptions: ["s1"] });
    expect(capabilities(u, "p2")).toMatchObject({ projectAdmin: false, publisher: false, consumer: false });
  });
  it("makes a project admin a publisher and consumer too", () => {
    const u = user({ projects: [{ project: "p1", roles: ["project_admin"], topics: [], subscriptions: [] }] });
    expect(capabilities(u, "p1")).toMatchObject({ projectAdmin: true, publisher: true, consumer: true });
  });
  it("knows operators", () => {
    expect(isOperator(user({ service_roles: ["metrics_viewer"] }))).toBe(true);
    expect(isOperator(user({ service_roles: ["push_worker"] }))).toBe(false);
    expect(isOperator(null)).toBe(false);
  });
});

describe("offsets and time", () => {
  it("counts the backlog after the cursor", () => {
    expect(backlog({ min: 0, max: 10, current: 4 })).toBe(6);
    expect(backlog({ min: 0, max: 3, current: 5 })).toBe(0);
  });
  it("counts down a lease", () => {
    expect(leaseLeft(1000, 10, 1000)).toBe(10);
    expect(leaseLeft(1000, 10, 5500)).toBe(6);
    expect(leaseLeft(1000, 10, 20000)).toBe(0);
  });
  it("turns a local datetime into RFC 3339 UTC", () => {
    const local = "2026-11-28T10:15:30";
    expect(localToRfc3339(local)).toBe(new Date(local).toISOString().replace(".000Z", "Z"));
    expect(() => localToRfc3339("")).toThrow("date and time");
  });
  it("says durations in words", () => {
    expect(humanSeconds(5.4)).toBe("5 s");
    expect(humanSeconds(185)).toBe("3 min 5 s");
    expect(humanSeconds(7800)).toBe("2 h 10 min");
    expect(humanSeconds(3 * 86400 + 4 * 3600)).toBe("3 d 4 h");
    expect(humanSeconds(-3)).toBe("0 s");
  });
});

describe("metrics", () => {
  it("finds a metric's latest value, by labels too", () => {
    const ms = [
      metric("subscription.deliveries", 5, { labels: { attempt: "1" } }),
      metric("subscription.deliveries", 2, { labels: { attempt: "2" } }),
      metric("subscription.backlog", 7),
    ];
    expect(metricValue(ms, "subscription.backlog")).toBe(7);
    expect(metricValue(ms, "subscription.deliveries", { attempt: "2" })).toBe(2);
    expect(metricValue(ms, "subscription.nothing")).toBeUndefined();
  });

  it("keeps at most its capacity of samples", () => {
    const s = new Samples(["a"], 3);
    for (let t = 1; t <= 5; t++) s.add(t, { a: t * 10 });
    expect(s.times).toEqual([3, 4, 5]);
    expect(s.series("a")).toEqual([30, 40, 50]);
  });

  it("skips a sample from the past and marks missing values", () => {
    const s = new Samples(["a", "b"]);
    s.add(10, { a: 1 });
    s.add(9, { a: 2, b: 2 });
    expect(s.length).toBe(1);
    expect(Number.isNaN(s.series("b")[0])).toBe(true);
    expect(() => s.series("c")).toThrow();
  });

  it("turns a counter into a rate per second, through a reset", () => {
    const s = new Samples(["n"]);
    s.add(0, { n: 100 });
    s.add(2, { n: 110 });
    s.add(4, { n: 110 });
    s.add(5, { n: 3 }); // restarted: counts from zero again
    const r = s.rate("n");
    expect(Number.isNaN(r[0])).toBe(true);
    expect(r.slice(1)).toEqual([5, 0, 3]);
  });
});

describe("cluster", () => {
  it("tells a worker's node from its id", () => {
    expect(workerNode("ams-node-2-4242-a1b2c3")).toBe("ams-node-2");
    expect(workerNode("odd")).toBe("odd");
  });

  it("marks a node down once its worker is gone, remembering when it was seen", () => {
    let nodes = mergeNodes([], [{ name: "n1", cpu: 1 }], ["n1-10-aaaaaa", "n2-11-bbbbbb"], 100);
    expect(nodes.map((n) => [n.name, n.live, n.lastSeen])).toEqual([
      ["n1", true, 100],
      ["n2", true, 100],
    ]);
    nodes = mergeNodes(nodes, [{ name: "n1", cpu: 2 }], ["n1-10-aaaaaa"], 103);
    expect(nodes.map((n) => [n.name, n.live, n.lastSeen])).toEqual([
      ["n1", true, 103],
      ["n2", false, 100],
    ]);
    expect(nodes[0].cpu).toBe(2);
  });

  it("lists a node that reported metrics but has no worker as not serving", () => {
    const nodes = mergeNodes([], [{ name: "old" }], [], 5);
    expect(nodes).toEqual([{ name: "old", live: false, lastSeen: 0, workers: [] }]);
  });

  it("reads nodes from the operational metrics", () => {
    const ms = [
      metric("ams_node.cpu_usage", 12.5, { resource_type: "ams_node", resource_name: "n1" }),
      metric("ams_node.memory_usage", 40, { resource_type: "ams_node", resource_name: "n1" }),
      metric("subscription.backlog", 1),
    ];
    expect(nodesFromMetrics(ms)).toEqual([{ name: "n1", cpu: 12.5, memory: 40 }]);
  });

  it("reads what is unreachable from the status or its 503", () => {
    expect(unreachableFrom({ unavailable: ["ZooKeeper"] })).toEqual(["ZooKeeper"]);
    expect(unreachableFrom({})).toEqual([]);
    expect(unreachableFrom(undefined, { code: 503, message: "Backend is unavailable: Kafka, the metadata store" })).toEqual([
      "Kafka",
      "the metadata store",
    ]);
    expect(unreachableFrom(undefined, { code: 503, message: "odd" })).toEqual(["the backend"]);
  });
});

describe("dead letters", () => {
  it("drops every attribute the service added when it dead-lettered", () => {
    expect(
      withoutDeadLetterAttributes({
        kind: "order",
        CloudPubSubDeadLetterSourceSubscription: "s",
        CloudPubSubDeadLetterSourceSubscriptionProject: "p",
        CloudPubSubDeadLetterSourceDeliveryCount: "5",
        CloudPubSubDeadLetterSourceTopicPublishTime: "2026-11-28T10:00:00Z",
      }),
    ).toEqual({ kind: "order" });
    expect(withoutDeadLetterAttributes(undefined)).toEqual({});
  });
});
