import { useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import { topicPath, type Metric, type Schema, type Topic } from "../api";
import { href, useAction, useInterval, useLoad, useSession } from "../app";
import { TimeChart } from "../chart";
import { ActionState, Confirmed, Empty, ErrorNote, Field, Loading } from "../components";
import { capabilities, encodeText, metricValue, parseAttributes, Samples, shortName } from "../logic";
import { AclEditor, Crumbs } from "./shared";

export function TopicPage() {
  const { params } = useRoute();
  const { project, topic } = params;
  const { api, user } = useSession();
  const can = capabilities(user, project);
  const path = topicPath(project, topic);
  const info = useLoad((signal) => api.get<Topic>(path, undefined, signal), [path]);
  const subs = useLoad(
    async (signal) =>
      can.projectAdmin
        ? ((await api.get<{ subscriptions: string[] }>(`${path}/subscriptions`, undefined, signal)).subscriptions ?? [])
        : [],
    [path],
  );
  const remove = useAction();
  return (
    <section>
      <Crumbs project={project} items={[["Topics"], [topic]]} />
      <h1>Topic {topic}</h1>
      <Loading loaded={info} label="the topic">
        {(t) => (
          <dl>
            <dt>Created</dt>
            <dd>{t.created_on}</dd>
            <dt>Schema</dt>
            <dd>
              {t.schema ? (
                <a href={href(`/projects/${encodeURIComponent(project)}/schemas/${encodeURIComponent(shortName(t.schema))}`)}>
                  {shortName(t.schema)}
                </a>
              ) : (
                "none"
              )}
              {t.schemaEncoding ? ` (${t.schemaEncoding})` : ""}
            </dd>
            {t.messageRetentionDuration ? (
              <>
                <dt>Retention</dt>
                <dd>{t.messageRetentionDuration}</dd>
              </>
            ) : null}
          </dl>
        )}
      </Loading>
      {can.publisher ? <Publish path={path} /> : null}
      {can.publisher ? <TopicRates path={path} /> : null}
      {can.projectAdmin ? (
        <>
          <h2>Subscriptions</h2>
          <Loading loaded={subs} label="subscriptions">
            {(names) =>
              names.length ? (
                <ul>
                  {names.map((n) => (
                    <li key={n}>
                      <a href={href(`/projects/${encodeURIComponent(project)}/subscriptions/${encodeURIComponent(shortName(n))}`)}>
                        {shortName(n)}
                      </a>
                    </li>
                  ))}
                </ul>
              ) : (
                <Empty>No subscriptions on this topic.</Empty>
              )
            }
          </Loading>
          <SchemaAttach project={project} path={path} topic={info.data} reload={info.reload} />
          <AclEditor path={path} what="topic" />
          <h2>Delete</h2>
          <Confirmed
            label="Delete topic"
            question={`Delete topic ${topic}? Its subscriptions stay, without a topic.`}
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

function Publish({ path }: { path: string }) {
  const { api } = useSession();
  const [data, setData] = useState("");
  const [attributes, setAttributes] = useState("");
  const [orderingKey, setOrderingKey] = useState("");
  const [copies, setCopies] = useState("1");
  const publish = useAction();
  return (
    <section aria-labelledby="publish-h">
      <h2 id="publish-h">Publish</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          publish.run(async () => {
            const attrs = parseAttributes(attributes);
            const n = Math.min(Math.max(Number(copies) || 1, 1), 1000);
            const message: Record<string, unknown> = { data: encodeText(data) };
            if (Object.keys(attrs).length) message.attributes = attrs;
            if (orderingKey) message.orderingKey = orderingKey;
            const r = await api.post<{ messageIds: string[] }>(`${path}:publish`, {
              messages: Array.from({ length: n }, () => message),
            });
            const ids = r.messageIds;
            return ids.length === 1 ? `Published message ${ids[0]}` : `Published ${ids.length} messages (${ids[0]}…${ids[ids.length - 1]})`;
          });
        }}
      >
        <Field label="Message (text; sent base64-encoded as UTF-8)">
          <textarea name="data" rows={3} value={data} onInput={(e) => setData((e.target as HTMLTextAreaElement).value)} />
        </Field>
        <Field label="Attributes" hint="one key=value per line">
          <textarea
            name="attributes"
            rows={2}
            value={attributes}
            onInput={(e) => setAttributes((e.target as HTMLTextAreaElement).value)}
          />
        </Field>
        <div class="grid">
          <Field label="Ordering key (optional)">
            <input value={orderingKey} onInput={(e) => setOrderingKey((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Copies">
            <input
              type="number"
              min={1}
              max={1000}
              value={copies}
              onInput={(e) => setCopies((e.target as HTMLInputElement).value)}
            />
          </Field>
        </div>
        <button type="submit" disabled={publish.busy}>
          Publish
        </button>
      </form>
      <ActionState action={publish} label="Publishing…" />
    </section>
  );
}

function TopicRates({ path }: { path: string }) {
  const { api } = useSession();
  const [samples] = useState(() => new Samples(["messages", "bytes"]));
  const [, setVersion] = useState(0);
  const [error, setError] = useState<Error | undefined>(undefined);
  const sample = () =>
    api.get<{ metrics: Metric[] }>(`${path}:metrics`).then(
      (r) => {
        samples.add(Date.now() / 1000, {
          messages: metricValue(r.metrics, "topic.number_of_messages"),
          bytes: metricValue(r.metrics, "topic.number_of_bytes"),
        });
        setError(undefined);
        setVersion((v) => v + 1);
      },
      (err: Error) => setError(err),
    );
  useLoad(() => sample(), [path]);
  useInterval(sample, 3000);
  const total = samples.series("messages");
  return (
    <section aria-labelledby="rates-h">
      <h2 id="rates-h">Publishing</h2>
      <ErrorNote error={error} />
      <p>
        Messages published: <strong data-testid="topic-messages">{total.length ? total[total.length - 1] : "…"}</strong>
      </p>
      <TimeChart
        title="Published messages per second"
        times={samples.times}
        series={[{ label: "messages/s", values: samples.rate("messages") }]}
      />
    </section>
  );
}

function SchemaAttach({
  project,
  path,
  topic,
  reload,
}: {
  project: string;
  path: string;
  topic: Topic | undefined;
  reload: () => void;
}) {
  const { api } = useSession();
  const schemas = useLoad(
    async (signal) =>
      (await api.get<{ schemas: Schema[] }>(`/projects/${encodeURIComponent(project)}/schemas`, undefined, signal))
        .schemas ?? [],
    [project],
  );
  const [chosen, setChosen] = useState("");
  const act = useAction();
  return (
    <section aria-labelledby="schema-h">
      <h2 id="schema-h">Schema</h2>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          act
            .run(async () => {
              await api.post(`${path}:attachSchema`, { schema: `projects/${project}/schemas/${chosen}` });
              return `Schema ${chosen} attached: publishing now validates against it`;
            })
            .then((ok) => ok && reload());
        }}
      >
        <select aria-label="Schema to attach" value={chosen} onChange={(e) => setChosen((e.target as HTMLSelectElement).value)}>
          <option value="">Choose a schema</option>
          {(schemas.data ?? []).map((s) => (
            <option key={s.name} value={shortName(s.name)}>
              {shortName(s.name)} ({s.type})
            </option>
          ))}
        </select>
        <button type="submit" disabled={!chosen || act.busy}>
          Attach
        </button>
        <button
          type="button"
          class="secondary"
          disabled={!topic?.schema || act.busy}
          onClick={() =>
            act
              .run(async () => {
                await api.post(`${path}:detachSchema`, {});
                return "Schema detached";
              })
              .then((ok) => ok && reload())
          }
        >
          Detach
        </button>
      </form>
      <ActionState action={act} />
    </section>
  );
}
