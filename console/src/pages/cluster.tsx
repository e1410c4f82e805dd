import { useState } from "preact/hooks";
import { ApiError, type Metric, type Status } from "../api";
import { useInterval, useLoad, useSession } from "../app";
import { Empty, ErrorNote } from "../components";
import { humanSeconds, mergeNodes, METRICS_VIEWER, nodesFromMetrics, SERVICE_ADMIN, unreachableFrom, type NodeState } from "../logic";

interface Look {
  at: number;
  status?: Status;
  statusError?: ApiError;
  release?: string;
  hostname?: string;
}

/** The service's state for operators: the node that answers, its backends, and every node of
 * the cluster (live while its push worker is registered: in ZooKeeper on the kafka backend),
 * looked at every 3 s. A node that stops is shown down, with when it was last seen. */
export function ClusterPage() {
  const { api, user } = useSession();
  const canMetrics = user.service_roles.some((r) => r === SERVICE_ADMIN || r === METRICS_VIEWER);
  const [nodes, setNodes] = useState<NodeState[]>([]);
  const [look, setLook] = useState<Look | undefined>(undefined);
  const [components, setComponents] = useState<Map<string, number>>(new Map());
  const [error, setError] = useState<Error | undefined>(undefined);

  const refresh = async () => {
    const now = Date.now() / 1000;
    const next: Look = { at: now };
    try {
      next.status = await api.get<Status>("/status");
    } catch (err) {
      if (err instanceof ApiError) next.statusError = err;
      else throw err;
    }
    try {
      const v = await api.get<{ release?: string; hostname?: string }>("/version");
      next.release = v.release;
      next.hostname = v.hostname;
      const reported = canMetrics ? nodesFromMetrics((await api.get<{ metrics: Metric[] }>("/metrics")).metrics) : [];
      const live = (next.status?.push_servers ?? []).filter((s) => s.status === "SERVING").map((s) => s.endpoint);
      setNodes((prev) => mergeNodes(prev, reported, live, now));
      setError(undefined);
    } catch (err) {
      setError(err as Error);
    }
    const down = unreachableFrom(next.status, next.statusError);
    setComponents((prev) => {
      const m = new Map(prev);
      for (const name of m.keys()) if (!down.includes(name)) m.set(name, 0);
      for (const name of down) m.set(name, m.get(name) || now);
      return m;
    });
    setLook(next);
  };
  useLoad(() => refresh(), []);
  useInterval(() => void refresh(), 3000);

  const status = look?.statusError ? "unavailable" : (look?.status?.status ?? "…");
  return (
    <section>
      <h1>Cluster</h1>
      <ErrorNote error={error} />
      <div class="stats">
        <article>
          <span class="value" data-testid="service-status">
            {status}
          </span>
          service status (the node that answered{look?.hostname ? `: ${look.hostname}` : ""})
        </article>
        <article>
          <span class="value">{look?.release ?? "…"}</span>
          release
        </article>
        <article>
          <span class="value" data-testid="live-nodes">
            {nodes.filter((n) => n.live).length} / {nodes.length}
          </span>
          nodes serving
        </article>
      </div>
      {look?.statusError ? <ErrorNote error={look.statusError} /> : null}
      {look?.status?.push_functionality === "disabled" ? (
        <p>
          <small>Push is disabled on this node: nodes are listed from their metrics only.</small>
        </p>
      ) : null}

      <h2>Backends</h2>
      {components.size ? (
        <table data-testid="components">
          <thead>
            <tr>
              <th scope="col">Backend</th>
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {[...components.entries()].map(([name, since]) => (
              <tr key={name}>
                <td>{name}</td>
                <td class={since ? "node-down" : "node-up"}>
                  {since ? `unreachable for ${humanSeconds((look?.at ?? since) - since)}` : "reachable again"}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p class="node-up" data-testid="backends-ok">
          Every backend (message log, metadata store{look?.status?.push_servers ? ", coordination" : ""}) answered the node's
          last health check.
        </p>
      )}

      <h2>Nodes</h2>
      {nodes.length ? (
        <div class="table-wrap">
          <table data-testid="nodes">
            <thead>
              <tr>
                <th scope="col">Node</th>
                <th scope="col">State</th>
                <th scope="col">CPU %</th>
                <th scope="col">Memory %</th>
                <th scope="col">Workers</th>
              </tr>
            </thead>
            <tbody>
              {nodes.map((n) => (
                <tr key={n.name} data-node={n.name} data-state={n.live ? "up" : "down"}>
                  <th scope="row">{n.name}</th>
                  <td class={n.live ? "node-up" : "node-down"}>
                    {n.live
                      ? "serving"
                      : n.lastSeen
                        ? `down (last seen ${humanSeconds((look?.at ?? n.lastSeen) - n.lastSeen)} ago)`
                        : "not serving"}
                  </td>
                  <td>{n.cpu === undefined ? "—" : n.cpu.toFixed(1)}</td>
                  <td>{n.memory === undefined ? "—" : n.memory.toFixed(1)}</td>
                  <td>{n.workers.length ? n.workers.join(", ") : "—"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <Empty>No node has reported yet.</Empty>
      )}
    </section>
  );
}
