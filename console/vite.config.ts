// The console is built into the Python package (ams_app/console_dist), which `ams serve` serves
// at /console (ams_app/console.py; docs/console.md). No inline scripts or styles: the page's CSP
// allows only its own files.
import { defineConfig } from "vitest/config";
import preact from "@preact/preset-vite";

export default defineConfig({
  base: "/console/",
  plugins: [preact()],
  build: {
    outDir: "../ams_app/console_dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
  },
});
