import { cleanup, render, screen } from "@testing-library/preact";
import { fireEvent } from "@testing-library/preact";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "./api";
import { ActionState, ErrorNote, Loading, Pager } from "./components";
import { schemaBody, schemaText } from "./pages/schemas";

afterEach(cleanup);

describe("ErrorNote", () => {
  it("shows the API's code, status and message as an alert", () => {
    render(<ErrorNote error={new ApiError(409, "ALREADY_EXISTS", "Topic already exists")} />);
    expect(screen.getByRole("alert").textContent).toBe("409 ALREADY_EXISTS: Topic already exists");
  });

  it("lists exactly-once ack id errors", () => {
    render(<ErrorNote error={new ApiError(400, "INVALID_ARGUMENT", "Some ack ids failed", { "p/s:1.2": "expired" })} />);
    expect(screen.getByRole("listitem").textContent).toBe("p/s:1.2: expired");
  });

  it("shows nothing without an error", () => {
    const { container } = render(<ErrorNote error={undefined} />);
    expect(container.innerHTML).toBe("");
  });
});

describe("ActionState", () => {
  const action = { busy: false, error: undefined, done: "", run: async () => true, clear: () => undefined };

  it("shows progress while busy, then the outcome", () => {
    const { rerender } = render(<ActionState action={{ ...action, busy: true }} label="Publishing…" />);
    expect(screen.getByRole("status").textContent).toContain("Publishing…");
    expect(screen.getByLabelText("Publishing…").tagName).toBe("PROGRESS");
    rerender(<ActionState action={{ ...action, done: "Published message 1" }} />);
    expect(screen.getByRole("status").textContent).toBe("Published message 1");
  });

  it("prefers the error to an outcome", () => {
    render(<ActionState action={{ ...action, error: new Error("boom"), done: "x" }} />);
    expect(screen.getByRole("alert").textContent).toBe("boom");
  });
});

describe("Loading", () => {
  it("says what it loads, then renders the data, keeping a later error in sight", () => {
    const child = (d: string) => <p>{d}</p>;
    const { rerender } = render(<Loading loaded={{ data: undefined, error: undefined, loading: true }} label="topics" children={child} />);
    expect(screen.getByRole("status").textContent).toContain("Loading topics…");
    rerender(<Loading loaded={{ data: "t1", error: new Error("stale"), loading: false }} label="topics" children={child} />);
    expect(screen.getByText("t1")).toBeTruthy();
    expect(screen.getByRole("alert").textContent).toBe("stale");
  });
});

describe("schemas", () => {
  it("sends JSON and Avro schemas as documents and protobuf as text", () => {
    expect(schemaBody("json", '{"type": "object"}')).toEqual({ type: "object" });
    expect(schemaBody("protobuf", "syntax = 'proto3';")).toBe("syntax = 'proto3';");
    expect(() => schemaBody("avro", "{nope")).toThrow("not valid JSON");
  });

  it("shows a stored schema as text", () => {
    expect(schemaText({ uuid: "u", name: "projects/p/schemas/s", type: "json", schema: { a: 1 } })).toBe('{\n  "a": 1\n}');
    expect(schemaText({ uuid: "u", name: "projects/p/schemas/s", type: "protobuf", schema: "msg" })).toBe("msg");
  });
});

describe("Pager", () => {
  it("offers the next page, then the first again, and nothing for a single page", () => {
    const onPage = vi.fn();
    const { rerender, container } = render(<Pager current="" next="t2" onPage={onPage} />);
    expect(screen.queryByText("First page")).toBeNull();
    fireEvent.click(screen.getByText("Next page"));
    expect(onPage).toHaveBeenLastCalledWith("t2");
    rerender(<Pager current="t2" next="" onPage={onPage} />);
    fireEvent.click(screen.getByText("First page"));
    expect(onPage).toHaveBeenLastCalledWith("");
    rerender(<Pager current="" next="" onPage={onPage} />);
    expect(container.innerHTML).toBe("");
  });
});
