/**
 * The tensor tree as a virtualized ARIA tree: only the rows in view (plus a margin) exist in the DOM, so 10,000
 * tensors scroll as smoothly as 10 (a synthetic 10k-tensor header renders about 60 row elements). Keyboard: arrows,
 * Home/End, PageUp/PageDown, Enter/Space; focus stays on the tree and `aria-activedescendant` names the active row.
 */
import type { TensorEntry } from "../src/view/summary.js";
import { type TreeNode, visibleRows } from "../src/view/tree.js";
import { group, humanCount, shapeText } from "./format.js";

export const ROW_HEIGHT = 26;
const OVERSCAN = 12;

/** Which groups start open: all of them when a filter narrowed the tree, else the top levels but not layer stacks. */
function initialExpansion(root: TreeNode, all: boolean, depth = 2): Set<string> {
  const open = new Set<string>();
  const visit = (n: TreeNode) => {
    if (n.children.length === 0) return;
    if (all || (!n.folded && n.depth <= depth)) open.add(n.path);
    for (const c of n.children) visit(c);
  };
  for (const c of root.children) visit(c);
  return open;
}

export class TreeView {
  private root: TreeNode | null = null;
  private tensors = new Map<string, TensorEntry>();
  private parents = new Map<TreeNode, TreeNode | null>();
  private open = new Set<string>();
  private rows: TreeNode[] = [];
  private active = 0;
  private selected: string | null = null;
  private readonly spacer: HTMLDivElement;
  private frame = 0;

  constructor(
    private readonly element: HTMLElement,
    private readonly onPick: (tensor: string) => void,
  ) {
    this.spacer = document.createElement("div");
    this.spacer.className = "tree-spacer";
    element.append(this.spacer);
    element.addEventListener("scroll", () => this.schedule());
    element.addEventListener("keydown", (event) => this.key(event));
    element.addEventListener("click", (event) => {
      const row = (event.target as HTMLElement).closest<HTMLElement>("[data-row]");
      if (!row) return;
      this.setActive(Number(row.dataset.row));
      const n = this.rows[this.active]!;
      // The arrow folds; the name opens the tensor a group node may also be (`a` beside `a.b`).
      if ((event.target as HTMLElement).classList.contains("twist") && n.children.length) this.toggle(n);
      else this.activate(n);
      element.focus({ preventScroll: true });
    });
    new ResizeObserver(() => this.schedule()).observe(element);
  }

  /** Shows a new tree (from `buildTree`); `expandAll` when a filter narrowed it down. */
  show(root: TreeNode, tensors: ReadonlyMap<string, TensorEntry>, expandAll: boolean): void {
    this.root = root;
    this.tensors = new Map(tensors);
    this.parents = new Map();
    const link = (n: TreeNode, parent: TreeNode | null) => {
      this.parents.set(n, parent);
      for (const c of n.children) link(c, n);
    };
    for (const c of root.children) link(c, null);
    this.open = initialExpansion(root, expandAll);
    this.active = 0;
    this.refresh();
    this.element.scrollTop = 0;
  }

  /** Marks a tensor as the one shown in the detail pane. */
  select(name: string | null): void {
    this.selected = name;
    this.render();
  }

  get rowCount(): number {
    return this.rows.length;
  }

  private refresh(): void {
    const key = this.rows[this.active]?.path;
    this.rows = this.root ? visibleRows(this.root, (n) => this.open.has(n.path)).map((r) => r.node) : [];
    const kept = key === undefined ? -1 : this.rows.findIndex((n) => n.path === key);
    this.active = kept >= 0 ? kept : Math.min(this.active, Math.max(0, this.rows.length - 1));
    this.spacer.style.height = `${this.rows.length * ROW_HEIGHT}px`;
    this.render();
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  private render(): void {
    const top = this.element.scrollTop;
    const height = this.element.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.rows.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    const items: HTMLElement[] = [];
    for (let i = first; i < last; i++) items.push(this.row(i));
    this.spacer.replaceChildren(...items);
    if (this.rows.length) this.element.setAttribute("aria-activedescendant", `tree-row-${this.active}`);
    else this.element.removeAttribute("aria-activedescendant");
  }

  private row(i: number): HTMLElement {
    const n = this.rows[i]!;
    const parent = this.parents.get(n) ?? null;
    const siblings = parent ? parent.children : this.root!.children;
    const el = document.createElement("div");
    el.id = `tree-row-${i}`;
    el.className = "tree-row";
    el.dataset.row = String(i);
    el.dataset.key = n.path;
    el.setAttribute("role", "treeitem");
    el.setAttribute("aria-level", String(n.depth));
    el.setAttribute("aria-setsize", String(siblings.length));
    el.setAttribute("aria-posinset", String(siblings.indexOf(n) + 1));
    el.style.transform = `translateY(${i * ROW_HEIGHT}px)`;
    el.style.paddingLeft = `${0.5 + (n.depth - 1) * 1.1}rem`;
    if (i === this.active) el.classList.add("active");
    const twist = document.createElement("span");
    twist.className = "twist";
    twist.setAttribute("aria-hidden", "true");
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = n.segment;
    const info = document.createElement("span");
    info.className = "info";
    const tensor = n.tensor === null ? undefined : this.tensors.get(n.tensor);
    if (tensor) {
      const selected = tensor.name === this.selected;
      el.setAttribute("aria-selected", String(selected));
      if (selected) el.classList.add("selected");
      el.title = tensor.name;
    }
    if (n.children.length) {
      const expanded = this.open.has(n.path);
      el.setAttribute("aria-expanded", String(expanded));
      twist.textContent = expanded ? "▾" : "▸";
      const layers = n.folded ? `${group(n.layers)} layers · ` : "";
      info.textContent = `${layers}${group(n.tensors)} · ${humanCount(n.counted)}`;
      el.title = `${n.path}: ${group(n.tensors)} tensors, ${group(n.parameters)} elements${
        n.counted === n.parameters ? "" : `, ${group(n.counted)} parameters as the Hub counts them`
      }`;
    } else if (tensor) {
      info.textContent = `${tensor.dtype} ${shapeText(tensor.shape)}`;
    }
    el.append(twist, label, info);
    return el;
  }

  private setActive(i: number): void {
    if (!this.rows.length) return;
    this.active = Math.max(0, Math.min(this.rows.length - 1, i));
    const top = this.active * ROW_HEIGHT;
    const view = this.element;
    if (top < view.scrollTop) view.scrollTop = top;
    else if (top + ROW_HEIGHT > view.scrollTop + view.clientHeight)
      view.scrollTop = top + ROW_HEIGHT - view.clientHeight;
    this.render();
  }

  private toggle(n: TreeNode, open = !this.open.has(n.path)): void {
    if (open) this.open.add(n.path);
    else this.open.delete(n.path);
    this.refresh();
  }

  /** Enter, Space or a click: a tensor opens in the detail pane, a group folds or unfolds. */
  private activate(n: TreeNode): void {
    if (n.tensor !== null) this.onPick(n.tensor);
    else if (n.children.length) this.toggle(n);
  }

  private key(event: KeyboardEvent): void {
    const n = this.rows[this.active];
    if (!n) return;
    const page = Math.max(1, Math.floor(this.element.clientHeight / ROW_HEIGHT) - 1);
    switch (event.key) {
      case "ArrowDown":
        this.setActive(this.active + 1);
        break;
      case "ArrowUp":
        this.setActive(this.active - 1);
        break;
      case "PageDown":
        this.setActive(this.active + page);
        break;
      case "PageUp":
        this.setActive(this.active - page);
        break;
      case "Home":
        this.setActive(0);
        break;
      case "End":
        this.setActive(this.rows.length - 1);
        break;
      case "ArrowRight":
        if (!n.children.length) break;
        if (!this.open.has(n.path)) this.toggle(n, true);
        else this.setActive(this.active + 1);
        break;
      case "ArrowLeft": {
        const parent = this.parents.get(n);
        if (n.children.length && this.open.has(n.path)) this.toggle(n, false);
        else if (parent) this.setActive(this.rows.indexOf(parent));
        break;
      }
      case "Enter":
      case " ":
        this.activate(n);
        break;
      default:
        return;
    }
    event.preventDefault();
  }
}
