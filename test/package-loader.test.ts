/**
 * How the native addon is found and vetted (src/io/native-load.ts): prebuilt binary by node-gyp-build's tags, then
 * build/Release, then none; a candidate that fails to load or lacks a member the code uses is passed over with its
 * reason. Fake addons are small CommonJS modules (require() loads them like a .node file).
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { ADDON_SHAPE, loadNative, NATIVE_INTERFACE_VERSION, nativeStatus } from "../src/io/native.js";
import { type AddonCandidate, addonCandidates, findPrebuild, loadFirst } from "../src/io/native-load.js";

const dir = mkdtempSync(join(tmpdir(), "st-loader-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A CommonJS module exporting `members` with the types ADDON_SHAPE asks for (functions that do nothing). */
function fakeAddon(name: string, members: readonly string[]): AddonCandidate {
  const path = join(dir, `${name}.cjs`);
  const body = members
    .map((member) => {
      const kind = (ADDON_SHAPE as Record<string, string>)[member];
      return `  ${JSON.stringify(member)}: ${kind === "function" ? "() => {}" : "4096"},`;
    })
    .join("\n");
  writeFileSync(path, `module.exports = {\n${body}\n};\n`);
  return { origin: "prebuild", path };
}

const ALL = Object.keys(ADDON_SHAPE);

describe("addon loader", () => {
  test("the shape covers every function the code calls, the ones the old list missed included", () => {
    for (const name of ["openHead", "preadInto", "prefault", "open", "window", "close", "allocHuge", "stats"]) {
      assert.equal((ADDON_SHAPE as Record<string, string>)[name], "function", name);
    }
  });

  test("a complete module loads", () => {
    const full = fakeAddon("full", ALL);
    const result = loadFirst<object>([full], ADDON_SHAPE);
    assert.notEqual(result.addon, null);
    assert.deepEqual(result.loaded, full);
    assert.deepEqual(result.rejected, []);
  });

  test("a module lacking any one member is refused, naming it, for every member", () => {
    for (const missing of ALL) {
      const partial = fakeAddon(
        `without-${missing}`,
        ALL.filter((name) => name !== missing),
      );
      const result = loadFirst<object>([partial], ADDON_SHAPE);
      assert.equal(result.addon, null, missing);
      assert.equal(result.rejected.length, 1);
      assert.match(result.rejected[0]!, new RegExp(`lacks ${missing} \\(stale or partial build\\)`));
    }
  });

  test("a member of the wrong type is refused", () => {
    const path = join(dir, "mistyped.cjs");
    writeFileSync(
      path,
      `module.exports = { ...require(${JSON.stringify(fakeAddon("base", ALL).path)}), prefault: 1 };`,
    );
    const result = loadFirst<object>([{ origin: "build", path }], ADDON_SHAPE);
    assert.equal(result.addon, null);
    assert.match(result.rejected[0]!, /prefault is a number, not a function/);
  });

  test("a module with every member but another interface version (a stale build) is refused", () => {
    const path = join(dir, "stale.cjs");
    writeFileSync(
      path,
      `module.exports = { ...require(${JSON.stringify(fakeAddon("base-stale", ALL).path)}), interfaceVersion: 1 };`,
    );
    const current = join(dir, "current.cjs");
    writeFileSync(
      current,
      `module.exports = { ...require(${JSON.stringify(fakeAddon("base-current", ALL).path)}), interfaceVersion: ${NATIVE_INTERFACE_VERSION} };`,
    );
    const versions = { interfaceVersion: NATIVE_INTERFACE_VERSION };
    const result = loadFirst<object>(
      [
        { origin: "build", path },
        { origin: "build", path: current },
      ],
      ADDON_SHAPE,
      versions,
    );
    assert.match(result.rejected[0]!, new RegExp(`interfaceVersion is 1, not ${NATIVE_INTERFACE_VERSION}`));
    assert.equal(result.loaded?.path, current);
  });

  test("the addon built here has the interface version the code calls", {
    skip: loadNative() ? false : "native addon not built",
  }, () => {
    assert.equal(loadNative()!.interfaceVersion, NATIVE_INTERFACE_VERSION);
  });

  test("the next candidate is tried after a partial one, a broken one and a missing one", () => {
    const partial = fakeAddon(
      "partial",
      ALL.filter((name) => name !== "prefault"),
    );
    const broken = join(dir, "broken.node");
    writeFileSync(broken, "not a shared object");
    const full = { ...fakeAddon("next", ALL), origin: "build" as const };
    const result = loadFirst<object>(
      [partial, { origin: "prebuild", path: broken }, { origin: "build", path: join(dir, "absent.node") }, full],
      ADDON_SHAPE,
    );
    assert.deepEqual(result.loaded, full);
    assert.equal(result.rejected.length, 3);
    assert.match(result.rejected[0]!, /partial\.cjs: lacks prefault/);
    assert.match(result.rejected[1]!, /broken\.node: cannot load: /);
    assert.match(result.rejected[2]!, /absent\.node: not built/);
  });

  test("nothing loadable: no addon, every reason kept", () => {
    const result = loadFirst<object>([fakeAddon("only-open", ["open"])], ADDON_SHAPE);
    assert.equal(result.addon, null);
    assert.equal(result.loaded, undefined);
    assert.match(result.rejected[0]!, /lacks openHead, preadInto, window/);
  });
});

describe("prebuilt binary selection (node-gyp-build's tags)", () => {
  const abi = process.versions.modules;
  const tuple = `${process.platform}-${process.arch}`;

  function rootWith(files: readonly string[], folder = tuple): string {
    const root = mkdtempSync(join(dir, "root-"));
    mkdirSync(join(root, "prebuilds", folder), { recursive: true });
    for (const file of files) writeFileSync(join(root, "prebuilds", folder, file), "");
    return root;
  }

  test("this Node's ABI is picked; other ABIs are not", () => {
    const root = rootWith(["node.abi1.glibc.node", `node.abi${abi}.glibc.node`, `node.abi${Number(abi) + 1}.node`]);
    const found = findPrebuild(root);
    assert.ok("path" in found, JSON.stringify(found));
    assert.equal(found.path, join(root, "prebuilds", tuple, `node.abi${abi}.glibc.node`));
  });

  test("a binary for another ABI, libc or platform is not a candidate, and the reason says what was wanted", (t) => {
    if (process.platform !== "linux" || process.env.LIBC === "musl") {
      t.skip("libc tags only matter on glibc Linux");
      return;
    }
    for (const root of [
      rootWith([`node.abi${Number(abi) + 1}.glibc.node`]),
      rootWith([`node.abi${abi}.musl.node`]),
      rootWith([`node.abi${abi}.glibc.node`], "win32-x64"),
    ]) {
      const found = findPrebuild(root);
      assert.ok("missing" in found);
      assert.match(found.missing, new RegExp(`no prebuilt binary for ${tuple}, node ABI ${abi}`));
    }
  });

  test("another target's prebuild sits in a folder of its name", () => {
    const root = rootWith(["node.napi.glibc.node"], `${tuple}/safetensors_copy`);
    const found = findPrebuild(root, "safetensors_copy");
    assert.ok("path" in found, JSON.stringify(found));
    assert.equal(found.path, join(root, "prebuilds", tuple, "safetensors_copy", "node.napi.glibc.node"));
    assert.ok("missing" in findPrebuild(root), "the main addon must not pick another target's binary");
    const { candidates } = addonCandidates(root, "safetensors_copy");
    assert.equal(candidates.at(-1)!.path, join(root, "build", "Release", "safetensors_copy.node"));
  });

  test("candidates: the prebuild first, then build/Release", () => {
    const root = rootWith([`node.abi${abi}.glibc.node`]);
    const { candidates, rejected } = addonCandidates(root);
    assert.deepEqual(
      candidates.map((c) => c.origin),
      ["prebuild", "build"],
    );
    assert.equal(candidates[1]!.path, join(root, "build", "Release", "safetensors_native.node"));
    assert.deepEqual(rejected, []);
    const bare = addonCandidates(mkdtempSync(join(dir, "bare-")));
    assert.deepEqual(
      bare.candidates.map((c) => c.origin),
      ["build"],
    );
    assert.match(bare.rejected[0]!, /no prebuilt binary/);
  });
});

describe("this checkout's addon", () => {
  test("the module-level loader reports where its addon came from", (t) => {
    const status = nativeStatus();
    if (!status.available) {
      assert.equal(loadNative(), null);
      assert.ok(status.reason);
      t.skip(`native addon not available here: ${status.reason}`);
      return;
    }
    assert.ok(status.origin === "build" || status.origin === "prebuild");
    assert.ok(status.path);
  });
});
