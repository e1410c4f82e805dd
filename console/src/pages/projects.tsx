import { useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import { projectPath, type Project, type Subscription, type Topic } from "../api";
import { href, useAction, useLoad, useSession } from "../app";
import { ActionState, Confirmed, Empty, ErrorNote, Field, Loading } from "../components";
import { capabilities, shortName } from "../logic";

export function ProjectsPage() {
  const { api, user } = useSession();
  const admin = capabilities(user, "").serviceAdmin;
  const loaded = useLoad(
    async (signal) => {
      if (admin) return (await api.get<{ projects?: Project[] }>("/projects", undefined, signal)).projects ?? [];
      return (user.projects ?? []).map((m) => ({ name: m.project, created_on: "", modified_on: "" }) as Project);
    },
    [admin, user],
  );
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const create = useAction();
  return (
    <section>
      <h1>Projects</h1>
      <Loading loaded={loaded} label="projects">
        {(projects) =>
          projects.length ? (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Project</th>
                    <th scope="col">Description</th>
                    <th scope="col">Your roles</th>
                  </tr>
                </thead>
                <tbody>
                  {projects.map((p) => (
                    <tr key={p.name}>
                      <td>
                        <a href={href(`/projects/${encodeURIComponent(p.name)}`)}>{p.name}</a>
                      </td>
                      <td>{p.description ?? ""}</td>
                      <td>
                        {admin
                          ? "service admin"
                          : (user.projects?.find((m) => m.project === p.name)?.roles ?? []).join(", ")}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Empty>You are not a member of any project.</Empty>
          )
        }
      </Loading>
      {admin ? (
        <details>
          <summary role="button" class="secondary outline">
            New project
          </summary>
          <form
            onSubmit={(e) => {
              e.preventDefault();
              create
                .run(async () => {
                  await api.post(projectPath(name), { description });
                  return `Project ${name} created`;
                })
                .then((ok) => ok && loaded.reload());
            }}
          >
            <Field label="Name">
              <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </Field>
            <Field label="Description">
              <input value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
            </Field>
            <button type="submit" disabled={create.busy}>
              Create project
            </button>
          </form>
          <ActionState action={create} />
        </details>
      ) : null}
    </section>
  );
}

interface Paged<T> {
  items: T[];
  next: string;
  total: number;
}

async function listAll<T>(
  get: (token: string) => Promise<{ items: T[]; next: string; total: number }>,
  limit = 1000,
): Promise<Paged<T>> {
  const items: T[] = [];
  let token = "";
  let total = 0;
  do {
    const page = await get(token);
    items.push(...page.items);
    token = page.next;
    total = page.total;
  } while (token && items.length < limit);
  return { items, next: token, total };
}

export function ProjectPage() {
  const { params } = useRoute();
  const project = params.project;
  const { api, user } = useSession();
  const can = capabilities(user, project);
  const base = projectPath(project);
  const info = useLoad((signal) => api.get<Project>(base, undefined, signal), [project]);
  const topics = useLoad(
    (signal) =>
      listAll<Topic>(async (pageToken) => {
        const r = await api.get<{ topics?: Topic[]; nextPageToken?: string; totalSize?: number }>(
          `${base}/topics`,
          { pageSize: 200, pageToken },
          signal,
        );
        return { items: r.topics ?? [], next: r.nextPageToken ?? "", total: r.totalSize ?? 0 };
      }),
    [project],
  );
  const subs = useLoad(
    (signal) =>
      listAll<Subscription>(async (pageToken) => {
        const r = await api.get<{ subscriptions?: Subscription[]; nextPageToken?: string; totalSize?: number }>(
          `${base}/subscriptions`,
          { pageSize: 200, pageToken },
          signal,
        );
        return { items: r.subscriptions ?? [], next: r.nextPageToken ?? "", total: r.totalSize ?? 0 };
      }),
    [project],
  );
  const [topicName, setTopicName] = useState("");
  const [subName, setSubName] = useState("");
  const [subTopic, setSubTopic] = useState("");
  const [ackDeadline, setAckDeadline] = useState("10");
  const [description, setDescription] = useState("");
  const newTopic = useAction();
  const newSub = useAction();
  const edit = useAction();
  const remove = useAction();
  const p = (rest: string) => href(`/projects/${encodeURIComponent(project)}${rest}`);

  return (
    <section>
      <nav aria-label="breadcrumb">
        <ul>
          <li>
            <a href={href("/projects")}>Projects</a>
          </li>
          <li>{project}</li>
        </ul>
      </nav>
      <h1>Project {project}</h1>
      {info.error && !info.data ? <ErrorNote error={info.error} /> : null}
      {info.data?.description ? <p>{info.data.description}</p> : null}
      <p class="row">
        {can.projectAdmin ? (
          <>
            <a href={p("/members")} role="button" class="secondary outline">
              Members
            </a>
            <a href={p("/schemas")} role="button" class="secondary outline">
              Schemas
            </a>
          </>
        ) : null}
      </p>

      <h2>Topics</h2>
      <Loading loaded={topics} label="topics">
        {(t) =>
          t.items.length ? (
            <ul data-testid="topics">
              {t.items.map((topic) => (
                <li key={topic.name}>
                  <a href={p(`/topics/${encodeURIComponent(shortName(topic.name))}`)}>{shortName(topic.name)}</a>
                  {topic.schema ? <small> (schema {shortName(topic.schema)})</small> : null}
                </li>
              ))}
            </ul>
          ) : (
            <Empty>No topics{can.projectAdmin ? "" : " that you may use"}.</Empty>
          )
        }
      </Loading>
      {can.projectAdmin ? (
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            newTopic
              .run(async () => {
                await api.put(`${base}/topics/${encodeURIComponent(topicName)}`);
                return `Topic ${topicName} created`;
              })
              .then((ok) => ok && topics.reload());
          }}
        >
          <input
            aria-label="New topic name"
            placeholder="new topic"
            required
            value={topicName}
            onInput={(e) => setTopicName((e.target as HTMLInputElement).value)}
          />
          <button type="submit" disabled={newTopic.busy}>
            Create topic
          </button>
        </form>
      ) : null}
      <ActionState action={newTopic} />

      <h2>Subscriptions</h2>
      <Loading loaded={subs} label="subscriptions">
        {(s) =>
          s.items.length ? (
            <div class="table-wrap">
              <table data-testid="subscriptions">
                <thead>
                  <tr>
                    <th scope="col">Subscription</th>
                    <th scope="col">Topic</th>
                    <th scope="col">Delivery</th>
                  </tr>
                </thead>
                <tbody>
                  {s.items.map((sub) => (
                    <tr key={sub.name}>
                      <td>
                        <a href={p(`/subscriptions/${encodeURIComponent(shortName(sub.name))}`)}>
                          {shortName(sub.name)}
                        </a>
                      </td>
                      <td>{shortName(sub.topic)}</td>
                      <td>{sub.pushConfig?.type ? `push (${sub.pushConfig.type})` : "pull"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Empty>No subscriptions{can.projectAdmin ? "" : " that you may use"}.</Empty>
          )
        }
      </Loading>
      {can.projectAdmin ? (
        <details>
          <summary role="button" class="secondary outline">
            New subscription
          </summary>
          <form
            onSubmit={(e) => {
              e.preventDefault();
              newSub
                .run(async () => {
                  await api.put(`${base}/subscriptions/${encodeURIComponent(subName)}`, {
                    topic: `projects/${project}/topics/${subTopic}`,
                    ackDeadlineSeconds: Number(ackDeadline),
                  });
                  return `Subscription ${subName} created`;
                })
                .then((ok) => ok && subs.reload());
            }}
          >
            <Field label="Name">
              <input required value={subName} onInput={(e) => setSubName((e.target as HTMLInputElement).value)} />
            </Field>
            <Field label="Topic">
              <select required value={subTopic} onChange={(e) => setSubTopic((e.target as HTMLSelectElement).value)}>
                <option value="">Choose a topic</option>
                {(topics.data?.items ?? []).map((t) => (
                  <option key={t.name} value={shortName(t.name)}>
                    {shortName(t.name)}
                  </option>
                ))}
              </select>
            </Field>
            <Field label="Ack deadline (seconds)" hint="0 to 600">
              <input
                type="number"
                min={0}
                max={600}
                value={ackDeadline}
                onInput={(e) => setAckDeadline((e.target as HTMLInputElement).value)}
              />
            </Field>
            <button type="submit" disabled={newSub.busy}>
              Create subscription
            </button>
          </form>
          <ActionState action={newSub} />
        </details>
      ) : null}

      {can.projectAdmin ? (
        <>
          <h2>Settings</h2>
          <form
            class="row"
            onSubmit={(e) => {
              e.preventDefault();
              edit.run(async () => {
                await api.put(base, { description });
                info.reload();
                return "Description saved";
              });
            }}
          >
            <input
              aria-label="Project description"
              placeholder={info.data?.description || "description"}
              value={description}
              onInput={(e) => setDescription((e.target as HTMLInputElement).value)}
            />
            <button type="submit" disabled={edit.busy}>
              Save description
            </button>
            <Confirmed
              label="Delete project"
              question={`Delete project ${project} with all its topics and subscriptions?`}
              onConfirm={() =>
                remove.run(async () => {
                  await api.del(base);
                  window.location.assign(href("/projects"));
                })
              }
            />
          </form>
          <ActionState action={edit} />
          <ActionState action={remove} />
        </>
      ) : null}
    </section>
  );
}
