import { useState } from "preact/hooks";
import { useRoute } from "preact-iso";
import { schemaPath, type Schema } from "../api";
import { href, useAction, useLoad, useSession } from "../app";
import { ActionState, Confirmed, Empty, Field, Loading } from "../components";
import { encodeText, shortName } from "../logic";
import { Crumbs } from "./shared";

/** The schema's text as the API takes it: JSON and Avro schemas are JSON documents, protobuf's
 * is the .proto source. */
export function schemaBody(type: string, text: string): unknown {
  if (type === "protobuf") return text;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`The ${type} schema is not valid JSON: ${(err as Error).message}`);
  }
}

export function schemaText(schema: Schema): string {
  return typeof schema.schema === "string" ? schema.schema : JSON.stringify(schema.schema, null, 2);
}

export function SchemasPage() {
  const { params } = useRoute();
  const project = params.project;
  const { api } = useSession();
  const list = useLoad(
    async (signal) =>
      (await api.get<{ schemas: Schema[] }>(`/projects/${encodeURIComponent(project)}/schemas`, undefined, signal)).schemas ?? [],
    [project],
  );
  const [name, setName] = useState("");
  const [type, setType] = useState("json");
  const [text, setText] = useState('{\n  "type": "object"\n}');
  const create = useAction();
  return (
    <section>
      <Crumbs project={project} items={[["Schemas"]]} />
      <h1>Schemas</h1>
      <Loading loaded={list} label="schemas">
        {(schemas) =>
          schemas.length ? (
            <ul>
              {schemas.map((s) => (
                <li key={s.uuid}>
                  <a href={href(`/projects/${encodeURIComponent(project)}/schemas/${encodeURIComponent(shortName(s.name))}`)}>
                    {shortName(s.name)}
                  </a>{" "}
                  <small>({s.type})</small>
                </li>
              ))}
            </ul>
          ) : (
            <Empty>No schemas yet.</Empty>
          )
        }
      </Loading>
      <h2>New schema</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create
            .run(async () => {
              await api.post(schemaPath(project, name), { type, schema: schemaBody(type, text) });
              return `Schema ${name} created`;
            })
            .then((ok) => ok && list.reload());
        }}
      >
        <div class="grid">
          <Field label="Name">
            <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="Type">
            <select value={type} onChange={(e) => setType((e.target as HTMLSelectElement).value)}>
              <option value="json">JSON Schema</option>
              <option value="avro">Avro</option>
              <option value="protobuf">Protocol Buffers</option>
            </select>
          </Field>
        </div>
        <Field label="Schema">
          <textarea rows={8} class="code" value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
        </Field>
        <button type="submit" disabled={create.busy}>
          Create schema
        </button>
      </form>
      <ActionState action={create} />
    </section>
  );
}

export function SchemaPage() {
  const { params } = useRoute();
  const { project, schema } = params;
  const { api } = useSession();
  const path = schemaPath(project, schema);
  const info = useLoad((signal) => api.get<Schema>(path, undefined, signal), [path]);
  const [text, setText] = useState<string | null>(null);
  const [message, setMessage] = useState("");
  const [encoding, setEncoding] = useState("JSON");
  const save = useAction();
  const validate = useAction();
  const remove = useAction();
  return (
    <section>
      <Crumbs project={project} items={[["Schemas", "/schemas"], [schema]]} />
      <h1>Schema {schema}</h1>
      <Loading loaded={info} label="the schema">
        {(s) => (
          <>
            <p>Type: {s.type}</p>
            <form
              onSubmit={(e) => {
                e.preventDefault();
                save
                  .run(async () => {
                    await api.put(path, { schema: schemaBody(s.type, text ?? schemaText(s)) });
                    return "Schema saved";
                  })
                  .then((ok) => {
                    if (ok) {
                      setText(null);
                      info.reload();
                    }
                  });
              }}
            >
              <Field label="Schema">
                <textarea rows={12} class="code" value={text ?? schemaText(s)} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
              </Field>
              <button type="submit" disabled={save.busy}>
                Save schema
              </button>
            </form>
            <ActionState action={save} />
            <h2>Validate a message</h2>
            <form
              onSubmit={(e) => {
                e.preventDefault();
                validate.run(async () => {
                  let body: unknown;
                  if (s.type === "json") {
                    try {
                      body = JSON.parse(message);
                    } catch (err) {
                      throw new Error(`The message is not JSON: ${(err as Error).message}`);
                    }
                  } else body = { data: encodeText(message), encoding };
                  const r = await api.post<{ message: string }>(`${path}:validate`, body);
                  return r.message;
                });
              }}
            >
              <Field label={s.type === "json" ? "Message (a JSON document)" : "Message (its JSON encoding)"}>
                <textarea rows={4} class="code" value={message} onInput={(e) => setMessage((e.target as HTMLTextAreaElement).value)} />
              </Field>
              {s.type !== "json" ? (
                <Field label="Encoding">
                  <select value={encoding} onChange={(e) => setEncoding((e.target as HTMLSelectElement).value)}>
                    <option value="JSON">JSON</option>
                    <option value="BINARY">binary</option>
                  </select>
                </Field>
              ) : null}
              <button type="submit" class="secondary" disabled={validate.busy}>
                Validate
              </button>
            </form>
            <ActionState action={validate} label="Validating…" />
            <h2>Delete</h2>
            <Confirmed
              label="Delete schema"
              question={`Delete schema ${schema}? Topics using it are detached.`}
              onConfirm={() =>
                remove.run(async () => {
                  await api.del(path);
                  window.location.assign(href(`/projects/${encodeURIComponent(project)}/schemas`));
                })
              }
            />
            <ActionState action={remove} />
          </>
        )}
      </Loading>
    </section>
  );
}
