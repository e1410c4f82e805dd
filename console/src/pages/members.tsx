import { useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import { projectPath, type User } from "../api";
import { useAction, useLoad, useSession } from "../app";
import { ActionState, Confirmed, Empty, Field, Loading } from "../components";
import { Crumbs } from "./shared";

export const PROJECT_ROLES = ["project_admin", "publisher", "consumer"];

export function RoleChoice({ roles, onChange, name }: { roles: string[]; onChange: (r: string[]) => void; name: string }) {
  return (
    <fieldset>
      <legend>Roles of {name || "the member"}</legend>
      {PROJECT_ROLES.map((r) => (
        <label key={r}>
          <input
            type="checkbox"
            checked={roles.includes(r)}
            onChange={() => onChange(roles.includes(r) ? roles.filter((x) => x !== r) : [...roles, r])}
          />
          {r}
        </label>
      ))}
    </fieldset>
  );
}

export function MembersPage() {
  const { params } = useRoute();
  const project = params.project;
  const { api } = useSession();
  const base = `${projectPath(project)}/members`;
  const members = useLoad(
    async (signal) => (await api.get<{ users: User[] }>(base, { pageSize: 500 }, signal)).users ?? [],
    [project],
  );
  const [name, setName] = useState("");
  const [email, setEmail] = useState("");
  const [roles, setRoles] = useState<string[]>(["consumer"]);
  const [existing, setExisting] = useState(true);
  const add = useAction();
  const change = useAction();
  const rolesIn = (u: User) => u.projects?.find((m) => m.project === project)?.roles ?? [];
  return (
    <section>
      <Crumbs project={project} items={[["Members"]]} />
      <h1>Members of {project}</h1>
      <Loading loaded={members} label="members">
        {(users) =>
          users.length ? (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">User</th>
                    <th scope="col">Email</th>
                    <th scope="col">Roles</th>
                    <th scope="col">Change</th>
                  </tr>
                </thead>
                <tbody>
                  {users.map((u) => (
                    <tr key={u.uuid}>
                      <td>{u.name}</td>
                      <td>{u.email}</td>
                      <td>{rolesIn(u).join(", ")}</td>
                      <td class="row">
                        {PROJECT_ROLES.filter((r) => !rolesIn(u).includes(r)).map((r) => (
                          <button
                            key={r}
                            type="button"
                            class="secondary outline"
                            disabled={change.busy}
                            onClick={() =>
                              change
                                .run(async () => {
                                  await api.put(`${base}/${encodeURIComponent(u.name)}`, {
                                    projects: [{ project, roles: [...rolesIn(u), r] }],
                                  });
                                  return `${u.name} is now also ${r}`;
                                })
                                .then((ok) => ok && members.reload())
                            }
                          >
                            + {r}
                          </button>
                        ))}
                        <Confirmed
                          label="Remove"
                          question={`Remove ${u.name} from ${project}?`}
                          onConfirm={() =>
                            change
                              .run(async () => {
                                await api.post(`${base}/${encodeURIComponent(u.name)}:remove`, {});
                                return `${u.name} removed from ${project}`;
                              })
                              .then((ok) => ok && members.reload())
                          }
                        />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Empty>No members.</Empty>
          )
        }
      </Loading>
      <ActionState action={change} />
      <h2>Add a member</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          add
            .run(async () => {
              const path = `${base}/${encodeURIComponent(name)}`;
              if (existing) await api.post(`${path}:add`, { roles });
              else await api.post(path, { email, projects: [{ project, roles }] });
              return `${name} is a member of ${project} as ${roles.join(", ")}`;
            })
            .then((ok) => ok && members.reload());
        }}
      >
        <label>
          <input type="checkbox" role="switch" checked={existing} onChange={() => setExisting(!existing)} />
          The user exists already
        </label>
        <div class="grid">
          <Field label="User name">
            <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          {!existing ? (
            <Field label="Email">
              <input type="email" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
            </Field>
          ) : null}
        </div>
        <RoleChoice roles={roles} onChange={setRoles} name={name} />
        <button type="submit" disabled={add.busy || !roles.length}>
          Add member
        </button>
      </form>
      <ActionState action={add} />
    </section>
  );
}
