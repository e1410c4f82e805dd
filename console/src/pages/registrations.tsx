import { useState } from "preact/hooks";
import type { Registration } from "../api";
import { useAction, useLoad, useSession } from "../app";
import { ActionState, Empty, Loading } from "../components";

export function RegistrationsPage() {
  const { api } = useSession();
  const [status, setStatus] = useState("pending");
  const list = useLoad(
    async (signal) =>
      (await api.get<{ user_registrations: Registration[] }>("/registrations", { status }, signal)).user_registrations ?? [],
    [status],
  );
  const [comment, setComment] = useState("");
  const act = useAction();
  return (
    <section>
      <h1>Registrations</h1>
      <label>
        Showing
        <select value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
          <option value="pending">pending</option>
          <option value="accepted">accepted</option>
          <option value="declined">declined</option>
        </select>
      </label>
      <Loading loaded={list} label="registrations">
        {(regs) =>
          regs.length ? (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Email</th>
                    <th scope="col">Organization</th>
                    <th scope="col">Registered</th>
                    <th scope="col">Decision</th>
                  </tr>
                </thead>
                <tbody>
                  {regs.map((r) => (
                    <tr key={r.uuid}>
                      <td>
                        {r.name}
                        <br />
                        <small>{r.description}</small>
                      </td>
                      <td>{r.email}</td>
                      <td>{r.organization}</td>
                      <td>{r.registered_at}</td>
                      <td class="row">
                        {r.status === "pending" ? (
                          <>
                            <button
                              type="button"
                              disabled={act.busy}
                              onClick={() =>
                                act
                                  .run(async () => {
                                    await api.post(`/registrations/${encodeURIComponent(r.uuid)}:accept`, {});
                                    return `${r.name} accepted: the user exists now`;
                                  })
                                  .then((ok) => ok && list.reload())
                              }
                            >
                              Accept
                            </button>
                            <button
                              type="button"
                              class="secondary"
                              disabled={act.busy}
                              onClick={() =>
                                act
                                  .run(async () => {
                                    await api.post(`/registrations/${encodeURIComponent(r.uuid)}:decline`, { comment });
                                    return `${r.name} declined`;
                                  })
                                  .then((ok) => ok && list.reload())
                              }
                            >
                              Decline
                            </button>
                          </>
                        ) : (
                          `${r.status}${r.modified_by ? ` by ${r.modified_by}` : ""}${r.decline_comment ? `: ${r.decline_comment}` : ""}`
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Empty>No {status} registrations.</Empty>
          )
        }
      </Loading>
      {status === "pending" ? (
        <label>
          Comment sent with a decline
          <input value={comment} onInput={(e) => setComment((e.target as HTMLInputElement).value)} />
        </label>
      ) : null}
      <ActionState action={act} />
    </section>
  );
}
