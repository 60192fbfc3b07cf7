/**
 * The tensors as a tree by dotted name: `model.layers.0.mlp.up_proj.weight` under `model.layers` › `0` › `mlp` ›
 * `up_proj`. Numeric segments are layers (folded at first); chains of single children are merged into one row
 * (`model.layers`), so a 1,750-tensor Llama opens as a dozen rows. Counts and parameter subtotals per node.
 */
import type { SummaryTensor } from "./model.js";

export interface TreeNode {
  /** Unique: "t" + the tensor's name for a tensor, "g" + the dotted path for a group (`a` can be both). */
  readonly key: string;
  /** What the row says: one segment, or a merged chain of them. */
  label: string;
  readonly tensor: SummaryTensor | null;
  children: TreeNode[];
  /** Tensors in this subtree (including its own). */
  count: number;
  parameters: number;
  /** A numeric segment: one layer of a stack. */
  readonly layer: boolean;
  depth: number;
  parent: TreeNode | null;
}

const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** Natural order: `2` before `10`, otherwise by code point. */
function compareSegments(a: TreeNode, b: TreeNode): number {
  if (a.layer && b.layer) return Number(a.label) - Number(b.label);
  if (a.layer !== b.layer) return a.layer ? -1 : 1;
  return a.label < b.label ? -1 : a.label > b.label ? 1 : 0;
}

function node(key: string, label: string, tensor: SummaryTensor | null, parent: TreeNode | null): TreeNode {
  return { key, label, tensor, children: [], count: 0, parameters: 0, layer: /^\d+$/.test(label), depth: 0, parent };
}

/** Builds the forest of top-level nodes. `parametersOf` counts a tensor (the Hub's way for packed layouts). */
export function buildTree(
  tensors: readonly SummaryTensor[],
  parametersOf: (t: SummaryTensor) => number = (t) => numel(t.shape),
): TreeNode[] {
  const root = node("", "", null, null);
  // Child lookup by segment; a Map because `__proto__` is a real tensor name.
  const index = new Map<TreeNode, Map<string, TreeNode>>();
  for (const tensor of tensors) {
    const parts = tensor.name.split(".");
    let at = root;
    for (let i = 0; i < parts.length; i++) {
      const last = i === parts.length - 1;
      let children = index.get(at);
      if (!children) {
        children = new Map();
        index.set(at, children);
      }
      const key = (last ? "t" : "g") + parts.slice(0, i + 1).join(".");
      let next = last ? undefined : children.get(parts[i]!);
      // A tensor whose name is also a prefix of others (`a` and `a.b`) gets its own leaf beside the group.
      if (!next || next.tensor) {
        next = node(key, parts[i]!, last ? tensor : null, at);
        if (!last) children.set(parts[i]!, next);
        at.children.push(next);
      }
      at = next;
    }
  }
  const finish = (n: TreeNode, depth: number): void => {
    n.depth = depth;
    n.count = n.tensor ? 1 : 0;
    n.parameters = n.tensor ? parametersOf(n.tensor) : 0;
    // Merge chains of single group children: `model` › `layers` becomes `model.layers`.
    while (!n.tensor && n.children.length === 1 && !n.children[0]!.tensor && n.parent) {
      const only = n.children[0]!;
      n.label = `${n.label}.${only.label}`;
      n.children = only.children;
      for (const c of n.children) c.parent = n;
    }
    for (const c of n.children) {
      finish(c, depth + 1);
      n.count += c.count;
      n.parameters += c.parameters;
    }
    n.children.sort(compareSegments);
  };
  finish(root, -1);
  for (const c of root.children) c.parent = null;
  return root.children;
}

/** Which groups start open: everything but layers, down to `depth`, and everything when few tensors match. */
export function initialExpansion(roots: readonly TreeNode[], all: boolean, depth = 1): Set<string> {
  const open = new Set<string>();
  const visit = (n: TreeNode) => {
    if (n.tensor) return;
    if (all || (!n.layer && n.depth <= depth)) open.add(n.key);
    for (const c of n.children) visit(c);
  };
  for (const r of roots) visit(r);
  return open;
}

/** The rows on screen: a depth-first walk over open groups. */
export function visibleRows(roots: readonly TreeNode[], open: ReadonlySet<string>): TreeNode[] {
  const rows: TreeNode[] = [];
  const stack = [...roots].reverse();
  while (stack.length) {
    const n = stack.pop()!;
    rows.push(n);
    if (!n.tensor && open.has(n.key)) for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i]!);
  }
  return rows;
}
