import { describe, expect, it, vi } from "vitest";

// uPlot measures the screen when it loads: jsdom has no matchMedia
vi.stubGlobal("matchMedia", () => ({ matches: false, addEventListener: () => undefined, removeEventListener: () => undefined }));
const { timeRange } = await import("./chart");

describe("timeRange", () => {
  it("shows at least the last minute", () => {
    expect(timeRange([1000], 5000)).toEqual([940, 1001]);
    expect(timeRange([1000, 1030], 5000)).toEqual([970, 1031]);
  });
  it("spans the samples once they cover more", () => {
    expect(timeRange([1000, 1030, 1200], 5000)).toEqual([1000, 1200]);
  });
  it("ends now without samples", () => {
    expect(timeRange([], 5000)).toEqual([4940, 5000]);
  });
});
