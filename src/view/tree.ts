/**
 * Tensors as a tree by dotted name (`model.layers.0.self_attn.q_proj.weight`): one node per name segment, with
 * tensor counts, bytes and parameter subtotals. Numeric segments are layers: a node whose children include numbered
 * ones is a `layers` node (`folded: true`, so a page shows `layers (32)` closed) and its numbered children sort by
 * number; other children keep the order of their first tensor in the input (file order for a file).
 *
 * Pure code: no `node:` imports, runs in browsers.
 */

export interface TreeTensor {
  readonly name: string;
  readonly bytes: number;
  /** Element count. */
  readonly parameters: number;
  /** Parameters as the Hub counts them (`params.ts`); defaults to `parameters`. */
  readonly counted?: number;
}

export interface TreeNode {
  /** This node's segment ("" for the root). */
  readonly segment: string;
  /** The dotted prefix this node stands for ("" for the root); unique within a tree. */
  readonly path: string;
  /** 0 for the root. */
  readonly depth: number;
  /** True when the segment is a decimal number (a layer index). */
  readonly layer: boolean;
  /** True when some children are layers: shown folded. */
  readonly folded: boolean;
  /** The tensor named exactly `path`, if there is one (a name can also be a prefix of others). */
  readonly tensor: string | null;
  readonly children: TreeNode[];
  /** Totals over this node's subtree. */
  tensors: number;
  bytes: number;
  parameters: number;
  counted: number;
  /** Layer children (0 when not folded). */
  layers: number;
}

interface Building {
  node: TreeNode;
  byName: Map<string, Building>;
  order: number;
}

const NUMERIC = /^(0|[1-9][0-9]*)$/;

function makeNode(segment: string, path: string, depth: number): TreeNode {
  return {
    segment,
    path,
    depth,
    layer: NUMERIC.test(segment),
    folded: false,
    tensor: null,
    children: [],
    tensors: 0,
    bytes: 0,
    parameters: 0,
    counted: 0,
    layers: 0,
  };
}

export function buildTree(tensors: Iterable<TreeTensor>): TreeNode {
  const root: Building = { node: makeNode("", "", 0), byName: new Map(), order: 0 };
  let order = 0;
  for (const tensor of tensors) {
    const counted = tensor.counted ?? tensor.parameters;
    let at = root;
    const add = (b: Building) => {
      b.node.tensors++;
      b.node.bytes += tensor.bytes;
      b.node.parameters += tensor.parameters;
      b.node.counted += counted;
    };
    add(root);
    const segments = tensor.name.split(".");
    for (let i = 0; i < segments.length; i++) {
      const segment = segments[i]!;
      let child = at.byName.get(segment);
      if (!child) {
        const path = i === 0 ? segment : `${at.node.path}.${segment}`;
        child = { node: makeNode(segment, path, i + 1), byName: new Map(), order: order++ };
        at.byName.set(segment, child);
      }
      add(child);
      at = child;
    }
    (at.node as { tensor: string | null }).tensor = tensor.name;
  }
  const finish = (b: Building): TreeNode => {
    const kids = [...b.byName.values()];
    kids.sort((x, y) => {
      if (x.node.layer && y.node.layer) return Number(x.node.segment) - Number(y.node.segment);
      return x.order - y.order;
    });
    const layers = kids.filter((k) => k.node.layer).length;
    const node = b.node as { folded: boolean; layers: number; children: TreeNode[] };
    node.layers = layers;
    node.folded = layers > 0;
    node.children.push(...kids.map(finish));
    return b.node;
  };
  return finish(root);
}

export interface TreeRow {
  readonly node: TreeNode;
  readonly depth: number;
}

/**
 * The rows a tree view shows, depth first: the root's children, and the children of every node `isOpen` says is
 * open (for a virtualized list: only this array's visible slice is rendered).
 */
export function visibleRows(root: TreeNode, isOpen: (node: TreeNode) => boolean): TreeRow[] {
  const rows: TreeRow[] = [];
  const stack: TreeNode[] = [...root.children].reverse();
  while (stack.length > 0) {
    const node = stack.pop()!;
    rows.push({ node, depth: node.depth - 1 });
    if (node.children.length > 0 && isOpen(node)) {
      for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i]!);
    }
  }
  return rows;
}
