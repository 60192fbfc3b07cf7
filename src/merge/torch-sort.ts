/**
 * Which entries land in a range of positions when torch sorts a float32 tensor on the CPU with `stable=False`:
 * torch runs `std::sort` (libstdc++'s introsort: median-of-three pivots, unguarded partitions, a heapsort below a
 * depth limit, a final insertion sort) over (value, index) pairs, so entries of equal value end in an order that only
 * that algorithm gives. mergekit's TIES (`argsort(|δ|, descending=True)[:k]`) and breadcrumbs
 * (`sort(|δ|).indices[bottom:-top]`) keep entries by those positions, and bfloat16 or float16 task vectors hold many
 * equal magnitudes: to keep the same entries we replay the algorithm. Only the ranges that contain a boundary are
 * followed down (the others keep their entries on one side whatever their order), so the cost is that of a
 * quickselect, O(n), plus 8 bytes per entry while it runs. The steps are those of libstdc++'s `std::sort` (GCC's
 * bits/stl_algo.h and bits/stl_heap.h, as torch 2.x wheels are built). Pure.
 */

import { keepSortedKernel } from "./fast-kernels.js";

/** `comp(a, b)` of torch's key comparators: descending (`a > b`, NaN first) or ascending (`a < b`, NaN last). */
type Comp = (a: number, b: number) => boolean;

const descending: Comp = (a, b) => (Number.isNaN(a) && !Number.isNaN(b)) || a > b;
const ascending: Comp = (a, b) => (!Number.isNaN(a) && Number.isNaN(b)) || a < b;
// The same on magnitudes: a float32's |x| is exact, so comparing |a|, |b| of the values orders them as torch orders
// a tensor of their magnitudes.
const descendingMagnitude: Comp = (a, b) => descending(Math.abs(a), Math.abs(b));
const ascendingMagnitude: Comp = (a, b) => ascending(Math.abs(a), Math.abs(b));

const THRESHOLD = 16;

class PairSorter {
  constructor(
    readonly v: Float32Array,
    readonly ix: Int32Array,
    readonly comp: Comp,
  ) {}

  swap(a: number, b: number): void {
    const v = this.v;
    const ix = this.ix;
    const tv = v[a]!;
    v[a] = v[b]!;
    v[b] = tv;
    const ti = ix[a]!;
    ix[a] = ix[b]!;
    ix[b] = ti;
  }

  moveMedianToFirst(result: number, a: number, b: number, c: number): void {
    const { v, comp } = this;
    if (comp(v[a]!, v[b]!)) {
      if (comp(v[b]!, v[c]!)) this.swap(result, b);
      else if (comp(v[a]!, v[c]!)) this.swap(result, c);
      else this.swap(result, a);
    } else if (comp(v[a]!, v[c]!)) this.swap(result, a);
    else if (comp(v[b]!, v[c]!)) this.swap(result, c);
    else this.swap(result, b);
  }

  unguardedPartition(first: number, last: number, pivot: number): number {
    const { v, comp } = this;
    const p = () => v[pivot]!;
    for (;;) {
      while (comp(v[first]!, p())) first++;
      last--;
      while (comp(p(), v[last]!)) last--;
      if (!(first < last)) return first;
      this.swap(first, last);
      first++;
    }
  }

  /** Stable insertion sort of [first, last): what the final insertion sort does inside one range. */
  insertionSort(first: number, last: number): void {
    const { v, ix, comp } = this;
    for (let i = first + 1; i < last; i++) {
      const val = v[i]!;
      const id = ix[i]!;
      let j = i;
      while (j > first && comp(val, v[j - 1]!)) {
        v[j] = v[j - 1]!;
        ix[j] = ix[j - 1]!;
        j--;
      }
      v[j] = val;
      ix[j] = id;
    }
  }

  // Heapsort of [first, last): std::make_heap then std::sort_heap.
  pushHeap(first: number, hole: number, top: number, val: number, id: number): void {
    const { v, ix, comp } = this;
    let parent = Math.trunc((hole - 1) / 2);
    while (hole > top && comp(v[first + parent]!, val)) {
      v[first + hole] = v[first + parent]!;
      ix[first + hole] = ix[first + parent]!;
      hole = parent;
      parent = Math.trunc((hole - 1) / 2);
    }
    v[first + hole] = val;
    ix[first + hole] = id;
  }

  adjustHeap(first: number, hole: number, len: number, val: number, id: number): void {
    const { v, ix, comp } = this;
    const top = hole;
    let child = hole;
    while (child < Math.trunc((len - 1) / 2)) {
      child = 2 * (child + 1);
      if (comp(v[first + child]!, v[first + child - 1]!)) child--;
      v[first + hole] = v[first + child]!;
      ix[first + hole] = ix[first + child]!;
      hole = child;
    }
    if ((len & 1) === 0 && child === Math.trunc((len - 2) / 2)) {
      child = 2 * (child + 1);
      v[first + hole] = v[first + child - 1]!;
      ix[first + hole] = ix[first + child - 1]!;
      hole = child - 1;
    }
    this.pushHeap(first, hole, top, val, id);
  }

  heapSort(first: number, last: number): void {
    const { v, ix } = this;
    const len = last - first;
    if (len >= 2) {
      for (let parent = Math.trunc((len - 2) / 2); ; parent--) {
        this.adjustHeap(first, parent, len, v[first + parent]!, ix[first + parent]!);
        if (parent === 0) break;
      }
    }
    for (let end = last; end - first > 1; ) {
      end--;
      const val = v[end]!;
      const id = ix[end]!;
      v[end] = v[first]!;
      ix[end] = ix[first]!;
      this.adjustHeap(first, 0, end - first, val, id);
    }
  }

  /** The introsort loop, followed only into ranges that a boundary cuts; those are sorted to the end. */
  introsort(first: number, last: number, depth: number, cuts: (first: number, last: number) => boolean): void {
    while (last - first > THRESHOLD) {
      if (!cuts(first, last)) return;
      if (depth === 0) {
        this.heapSort(first, last);
        return;
      }
      depth--;
      const mid = first + Math.trunc((last - first) / 2);
      this.moveMedianToFirst(first, first + 1, mid, last - 1);
      const cut = this.unguardedPartition(first + 1, last, first);
      this.introsort(cut, last, depth, cuts);
      last = cut;
    }
    if (cuts(first, last)) this.insertionSort(first, last);
  }
}

/**
 * Keep, in place, the entries of `values` whose position after torch's unstable sort of their magnitudes
 * (`descending` or not) is in [from, to); zero the others. Without a copy of the magnitudes or a mask: the values are sorted with their indices (the comparisons read only
 * magnitudes, so the moves are torch's), the ones outside the range zeroed, and the permutation undone in place by
 * following its cycles. Memory: 4 bytes per entry (the indices) while it runs.
 */
export function keepSortedMagnitudes(values: Float32Array, descendingOrder: boolean, from: number, to: number): void {
  const n = values.length;
  if (from >= to) {
    values.fill(0);
    return;
  }
  const fast = keepSortedKernel();
  if (fast !== null) {
    fast(values, descendingOrder, from, to);
    return;
  }
  const v = values;
  const ix = new Int32Array(n);
  for (let i = 0; i < n; i++) ix[i] = i;
  const sorter = new PairSorter(v, ix, descendingOrder ? descendingMagnitude : ascendingMagnitude);
  const boundaries = [from, to].filter((b) => b > 0 && b < n);
  const cuts = (first: number, last: number) => boundaries.some((b) => first < b && b < last);
  if (n > 1) sorter.introsort(0, n, 2 * Math.floor(Math.log2(n)), cuts);
  v.fill(0, 0, Math.max(0, from));
  v.fill(0, Math.min(n, to));
  // Scatter v[p] to index ix[p] along each cycle of the permutation; a visited position's index is stored as ~index.
  for (let start = 0; start < n; start++) {
    let dest = ix[start]!;
    if (dest < 0) continue;
    let carried = v[start]!;
    ix[start] = ~dest;
    while (dest !== start) {
      const next = ix[dest]!;
      const displaced = v[dest]!;
      ix[dest] = ~next;
      v[dest] = carried;
      carried = displaced;
      dest = next;
    }
    v[start] = carried;
  }
}

/** torch's full unstable argsort of `values` (for tests: every position replayed). */
export function torchArgsort(values: Float32Array, descendingOrder: boolean): Int32Array {
  const n = values.length;
  const v = values.slice();
  const ix = new Int32Array(n);
  for (let i = 0; i < n; i++) ix[i] = i;
  const sorter = new PairSorter(v, ix, descendingOrder ? descending : ascending);
  if (n > 1) {
    sorter.introsort(0, n, 2 * Math.floor(Math.log2(n)), () => true);
    // The final insertion sort over everything: the ranges are in order already, so it only sorts inside them.
    sorter.insertionSort(0, n);
  }
  return ix;
}
