import { useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import { userPath, type User } from "../api";
import { href, useAction, useLoad, useSession } from "../app";
import { ActionState, Confirmed, Field, Loading, Pager } from "../components";
import { ADMIN_VIEWER, METRICS_VIEWER, SERVICE_ADMIN } from "../logic";
import { PROJECT_ROLES } from "./members";

const SERVICE_ROLES = [SERVICE_ADMIN, ADMIN_VIEWER, METRICS_VIEWER, "push_worker", "register_admin", "argo_api_authn"];

export function UsersPage() {
  const { api } = useSession();
  const [pageToken, setPageToken] = useState("");
  const list = useLoad(
    (signal) =>
      api.get<{ users: User[]; nextPageToken: string; totalSize: number }>("/users", { pageSize: 100, pageToken, details: false }, signal),
    [pageToken],
  );
  const [name, setName] = useState("");
  const [email, setEmail] = useState("");
  const [project, setProject] = useState("");
  const [role, setRole] = useState("consumer");
  const create = useAction();
  return (
    <section>
      <h1>Users</h1>
      <Loading loaded={list} label="users">
        {(page) => (
          <>
            <p>{page.totalSize} users</p>
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Email</th>
                    <th scope="col">Service roles</th>
                    <th scope="col">Created</th>
                  </tr>
                </thead>
                <tbody>
                  {page.users.map((u) => (
                    <tr key={u.uuid}>
                      <td>
                        <a href={href(`/users/${encodeURIComponent(u.name)}`)}>{u.name}</a>
                      </td>
                      <td>{u.email}</td>
                      <td>{u.service_roles.join(", ")}</td>
                      <td>{u.created_on}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <Pager current={pageToken} next={page.nextPageToken} onPage={setPageToken} />
          </>
        )}
      </Loading>
      <h2>New user</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create
            .run(async () => {
              const body: Record<string, unknown> = { email };
              if (project) body.projects = [{ project, roles: [role] }];
              await api.post(userPath(name), body);
              return `User ${name} created`;
            })
            .then((ok) => ok && list.reload());
        }}
      >
        <div class="grid">
          <Field label="Name">
            <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Email">
            <input type="email" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
          </Field>
        </div>
        <div class="grid">
          <Field label="Project (optional)">
            <input value={project} onInput={(e) => setProject((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Role in it">
            <select value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
              {PROJECT_ROLES.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          </Field>
        </div>
        <button type="submit" disabled={create.busy}>
          Create user
        </button>
      </form>
      <ActionState action={create} />
    </section>
  );
}

export function UserPage() {
  const { params } = useRoute();
  const name = params.user;
  const { api } = useSession();
  const path = userPath(name);
  const info = useLoad((signal) => api.get<User>(path, undefined, signal), [path]);
  const [roles, setRoles] = useState<string[] | null>(null);
  const [shown, setShown] = useState(false);
  const act = useAction();
  return (
    <section>
      <nav aria-label="breadcrumb">
        <ul>
          <li>
            <a href={href("/users")}>Users</a>
          </li>
          <li>{name}</li>
        </ul>
      </nav>
      <h1>User {name}</h1>
      <Loading loaded={info} label="the user">
        {(u) => (
          <>
            <dl>
              <dt>Email</dt>
              <dd>{u.email}</dd>
              <dt>Name</dt>
              <dd>
                {u.first_name} {u.last_name} {u.organization ? `(${u.organization})` : ""}
              </dd>
              <dt>Projects</dt>
              <dd>
                {(u.projects ?? []).map((m) => (
                  <div key={m.project}>
                    <a href={href(`/projects/${encodeURIComponent(m.project)}`)}>{m.project}</a>: {m.roles.join(", ")}
                  </div>
                ))}
              </dd>
              <dt>Token</dt>
              <dd class="row">
                <code data-testid="user-token">{shown ? u.token : "••••••••"}</code>
                <button type="button" class="secondary outline" onClick={() => setShown(!shown)}>
                  {shown ? "Hide" : "Show"}
                </button>
                <Confirmed
                  label="New token"
                  question={`Give ${name} a new token? The old one stops working at once.`}
                  onConfirm={() =>
                    act
                      .run(async () => {
                        await api.post(`${path}:refreshToken`, {});
                        return `${name} has a new token`;
                      })
                      .then((ok) => ok && info.reload())
                  }
                />
              </dd>
            </dl>
            <form
              onSubmit={(e) => {
                e.preventDefault();
                act
                  .run(async () => {
                    await api.put(path, { service_roles: roles ?? u.service_roles });
                    return "Service roles saved";
                  })
                  .then((ok) => {
                    if (ok) {
                      setRoles(null);
                      info.reload();
                    }
                  });
              }}
            >
              <fieldset>
                <legend>Service roles</legend>
                {SERVICE_ROLES.map((r) => {
                  const current = roles ?? u.service_roles;
                  return (
                    <label key={r}>
                      <input
                        type="checkbox"
                        checked={current.includes(r)}
                        onChange={() => setRoles(current.includes(r) ? current.filter((x) => x !== r) : [...current, r])}
                      />
                      {r}
                    </label>
                  );
                })}
              </fieldset>
              <p class="row">
                <button type="submit" disabled={act.busy}>
                  Save service roles
                </button>
                <Confirmed
                  label="Delete user"
                  question={`Delete user ${name}?`}
                  onConfirm={() =>
                    act.run(async () => {
                      await api.del(path);
                      window.location.assign(href("/users"));
                    })
                  }
                />
              </p>
            </form>
            <ActionState action={act} />
          </>
        )}
      </Loading>
    </section>
  );
}
