import "@picocss/pico/css/pico.min.css";
import "./style.css";
import { render } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { LocationProvider, Route, Router, useLocation } from "preact-iso";
import { Api, ApiError, type User } from "./api";
import { BASE, href, SessionContext, type Session } from "./app";
import { Busy, ErrorNote } from "./components";
import { isOperator, SERVICE_ADMIN } from "./logic";
import { AuthnPage } from "./pages/authn";
import { ClusterPage } from "./pages/cluster";
import { MembersPage } from "./pages/members";
import { ProfilePage } from "./pages/profile";
import { ProjectPage, ProjectsPage } from "./pages/projects";
import { RegistrationsPage } from "./pages/registrations";
import { SchemaPage, SchemasPage } from "./pages/schemas";
import { SubscriptionPage } from "./pages/subscription";
import { TopicPage } from "./pages/topic";
import { UserPage, UsersPage } from "./pages/users";
import { forgetToken, storedToken, storeToken } from "./session";

function Login({ onSignedIn }: { onSignedIn: (api: Api, user: User) => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<Error | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    const api = new Api(token.trim());
    try {
      const user = await api.get<User>("/users/profile");
      storeToken(api.token);
      onSignedIn(api, user);
    } catch (err) {
      setError(err instanceof ApiError && err.code === 401 ? new Error("That token is not valid") : (err as Error));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="container login">
      <article>
        <header>
          <h1>AMS console</h1>
          <p>Sign in with your AMS token. It stays in this tab only and is sent to the API in a header.</p>
        </header>
        <form onSubmit={submit}>
          <label>
            Token
            <input
              type="password"
              name="token"
              autoComplete="off"
              required
              value={token}
              onInput={(e) => setToken((e.target as HTMLInputElement).value)}
            />
          </label>
          <button type="submit" aria-busy={busy} disabled={busy || !token.trim()}>
            Sign in
          </button>
        </form>
        <ErrorNote error={error} />
      </article>
    </main>
  );
}

function Nav({ user, signOut }: { user: User; signOut: () => void }) {
  const admin = user.service_roles.includes(SERVICE_ADMIN);
  return (
    <nav class="container-fluid top" aria-label="Main">
      <ul>
        <li>
          <a href={href("/")} class="brand">
            <strong>AMS</strong> console
          </a>
        </li>
      </ul>
      <ul>
        <li>
          <a href={href("/projects")}>Projects</a>
        </li>
        {isOperator(user) ? (
          <li>
            <a href={href("/cluster")}>Cluster</a>
          </li>
        ) : null}
        {admin ? (
          <>
            <li>
              <a href={href("/users")}>Users</a>
            </li>
            <li>
              <a href={href("/registrations")}>Registrations</a>
            </li>
            <li>
              <a href={href("/authn")}>AuthN</a>
            </li>
          </>
        ) : null}
        <li>
          <a href={href("/profile")} data-testid="whoami">
            {user.name}
          </a>
        </li>
        <li>
          <button type="button" class="secondary outline" onClick={signOut}>
            Sign out
          </button>
        </li>
      </ul>
    </nav>
  );
}

function NotFound() {
  return (
    <section>
      <h1>Not found</h1>
      <p>
        There is no such page. <a href={href("/projects")}>Back to the projects</a>.
      </p>
    </section>
  );
}

function Home() {
  const { route } = useLocation();
  useEffect(() => route(href("/projects"), true), [route]);
  return null;
}

function Pages() {
  return (
    <Router>
      <Route path={`${BASE}/`} component={Home} />
      <Route path={BASE} component={Home} />
      <Route path={`${BASE}/projects`} component={ProjectsPage} />
      <Route path={`${BASE}/projects/:project`} component={ProjectPage} />
      <Route path={`${BASE}/projects/:project/members`} component={MembersPage} />
      <Route path={`${BASE}/projects/:project/schemas`} component={SchemasPage} />
      <Route path={`${BASE}/projects/:project/schemas/:schema`} component={SchemaPage} />
      <Route path={`${BASE}/projects/:project/topics/:topic`} component={TopicPage} />
      <Route path={`${BASE}/projects/:project/subscriptions/:subscription`} component={SubscriptionPage} />
      <Route path={`${BASE}/cluster`} component={ClusterPage} />
      <Route path={`${BASE}/users`} component={UsersPage} />
      <Route path={`${BASE}/users/:user`} component={UserPage} />
      <Route path={`${BASE}/registrations`} component={RegistrationsPage} />
      <Route path={`${BASE}/authn`} component={AuthnPage} />
      <Route path={`${BASE}/profile`} component={ProfilePage} />
      <Route default component={NotFound} />
    </Router>
  );
}

function Console() {
  const [session, setSession] = useState<Session | null>(null);
  const [restoring, setRestoring] = useState(() => !!storedToken());
  const [restoreError, setRestoreError] = useState<Error | undefined>(undefined);

  const signOut = useCallback(() => {
    forgetToken();
    setSession(null);
  }, []);

  const signedIn = useCallback(
    (api: Api, user: User) => {
      const reloadUser = async () => {
        const fresh = await api.get<User>("/users/profile");
        setSession((s) => (s ? { ...s, user: fresh } : s));
      };
      setSession({ api, user, reloadUser, signOut });
    },
    [signOut],
  );

  useEffect(() => {
    const token = storedToken();
    if (!token) return;
    const api = new Api(token);
    api.get<User>("/users/profile").then(
      (user) => {
        signedIn(api, user);
        setRestoring(false);
      },
      (err: Error) => {
        if (err instanceof ApiError && err.code === 401) forgetToken();
        else setRestoreError(err);
        setRestoring(false);
      },
    );
  }, [signedIn]);

  if (restoring) return <Busy label="Signing in…" />;
  if (!session)
    return (
      <>
        {restoreError ? <ErrorNote error={restoreError} /> : null}
        <Login onSignedIn={signedIn} />
      </>
    );
  return (
    <SessionContext.Provider value={session}>
      <a href="#content" class="skip">
        Skip to content
      </a>
      <Nav user={session.user} signOut={signOut} />
      <main class="container" id="content">
        <Pages />
      </main>
    </SessionContext.Provider>
  );
}

function Root() {
  return (
    <LocationProvider scope={BASE}>
      <Console />
    </LocationProvider>
  );
}

render(<Root />, document.getElementById("app") as HTMLElement);
