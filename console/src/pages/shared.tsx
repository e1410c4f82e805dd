import { useState } from "preact/hooks";
import { href, useAction, useLoad, useSession } from "../app";
import { ActionState, Loading } from "../components";

/** A topic's or subscription's ACL (GET {path}:acl, POST {path}:modifyAcl), for project admins. */
export function AclEditor({ path, what }: { path: string; what: string }) {
  const { api } = useSession();
  const acl = useLoad((signal) => api.get<{ authorized_users: string[] }>(`${path}:acl`, undefined, signal), [path]);
  const [text, setText] = useState<string | null>(null);
  const save = useAction();
  return (
    <section aria-labelledby={`acl-${what}`}>
      <h2 id={`acl-${what}`}>Access list</h2>
      <Loading loaded={acl} label="the access list">
        {(a) => (
          <form
            onSubmit={(e) => {
              e.preventDefault();
              const users = (text ?? a.authorized_users.join("\n"))
                .split(/[\s,]+/)
                .map((u) => u.trim())
                .filter(Boolean);
              save
                .run(async () => {
                  await api.post(`${path}:modifyAcl`, { authorized_users: users });
                  return `The ${what}'s access list now has ${users.length} user${users.length === 1 ? "" : "s"}`;
                })
                .then((ok) => {
                  if (ok) {
                    setText(null);
                    acl.reload();
                  }
                });
            }}
          >
            <label>
              Users who may use this {what} (one per line; project admins always may)
              <textarea
                rows={3}
                value={text ?? a.authorized_users.join("\n")}
                onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
              />
            </label>
            <button type="submit" disabled={save.busy}>
              Save access list
            </button>
          </form>
        )}
      </Loading>
      <ActionState action={save} />
    </section>
  );
}

/** Where a page is: Projects > project > [section >] page. Every step but the last is a link
 * (``items``: a label and the path under the project it links to). */
export function Crumbs({ project, items }: { project: string; items: [string, string?][] }) {
  const base = `/projects/${encodeURIComponent(project)}`;
  return (
    <nav aria-label="breadcrumb">
      <ul>
        <li>
          <a href={href("/projects")}>Projects</a>
        </li>
        <li>
          <a href={href(base)}>{project}</a>
        </li>
        {items.map(([label, path], i) => (
          <li key={label}>
            {i < items.length - 1 ? <a href={href(`${base}${path ?? ""}`)}>{label}</a> : label}
          </li>
        ))}
      </ul>
    </nav>
  );
}
