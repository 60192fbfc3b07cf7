/**
 * The tensor tree as a virtualized ARIA tree: only the rows in view (plus a margin) exist in the DOM, so 10,000
 * tensors scroll as smoothly as 10 (a synthetic 10k-tensor header renders about 60 row elements). Keyboard: arrows,
 * Home/End, PageUp/PageDown, Enter/Space; focus stays on the tree and `aria-activedescendant` names the active row.
 */
import { group, humanCount, shapeText } from "./format.js";
import { initialExpansion, type TreeNode, visibleRows } from "./tree-model.js";

export const ROW_HEIGHT = 26;
const OVERSCAN = 12;

export class TreeView {
  private roots: TreeNode[] = [];
  private open = new Set<string>();
  private rows: TreeNode[] = [];
  private active = 0;
  private selected: string | null = null;
  private readonly spacer: HTMLDivElement;
  private frame = 0;

  constructor(
    private readonly element: HTMLElement,
    private readonly onPick: (node: TreeNode) => void,
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
      this.activate(this.rows[this.active]!);
      element.focus({ preventScroll: true });
    });
    new ResizeObserver(() => this.schedule()).observe(element);
  }

  /** Shows a new forest; `expandAll` when a filter narrowed it down. */
  show(roots: TreeNode[], expandAll: boolean): void {
    this.roots = roots;
    this.open = initialExpansion(roots, expandAll);
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
    const key = this.rows[this.active]?.key;
    this.rows = visibleRows(this.roots, this.open);
    const kept = key === undefined ? -1 : this.rows.findIndex((n) => n.key === key);
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
    const siblings = n.parent ? n.parent.children : this.roots;
    const el = document.createElement("div");
    el.id = `tree-row-${i}`;
    el.className = "tree-row";
    el.dataset.row = String(i);
    el.dataset.key = n.key;
    el.setAttribute("role", "treeitem");
    el.setAttribute("aria-level", String(n.depth + 1));
    el.setAttribute("aria-setsize", String(siblings.length));
    el.setAttribute("aria-posinset", String(siblings.indexOf(n) + 1));
    el.style.transform = `translateY(${i * ROW_HEIGHT}px)`;
    el.style.paddingLeft = `${0.5 + n.depth * 1.1}rem`;
    if (i === this.active) el.classList.add("active");
    const twist = document.createElement("span");
    twist.className = "twist";
    twist.setAttribute("aria-hidden", "true");
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = n.label;
    const info = document.createElement("span");
    info.className = "info";
    if (n.tensor) {
      const selected = n.tensor.name === this.selected;
      el.setAttribute("aria-selected", String(selected));
      if (selected) el.classList.add("selected");
      info.textContent = `${n.tensor.dtype} ${shapeText(n.tensor.shape)}`;
      el.title = n.tensor.name;
    } else {
      const expanded = this.open.has(n.key);
      el.setAttribute("aria-expanded", String(expanded));
      twist.textContent = expanded ? "▾" : "▸";
      info.textContent = `${group(n.count)} · ${humanCount(n.parameters)}`;
      el.title = `${group(n.count)} tensors, ${group(n.parameters)} parameters`;
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

  private toggle(n: TreeNode, open: boolean): void {
    if (open) this.open.add(n.key);
    else this.open.delete(n.key);
    this.refresh();
  }

  private activate(n: TreeNode): void {
    if (n.tensor) {
      this.onPick(n);
    } else {
      this.toggle(n, !this.open.has(n.key));
    }
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
        if (n.tensor) break;
        if (!this.open.has(n.key)) this.toggle(n, true);
        else this.setActive(this.active + 1);
        break;
      case "ArrowLeft":
        if (!n.tensor && this.open.has(n.key)) this.toggle(n, false);
        else if (n.parent) this.setActive(this.rows.indexOf(n.parent));
        break;
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
