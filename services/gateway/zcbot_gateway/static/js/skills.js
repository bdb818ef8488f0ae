/* The skills list: built-in and your own; a skill of yours that replaces a built-in is marked. */

import { api } from "./api.js";
import { $, el, itemsOf } from "./dom.js";
import { t } from "./i18n.js";

export async function loadSkills() {
  const list = $("skill-list");
  const error = $("skills-error");
  let body;
  try {
    body = await api("/v1/skills");
    error.textContent = "";
  } catch (err) {
    list.replaceChildren();
    error.textContent = t("skills.load_failed", { msg: err.message });
    return;
  }
  const items = itemsOf(body, "skills");
  list.replaceChildren();
  if (!items.length) list.append(el("li", { class: "muted empty", "data-testid": "skills-empty" }, t("skills.empty")));
  for (const s of items) {
    const tags = [el("span", { class: "badge" }, s.source === "user" ? t("skills.mine") : t("skills.builtin"))];
    if (s.overrides) tags.push(el("span", { class: "badge warn", "data-testid": "skill-override" }, t("skills.overrides")));
    list.append(el("li", { class: "skill", "data-testid": "skill-item", "data-name": s.name, "data-source": s.source },
      el("div", { class: "row" }, el("span", { class: "skill-name" }, s.name), ...tags),
      el("div", { class: "muted small-text" }, s.description || "")));
  }
  for (const e of body.load_errors || []) {
    list.append(el("li", { class: "notice error small-text", "data-testid": "skill-error" },
      t("skills.load_error", { path: e.path, msg: e.error })));
  }
}
