import { useRef, useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import {
  subPath,
  topicPath,
  type Metric,
  type Offsets,
  type ReceivedMessage,
  type Subscription,
} from "../api";
import { href, useAction, useInterval, useLoad, useSession } from "../app";
import { TimeChart } from "../chart";
import { giveBack, peek, pullNow } from "../delivery";
import { ActionState, Busy, Confirmed, Empty, ErrorNote, Field, Loading } from "../components";
import {
  backlog,
  capabilities,
  decodeData,
  humanSeconds,
  leaseLeft,
  localToRfc3339,
  metricValue,
  projectOf,
  Samples,
  withoutDeadLetterAttributes,
  shortName,
} from "../logic";
import { AclEditor, Crumbs } from "./shared";

export function SubscriptionPage() {
  const { params } = useRoute();
  const { project, subscription } = params;
  const { api, user } = useSession();
  const can = capabilities(user, project);
  const path = subPath(project, subscription);
  const info = useLoad((signal) => api.get<Subscription>(path, undefined, signal), [path]);
  const remove = useAction();
  const sub = info.data;
  return (
    <section>
      <Crumbs project={project} items={[["Subscriptions"], [subscription]]} />
      <h1>Subscription {subscription}</h1>
      <Loading loaded={info} label="the subscription">
        {(s) => <Details project={project} sub={s} />}
      </Loading>
      <Health path={path} push={!!sub?.pushConfig?.type} pushStatus={sub?.pushStatus} />
      {sub && !sub.pushConfig?.type ? <Pull path={path} sub={sub} /> : null}
      {sub ? <Browse path={path} /> : null}
      {sub ? <Replay path={path} reload={info.reload} /> : null}
      {sub?.deadLetterPolicy ? <Redrive sub={sub} /> : null}
      {sub && can.projectAdmin ? <PushSettings path={path} sub={sub} reload={info.reload} /> : null}
      {can.projectAdmin ? (
        <>
          <AclEditor path={path} what="subscription" />
          <h2>Delete</h2>
          <Confirmed
            label="Delete subscription"
            question={`Delete subscription ${subscription} and its progress?`}
            onConfirm={() =>
              remove.run(async () => {
                await api.del(path);
                window.location.assign(href(`/projects/${encodeURIComponent(project)}`));
              })
            }
          />
          <ActionState action={remove} />
        </>
      ) : null}
    </section>
  );
}

function Details({ project, sub }: { project: string; sub: Subscription }) {
  const topic = shortName(sub.topic);
  const features = [
    sub.filter ? `filter ${sub.filter}` : "",
    sub.enableMessageOrdering ? "ordering by key" : "",
    sub.enableExactlyOnceDelivery ? "exactly once" : "",
    sub.retryPolicy ? `retry backoff ${sub.retryPolicy.minimumBackoff ?? "10s"}–${sub.retryPolicy.maximumBackoff ?? "600s"}` : "",
  ].filter(Boolean);
  return (
    <dl>
      <dt>Topic</dt>
      <dd>
        <a href={href(`/projects/${encodeURIComponent(project)}/topics/${encodeURIComponent(topic)}`)}>{topic}</a>
      </dd>
      <dt>Delivery</dt>
      <dd>{sub.pushConfig?.type ? `push to ${sub.pushConfig.pushEndpoint || sub.pushConfig.mattermostUrl}` : "pull"}</dd>
      <dt>Ack deadline</dt>
      <dd>{sub.ackDeadlineSeconds} s</dd>
      {features.length ? (
        <>
          <dt>Per-message delivery</dt>
          <dd>{features.join("; ")}</dd>
        </>
      ) : null}
      {sub.deadLetterPolicy ? (
        <>
          <dt>Dead letters</dt>
          <dd>
            after {sub.deadLetterPolicy.maxDeliveryAttempts || 5} attempts to{" "}
            <a
              href={href(
                `/projects/${encodeURIComponent(projectOf(sub.deadLetterPolicy.deadLetterTopic))}/topics/${encodeURIComponent(
                  shortName(sub.deadLetterPolicy.deadLetterTopic),
                )}`,
              )}
            >
              {shortName(sub.deadLetterPolicy.deadLetterTopic)}
            </a>
          </dd>
        </>
      ) : null}
      <dt>Created</dt>
      <dd>{sub.createdOn}</dd>
    </dl>
  );
}

const SERIES = ["backlog", "undelivered", "consumed", "oldest"];

/** Backlog, the oldest unacknowledged message's age and rates, sampled every 3 s while open. */
function Health({ path, push, pushStatus }: { path: string; push: boolean; pushStatus?: string }) {
  const { api } = useSession();
  const [samples] = useState(() => new Samples(SERIES));
  const [latest, setLatest] = useState<Metric[] | undefined>(undefined);
  const [offsets, setOffsets] = useState<Offsets | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const sample = async () => {
    try {
      const [m, o] = await Promise.all([
        api.get<{ metrics: Metric[] }>(`${path}:metrics`),
        api.get<Offsets>(`${path}:offsets`),
      ]);
      samples.add(Date.now() / 1000, {
        backlog: backlog(o),
        undelivered: metricValue(m.metrics, "subscription.undelivered_messages"),
        consumed: metricValue(m.metrics, "subscription.number_of_messages"),
        oldest: metricValue(m.metrics, "subscription.oldest_unacked_message_age"),
      });
      setLatest(m.metrics);
      setOffsets(o);
      setError(undefined);
    } catch (err) {
      setError(err as Error);
    }
  };
  useLoad(() => sample(), [path]);
  useInterval(() => void sample(), 3000);
  const value = (name: string) => (latest ? metricValue(latest, name) : undefined);
  const oldest = value("subscription.oldest_unacked_message_age");
  const dead = value("subscription.dead_lettered_messages");
  return (
    <section aria-labelledby="health-h">
      <h2 id="health-h">Health</h2>
      <ErrorNote error={error} />
      <div class="stats">
        <article>
          <span class="value" data-testid="backlog">
            {offsets ? backlog(offsets) : "…"}
          </span>
          backlog (messages after the cursor)
        </article>
        <article>
          <span class="value" data-testid="undelivered">
            {value("subscription.undelivered_messages") ?? "…"}
          </span>
          never delivered
        </article>
        <article>
          <span class="value" data-testid="oldest-age">
            {oldest === undefined ? "…" : humanSeconds(oldest)}
          </span>
          oldest unacknowledged message
        </article>
        <article>
          <span class="value" data-testid="consumed">
            {value("subscription.number_of_messages") ?? "…"}
          </span>
          messages consumed
        </article>
        {dead !== undefined ? (
          <article>
            <span class="value">{dead}</span>
            dead-lettered
          </article>
        ) : null}
      </div>
      {offsets ? (
        <p>
          <small>
            Offsets: first {offsets.min}, cursor {offsets.current}, end {offsets.max}
          </small>
        </p>
      ) : null}
      {push ? (
        <p data-testid="push-status">
          <strong>Push status:</strong> {pushStatus || "unknown"}
        </p>
      ) : null}
      <TimeChart
        title="Backlog"
        times={samples.times}
        series={[
          { label: "backlog", values: samples.series("backlog") },
          { label: "never delivered", values: samples.series("undelivered") },
        ]}
      />
      <TimeChart
        title="Consumed per second"
        times={samples.times}
        series={[{ label: "messages/s", values: samples.rate("consumed") }]}
      />
    </section>
  );
}

interface Pulled {
  at: number;
  deadline: number;
  items: ReceivedMessage[];
}

function MessageTable({
  items,
  selected,
  onToggle,
}: {
  items: ReceivedMessage[];
  selected?: Set<string>;
  onToggle?: (ackId: string) => void;
}) {
  return (
    <div class="table-wrap">
      <table data-testid="messages">
        <thead>
          <tr>
            {selected ? (
              <th scope="col">
                <span class="visually-hidden">Select</span>
              </th>
            ) : null}
            <th scope="col">Id</th>
            <th scope="col">Published</th>
            <th scope="col">Data</th>
            <th scope="col">Attributes</th>
          </tr>
        </thead>
        <tbody>
          {items.map((r) => {
            const d = decodeData(r.message.data);
            return (
              <tr key={r.ackId}>
                {selected && onToggle ? (
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Select message ${r.message.messageId}`}
                      checked={selected.has(r.ackId)}
                      onChange={() => onToggle(r.ackId)}
                    />
                  </td>
                ) : null}
                <td>
                  {r.message.messageId}
                  {r.deliveryAttempt ? <small> (attempt {r.deliveryAttempt})</small> : null}
                </td>
                <td>{r.message.publishTime}</td>
                <td>
                  <pre class="data">{d.text ?? `${d.bytes} bytes: ${d.hex}`}</pre>
                </td>
                <td>
                  {Object.entries(r.message.attributes ?? {}).map(([k, v]) => (
                    <div key={k}>
                      <code>{k}</code>={v}
                    </div>
                  ))}
                  {r.message.orderingKey ? (
                    <div>
                      <small>ordering key {r.message.orderingKey}</small>
                    </div>
                  ) : null}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/** Pull with the lease's countdown, then acknowledge or give back (nack) what was chosen. */
function Pull({ path, sub }: { path: string; sub: Subscription }) {
  const { api } = useSession();
  const [max, setMax] = useState("10");
  const [wait, setWait] = useState(true);
  const [pulled, setPulled] = useState<Pulled | null>(null);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [pulling, setPulling] = useState(false);
  const [pullError, setPullError] = useState<Error | undefined>(undefined);
  const [now, setNow] = useState(Date.now());
  const cancel = useRef<AbortController | null>(null);
  const act = useAction();
  useInterval(() => setNow(Date.now()), 500);

  const pull = async () => {
    const ctl = new AbortController();
    cancel.current = ctl;
    setPulling(true);
    setPullError(undefined);
    act.clear();
    try {
      const r = await api.post<{ receivedMessages: ReceivedMessage[] }>(
        `${path}:pull`,
        { maxMessages: String(Math.max(1, Number(max) || 1)), returnImmediately: wait ? "false" : "true" },
        ctl.signal,
      );
      const items = r.receivedMessages ?? [];
      setPulled({ at: Date.now(), deadline: sub.ackDeadlineSeconds, items });
      setSelected(new Set(items.map((i) => i.ackId)));
    } catch (err) {
      if (!(err instanceof DOMException && err.name === "AbortError")) setPullError(err as Error);
    } finally {
      setPulling(false);
      cancel.current = null;
    }
  };
  const ids = [...selected];
  const left = pulled ? leaseLeft(pulled.at, pulled.deadline, now) : 0;
  const settle = (what: "ack" | "nack") =>
    act
      .run(async () => {
        if (what === "ack") await api.post(`${path}:acknowledge`, { ackIds: ids });
        else await giveBack(api, path, pulled?.items.filter((i) => selected.has(i.ackId)) ?? []);
        const n = ids.length;
        return what === "ack"
          ? `Acknowledged ${n} message${n === 1 ? "" : "s"}`
          : `Gave back ${n} message${n === 1 ? "" : "s"} for delivery again`;
      })
      .then((ok) => {
        if (ok && pulled) {
          const rest = pulled.items.filter((i) => !selected.has(i.ackId));
          setPulled(rest.length ? { ...pulled, items: rest } : null);
          setSelected(new Set());
        }
      });
  return (
    <section aria-labelledby="pull-h">
      <h2 id="pull-h">Pull</h2>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          void pull();
        }}
      >
        <label>
          At most
          <input type="number" min={1} max={1000} value={max} onInput={(e) => setMax((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          <input type="checkbox" role="switch" checked={wait} onChange={() => setWait(!wait)} />
          Wait for messages
        </label>
        <button type="submit" disabled={pulling}>
          Pull
        </button>
      </form>
      {pulling ? <Busy label="Waiting for messages…" onCancel={() => cancel.current?.abort()} /> : null}
      <ErrorNote error={pullError} />
      {pulled ? (
        pulled.items.length ? (
          <>
            <p role="timer" aria-live="off" data-testid="lease-left">
              {left > 0
                ? `Acknowledge within ${left} s: the lease then ends and the messages are delivered again.`
                : "The lease has ended: these messages will be delivered again."}
            </p>
            <MessageTable
              items={pulled.items}
              selected={selected}
              onToggle={(id) => {
                const next = new Set(selected);
                if (next.has(id)) next.delete(id);
                else next.add(id);
                setSelected(next);
              }}
            />
            <p class="row">
              <button type="button" disabled={!ids.length || act.busy} onClick={() => settle("ack")}>
                Acknowledge {ids.length}
              </button>
              <button type="button" class="secondary" disabled={!ids.length || act.busy} onClick={() => settle("nack")}>
                Give back {ids.length}
              </button>
            </p>
          </>
        ) : (
          <Empty>No messages.</Empty>
        )
      ) : null}
      <ActionState action={act} />
    </section>
  );
}

/** Look at the next messages without acknowledging them: pull, then give them back at once. */
function Browse({ path }: { path: string }) {
  const { api } = useSession();
  const [items, setItems] = useState<ReceivedMessage[] | null>(null);
  const act = useAction();
  return (
    <section aria-labelledby="browse-h">
      <h2 id="browse-h">Browse</h2>
      <p>
        <small>
          Shows the next messages and gives them straight back: nothing is acknowledged. On a subscription with
          a dead-letter policy each look counts as a delivery attempt.
        </small>
      </p>
      <button
        type="button"
        class="secondary"
        disabled={act.busy}
        onClick={() =>
          act.run(async () => {
            const got = await peek(api, path, 20);
            setItems(got);
            return `${got.length} message${got.length === 1 ? "" : "s"} shown, none acknowledged`;
          })
        }
      >
        Browse messages
      </button>
      <ActionState action={act} label="Looking…" />
      {items && items.length ? <MessageTable items={items} /> : null}
    </section>
  );
}

function Replay({ path, reload }: { path: string; reload: () => void }) {
  const { api } = useSession();
  const [when, setWhen] = useState("");
  const [offset, setOffset] = useState("");
  const act = useAction();
  return (
    <section aria-labelledby="replay-h">
      <h2 id="replay-h">Replay</h2>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          act
            .run(async () => {
              const time = localToRfc3339(when);
              await api.post(`${path}:seek`, { time });
              return `Replaying from ${time}: messages published since then are delivered again`;
            })
            .then((ok) => ok && reload());
        }}
      >
        <label>
          From the time (your local time)
          <input type="datetime-local" step={1} required value={when} onInput={(e) => setWhen((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit" disabled={act.busy}>
          Replay from time
        </button>
      </form>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          act
            .run(async () => {
              await api.post(`${path}:modifyOffset`, { offset: Number(offset) });
              return `The cursor is now at offset ${offset}`;
            })
            .then((ok) => ok && reload());
        }}
      >
        <label>
          To the offset
          <input type="number" min={0} required value={offset} onInput={(e) => setOffset((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit" class="secondary" disabled={act.busy}>
          Move cursor
        </button>
      </form>
      <ActionState action={act} label="Moving the cursor…" />
    </section>
  );
}


/** The dead-letter topic's messages, read through a subscription of it, and published back to
 * this subscription's topic ("redrive"), each acknowledged on the dead-letter side once
 * republished. */
function Redrive({ sub }: { sub: Subscription }) {
  const { api } = useSession();
  const dlq = sub.deadLetterPolicy!.deadLetterTopic;
  const dlqProject = projectOf(dlq);
  const dlqSubs = useLoad(
    async (signal) =>
      (await api.get<{ subscriptions: string[] }>(`${topicPath(dlqProject, shortName(dlq))}/subscriptions`, undefined, signal))
        .subscriptions ?? [],
    [dlq],
  );
  const [from, setFrom] = useState("");
  const [items, setItems] = useState<ReceivedMessage[] | null>(null);
  const act = useAction();
  const fromPath = from ? subPath(dlqProject, from) : "";
  const mine = (r: ReceivedMessage) =>
    !r.message.attributes?.CloudPubSubDeadLetterSourceSubscription ||
    r.message.attributes.CloudPubSubDeadLetterSourceSubscription === shortName(sub.name);
  return (
    <section aria-labelledby="dlq-h">
      <h2 id="dlq-h">Dead letters</h2>
      <Loading loaded={dlqSubs} label="the dead-letter topic's subscriptions">
        {(names) =>
          names.length ? (
            <div class="row">
              <select aria-label="Read the dead letters through" value={from} onChange={(e) => setFrom((e.target as HTMLSelectElement).value)}>
                <option value="">Read through subscription…</option>
                {names.map((n) => (
                  <option key={n} value={shortName(n)}>
                    {shortName(n)}
                  </option>
                ))}
              </select>
              <button
                type="button"
                class="secondary"
                disabled={!from || act.busy}
                onClick={() =>
                  act.run(async () => {
                    const got = await peek(api, fromPath, 50);
                    setItems(got.filter(mine));
                    return `${got.filter(mine).length} dead-lettered message(s) of this subscription`;
                  })
                }
              >
                Show dead letters
              </button>
              <button
                type="button"
                disabled={!from || act.busy}
                onClick={() =>
                  act.run(async () => {
                    const pulled = await pullNow(api, fromPath, 100);
                    const got = pulled.filter(mine);
                    await giveBack(api, fromPath, pulled.filter((x) => !mine(x)));
                    if (!got.length) return "No dead letters of this subscription to redrive";
                    const messages = got.map((g) => {
                      const attributes = withoutDeadLetterAttributes(g.message.attributes);
                      const m: Record<string, unknown> = { data: g.message.data };
                      if (Object.keys(attributes).length) m.attributes = attributes;
                      if (g.message.orderingKey) m.orderingKey = g.message.orderingKey;
                      return m;
                    });
                    await api.post(`${topicPath(projectOf(sub.topic), shortName(sub.topic))}:publish`, { messages });
                    await api.post(`${fromPath}:acknowledge`, { ackIds: got.map((g) => g.ackId) });
                    setItems(null);
                    return `Redrove ${got.length} message(s) to ${shortName(sub.topic)}`;
                  })
                }
              >
                Redrive to the topic
              </button>
            </div>
          ) : (
            <Empty>
              The dead-letter topic {shortName(dlq)} has no subscription to read it through: create one to see and redrive its
              messages.
            </Empty>
          )
        }
      </Loading>
      <ActionState action={act} />
      {items && items.length ? <MessageTable items={items} /> : null}
    </section>
  );
}

function PushSettings({ path, sub, reload }: { path: string; sub: Subscription; reload: () => void }) {
  const { api } = useSession();
  const pc = sub.pushConfig;
  const [type, setType] = useState(pc.type || "");
  const [endpoint, setEndpoint] = useState(pc.pushEndpoint || "");
  const [maxMessages, setMaxMessages] = useState(String(pc.maxMessages || 1));
  const [retry, setRetry] = useState(pc.retryPolicy?.type || "linear");
  const [period, setPeriod] = useState(String(pc.retryPolicy?.period || 3000));
  const [auth, setAuth] = useState(pc.authorizationHeader?.type || "autogen");
  const [mmUrl, setMmUrl] = useState(pc.mattermostUrl || "");
  const [mmUser, setMmUser] = useState(pc.mattermostUsername || "");
  const [mmChannel, setMmChannel] = useState(pc.mattermostChannel || "");
  const [b64, setB64] = useState(!!pc.base64Decode);
  const act = useAction();
  return (
    <section aria-labelledby="push-h">
      <h2 id="push-h">Push</h2>
      {pc.type === "http_endpoint" ? (
        <p>
          Verification: {pc.verified ? <strong>verified</strong> : <strong>not verified</strong>}. The endpoint's host must serve
          <code> /ams_verification_hash</code> with <code>{pc.verificationHash}</code>.
        </p>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          act
            .run(async () => {
              let pushConfig: Record<string, unknown> = {};
              if (type) {
                pushConfig = {
                  type,
                  maxMessages: Number(maxMessages),
                  retryPolicy: retry === "slowstart" ? { type: retry } : { type: retry, period: Number(period) },
                  base64Decode: b64,
                };
                if (type === "http_endpoint") {
                  pushConfig.pushEndpoint = endpoint;
                  pushConfig.authorizationHeader = { type: auth };
                } else {
                  pushConfig.mattermostUrl = mmUrl;
                  pushConfig.mattermostUsername = mmUser;
                  pushConfig.mattermostChannel = mmChannel;
                }
              }
              await api.post(`${path}:modifyPushConfig`, { pushConfig });
              return type ? "Push configuration saved" : "The subscription is a pull subscription now";
            })
            .then((ok) => ok && reload());
        }}
      >
        <Field label="Delivery">
          <select value={type} onChange={(e) => setType((e.target as HTMLSelectElement).value)}>
            <option value="">pull (no push)</option>
            <option value="http_endpoint">push to an HTTP endpoint</option>
            <option value="mattermost">push to Mattermost</option>
          </select>
        </Field>
        {type === "http_endpoint" ? (
          <>
            <Field label="Endpoint (https)">
              <input type="url" required value={endpoint} onInput={(e) => setEndpoint((e.target as HTMLInputElement).value)} />
            </Field>
            <Field label="Authorization header">
              <select value={auth} onChange={(e) => setAuth((e.target as HTMLSelectElement).value)}>
                <option value="autogen">generated</option>
                <option value="disabled">none</option>
              </select>
            </Field>
          </>
        ) : null}
        {type === "mattermost" ? (
          <>
            <Field label="Mattermost webhook URL">
              <input type="url" required value={mmUrl} onInput={(e) => setMmUrl((e.target as HTMLInputElement).value)} />
            </Field>
            <div class="grid">
              <Field label="Username">
                <input value={mmUser} onInput={(e) => setMmUser((e.target as HTMLInputElement).value)} />
              </Field>
              <Field label="Channel">
                <input value={mmChannel} onInput={(e) => setMmChannel((e.target as HTMLInputElement).value)} />
              </Field>
            </div>
          </>
        ) : null}
        {type ? (
          <div class="grid">
            <Field label="Messages per delivery">
              <input type="number" min={1} value={maxMessages} onInput={(e) => setMaxMessages((e.target as HTMLInputElement).value)} />
            </Field>
            <Field label="Retry">
              <select value={retry} onChange={(e) => setRetry((e.target as HTMLSelectElement).value)}>
                <option value="linear">linear</option>
                <option value="slowstart">slow start</option>
              </select>
            </Field>
            {retry === "linear" ? (
              <Field label="Period (ms)">
                <input type="number" min={1} value={period} onInput={(e) => setPeriod((e.target as HTMLInputElement).value)} />
              </Field>
            ) : null}
            <label>
              <input type="checkbox" checked={b64} onChange={() => setB64(!b64)} />
              Decode base64 before delivery
            </label>
          </div>
        ) : null}
        <p class="row">
          <button type="submit" disabled={act.busy}>
            Save push configuration
          </button>
          {pc.type === "http_endpoint" ? (
            <button
              type="button"
              class="secondary"
              disabled={act.busy}
              onClick={() =>
                act
                  .run(async () => {
                    await api.post(`${path}:verifyPushEndpoint`, {});
                    return "The endpoint is verified";
                  })
                  .then((ok) => ok && reload())
              }
            >
              Verify endpoint
            </button>
          ) : null}
        </p>
      </form>
      <ActionState action={act} />
    </section>
  );
}
