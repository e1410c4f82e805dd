import { useMemo, useState } from "preact/hooks";
import {
  authnApi,
  bindingChanges,
  bindingPath,
  distinctUsers,
  hostsOf,
  lastAuthText,
  newBindingBody,
  parseHosts,
  resolveUsers,
  serviceTypeName,
  userLabel,
  userUuid,
  type Binding,
  type BindingsPage,
  type ServiceType,
} from "../authn";
import { useAction, useLoad, useSession, type Action } from "../app";
import { ActionState, Confirmed, Empty, Field, Loading, Pager } from "../components";
import { capabilities } from "../logic";

const DN_HINT = "The certificate's subject DN, as openssl x509 -noout -subject -nameopt RFC2253,-esc_msb prints it";

/** AuthN's service types and bindings (which client certificate gets which AMS user's token),
 * through the management API `ams serve` answers under /authn/v1: for service admins only. */
export function AuthnPage() {
  const { user } = useSession();
  if (!capabilities(user, "").serviceAdmin)
    return (
      <section>
        <h1>AuthN bindings</h1>
        <Empty>Only service admins manage the AuthN service types and bindings.</Empty>
      </section>
    );
  return <AuthnAdmin />;
}

function AuthnAdmin() {
  const { api } = useSession();
  const authn = useMemo(() => authnApi(api), [api]);
  const types = useLoad(
    async (signal) => (await authn.get<{ service_types: ServiceType[] }>("/service-types", undefined, signal)).service_types ?? [],
    [authn],
  );
  const [pageToken, setPageToken] = useState("");
  const list = useLoad((signal) => authn.get<BindingsPage>("/bindings", { pageSize: 50, pageToken }, signal), [authn, pageToken]);
  const uuids = distinctUsers(list.data?.bindings ?? []);
  const names = useLoad((signal) => resolveUsers(api, uuids, signal), [api, uuids.join(" ")]);
  const [editing, setEditing] = useState<Binding | null>(null);
  const change = useAction();
  const known = types.data ?? [];
  return (
    <section>
      <h1>AuthN bindings</h1>
      <p>
        A binding gives the holder of a client certificate (its subject DN) on one host of a service type the token of
        an AMS user, through <code>ams authn</code>'s x509 call.
      </p>
      <h2>Service types</h2>
      <Loading loaded={types} label="service types">
        {(sts) =>
          sts.length ? (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Hosts</th>
                    <th scope="col">Type</th>
                    <th scope="col">Created</th>
                  </tr>
                </thead>
                <tbody>
                  {sts.map((st) => (
                    <tr key={st.uuid}>
                      <td>{st.name}</td>
                      <td>{st.hosts.join(", ")}</td>
                      <td>{st.type}</td>
                      <td>{st.created_on}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Empty>No service types.</Empty>
          )
        }
      </Loading>
      <NewServiceType onCreated={types.reload} />
      <h2>Bindings</h2>
      <Loading loaded={list} label="bindings">
        {(page) => (
          <>
            <p>{page.totalSize} bindings</p>
            {page.bindings.length ? (
              <div class="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Name</th>
                      <th scope="col">Service type</th>
                      <th scope="col">Host</th>
                      <th scope="col">DN</th>
                      <th scope="col">User</th>
                      <th scope="col">Last used</th>
                      <th scope="col">Change</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.bindings.map((b) => (
                      <tr key={b.uuid}>
                        <td>{b.name}</td>
                        <td>{serviceTypeName(known, b.service_uuid)}</td>
                        <td>{b.host}</td>
                        <td>
                          <code>{b.auth_identifier}</code>
                        </td>
                        <td>{userLabel(names.data, b.unique_key)}</td>
                        <td>{lastAuthText(b)}</td>
                        <td class="row">
                          <button
                            type="button"
                            class="secondary outline"
                            aria-label={`Edit binding ${b.name}`}
                            onClick={() => {
                              change.clear();
                              setEditing(b);
                            }}
                          >
                            Edit
                          </button>
                          <Confirmed
                            label="Delete"
                            question={`Delete binding ${b.name}? The certificate ${b.auth_identifier} stops getting a token on ${b.host}.`}
                            disabled={change.busy}
                            onConfirm={() =>
                              change
                                .run(async () => {
                                  await authn.del(bindingPath(b.name));
                                  if (editing?.name === b.name) setEditing(null);
                                  return `Binding ${b.name} deleted`;
                                })
                                .then((ok) => ok && list.reload())
                            }
                          />
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            ) : (
              <Empty>No bindings.</Empty>
            )}
            <Pager current={pageToken} next={page.nextPageToken} onPage={setPageToken} />
          </>
        )}
      </Loading>
      {editing ? (
        <EditBinding
          key={editing.uuid}
          binding={editing}
          userName={names.data?.get(editing.unique_key) ?? ""}
          action={change}
          onDone={(saved) => {
            setEditing(null);
            if (saved) list.reload();
          }}
        />
      ) : null}
      <ActionState action={change} />
      <NewBinding types={known} onCreated={list.reload} />
    </section>
  );
}

function NewServiceType({ onCreated }: { onCreated: () => void }) {
  const { api } = useSession();
  const authn = useMemo(() => authnApi(api), [api]);
  const [name, setName] = useState("");
  const [hosts, setHosts] = useState("");
  const create = useAction();
  return (
    <>
      <h3>New service type</h3>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create
            .run(async () => {
              const list = parseHosts(hosts);
              if (!list.length) throw new Error("Give at least one host");
              await authn.post("/service-types", { name, hosts: list, type: "ams" });
              return `Service type ${name} created with ${list.join(", ")}`;
            })
            .then((ok) => ok && onCreated());
        }}
      >
        <div class="grid">
          <Field label="Service type name">
            <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Hosts" hint="The host names clients send their AMS requests to, separated by commas or spaces">
            <input required value={hosts} onInput={(e) => setHosts((e.target as HTMLInputElement).value)} />
          </Field>
        </div>
        <button type="submit" disabled={create.busy}>
          Create service type
        </button>
      </form>
      <ActionState action={create} />
    </>
  );
}

function NewBinding({ types, onCreated }: { types: ServiceType[]; onCreated: () => void }) {
  const { api } = useSession();
  const authn = useMemo(() => authnApi(api), [api]);
  const [name, setName] = useState("");
  const [serviceType, setServiceType] = useState("");
  const [host, setHost] = useState("");
  const [dn, setDn] = useState("");
  const [userName, setUserName] = useState("");
  const create = useAction();
  const chosen = serviceType || types[0]?.name || "";
  const hosts = hostsOf(types, chosen);
  const chosenHost = hosts.includes(host) ? host : (hosts[0] ?? "");
  return (
    <>
      <h3>New binding</h3>
      {types.length ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            create
              .run(async () => {
                const partial = newBindingBody(types, { serviceType: chosen, host: chosenHost, dn });
                const body = { ...partial, unique_key: await userUuid(api, userName) };
                await authn.post(bindingPath(name), body);
                return `Binding ${name} created: ${body.auth_identifier} on ${body.host} gets ${userName.trim()}'s token`;
              })
              .then((ok) => ok && onCreated());
          }}
        >
          <div class="grid">
            <Field label="Binding name">
              <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </Field>
            <Field label="AMS user">
              <input required value={userName} onInput={(e) => setUserName((e.target as HTMLInputElement).value)} />
            </Field>
          </div>
          <div class="grid">
            <Field label="Service type">
              <select value={chosen} onChange={(e) => setServiceType((e.target as HTMLSelectElement).value)}>
                {types.map((t) => (
                  <option key={t.uuid} value={t.name}>
                    {t.name}
                  </option>
                ))}
              </select>
            </Field>
            <Field label="Host">
              <select value={chosenHost} onChange={(e) => setHost((e.target as HTMLSelectElement).value)}>
                {hosts.map((h) => (
                  <option key={h} value={h}>
                    {h}
                  </option>
                ))}
              </select>
            </Field>
          </div>
          <Field label="Certificate DN" hint={DN_HINT}>
            <input required value={dn} onInput={(e) => setDn((e.target as HTMLInputElement).value)} />
          </Field>
          <button type="submit" disabled={create.busy}>
            Create binding
          </button>
        </form>
      ) : (
        <Empty>Create a service type first: a binding is on one of its hosts.</Empty>
      )}
      <ActionState action={create} />
    </>
  );
}

function EditBinding({
  binding,
  userName,
  action,
  onDone,
}: {
  binding: Binding;
  userName: string;
  action: Action;
  onDone: (saved: boolean) => void;
}) {
  const { api } = useSession();
  const authn = useMemo(() => authnApi(api), [api]);
  const [dn, setDn] = useState(binding.auth_identifier);
  const [name, setName] = useState(userName);
  return (
    <>
      <h3>Change binding {binding.name}</h3>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          action
            .run(async () => {
              const wanted = name.trim();
              const uuid = wanted && wanted !== userName ? await userUuid(api, wanted) : binding.unique_key;
              const changes = bindingChanges(binding, dn, uuid);
              if (!Object.keys(changes).length) return `Binding ${binding.name}: nothing changed`;
              await authn.put(bindingPath(binding.name), changes);
              return `Binding ${binding.name} saved`;
            })
            .then((ok) => ok && onDone(true));
        }}
      >
        <Field label="Certificate DN" hint={DN_HINT}>
          <input required value={dn} onInput={(e) => setDn((e.target as HTMLInputElement).value)} />
        </Field>
        <Field label="AMS user" hint={userName ? undefined : `Empty: still the user with uuid ${binding.unique_key}`}>
          <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </Field>
        <p class="row">
          <button type="submit" disabled={action.busy}>
            Save binding
          </button>
          <button type="button" class="secondary outline" onClick={() => onDone(false)}>
            Cancel
          </button>
        </p>
      </form>
    </>
  );
}
