import { useState } from "preact/hooks";
import { href, useSession } from "../app";

export function ProfilePage() {
  const { user } = useSession();
  const [shown, setShown] = useState(false);
  return (
    <section>
      <h1>{user.name}</h1>
      <dl>
        <dt>Email</dt>
        <dd>{user.email}</dd>
        <dt>Service roles</dt>
        <dd>{user.service_roles.length ? user.service_roles.join(", ") : "none"}</dd>
        <dt>Projects</dt>
        <dd>
          {(user.projects ?? []).length
            ? user.projects!.map((m) => (
                <div key={m.project}>
                  <a href={href(`/projects/${encodeURIComponent(m.project)}`)}>{m.project}</a>: {m.roles.join(", ")}
                  {m.topics.length ? <small> · topics {m.topics.join(", ")}</small> : null}
                  {m.subscriptions.length ? <small> · subscriptions {m.subscriptions.join(", ")}</small> : null}
                </div>
              ))
            : "none"}
        </dd>
        {user.token ? (
          <>
            <dt>Token</dt>
            <dd class="row">
              <code>{shown ? user.token : "••••••••"}</code>
              <button type="button" class="secondary outline" onClick={() => setShown(!shown)}>
                {shown ? "Hide" : "Show"}
              </button>
            </dd>
          </>
        ) : null}
        <dt>Member since</dt>
        <dd>{user.created_on}</dd>
      </dl>
    </section>
  );
}
