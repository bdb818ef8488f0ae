/* The folder tree of the files pane (issue 37): every folder of the user's root, opened level by
 * level (`GET /v1/files` of a folder, its folders only), each a button that shows that folder in
 * the list, and the folders tasks work in marked with their task count (`GET /v1/folders`). A
 * disclosure list (buttons with aria-expanded), not an ARIA tree: Tab and Enter are all it needs. */

import { api, enc } from "./api.js";
import { $, el, itemsOf } from "./dom.js";
import { t } from "./i18n.js";
import { state } from "./state.js";

let taskFolders = new Map(); // working_dir -> task count
let openFolder = () => {};
const expanded = new Set([""]); // folders shown open, kept across reloads of the tree

async function childrenOf(path) {
  const out = await api("/v1/files?path=" + enc(path));
  return itemsOf(out, "entries").filter((e) => e.type === "dir" || e.type === "directory");
}

function node(path, name) {
  const count = taskFolders.get(path) || 0;
  const open = expanded.has(path);
  const list = el("ul", { class: "tree-children" });
  const toggle = el("button", { type: "button", class: "tree-toggle", "aria-expanded": String(open),
    "aria-label": t(open ? "tree.collapse" : "tree.expand", { name }), "data-testid": "tree-toggle" }, open ? "▾" : "▸");
  const current = state.filesPath === path;
  const item = el("li", { class: "tree-node", "data-testid": "tree-node", "data-path": path },
    el("div", { class: "tree-row" }, toggle,
      el("button", { type: "button", class: "link-button tree-name", "aria-current": current ? "true" : null,
        "data-testid": "tree-open", onclick: () => openFolder(path) }, name),
      count ? el("span", { class: "tree-badge muted", "data-testid": "tree-tasks" }, t("tree.tasks", { n: count })) : null),
    list);
  toggle.addEventListener("click", async () => {
    if (expanded.has(path)) {
      expanded.delete(path);
      list.replaceChildren();
    } else {
      expanded.add(path);
      await fill(list, path);
    }
    const now = expanded.has(path);
    toggle.setAttribute("aria-expanded", String(now));
    toggle.setAttribute("aria-label", t(now ? "tree.collapse" : "tree.expand", { name }));
    toggle.textContent = now ? "▾" : "▸";
  });
  if (open) fill(list, path);
  return item;
}

async function fill(list, path) {
  let dirs;
  try {
    dirs = await childrenOf(path);
  } catch (err) {
    list.replaceChildren(el("li", { class: "error" }, t("files.load_failed", { msg: err.message })));
    return;
  }
  list.replaceChildren(...dirs.map((d) => node(d.path || (path ? path + "/" + d.name : d.name), d.name)));
  if (!dirs.length) list.append(el("li", { class: "muted small-text tree-empty" }, t("tree.no_folders")));
}

/** Draw the tree again (it is open): after a folder was renamed, deleted or made, or another opened. */
export async function reloadTree() {
  const box = $("folder-tree");
  if (!box || !box.open) return;
  try {
    const out = await api("/v1/folders?page_size=100");
    taskFolders = new Map(itemsOf(out).map((f) => [f.working_dir, f.task_count]));
  } catch (_) {
    taskFolders = new Map();
  }
  const root = el("ul", { class: "tree", "data-testid": "folder-tree-list" });
  root.append(node("", "~"));
  $("folder-tree-body").replaceChildren(root);
}

/** Mark the folder the list shows (no reload of the tree). */
export function markCurrentFolder(path) {
  for (const node of document.querySelectorAll("[data-testid=tree-node]")) {
    const button = node.querySelector(":scope > .tree-row > .tree-name");
    if (node.dataset.path === path) button.setAttribute("aria-current", "true"); else button.removeAttribute("aria-current");
  }
}

export function setupFolderTree(open) {
  openFolder = open;
  $("folder-tree").addEventListener("toggle", () => reloadTree());
}
