/* Rename and delete in the files pane (issue 37), through the files API (`POST /v1/files/rename`,
 * `POST /v1/files/delete`: the gateway's one safe file module underneath). Both ask first in the
 * page's own dialog (ask.js): the new name with the old one filled in, a delete confirmed in red.
 * A refusal (name taken, folder not empty, a task's folder) is said in the page's language from
 * its code (api.js); renaming a task's folder moves the task with it, so the tasks follow. */

import { api } from "./api.js";
import { ask, confirmDanger } from "./ask.js";
import { t } from "./i18n.js";
import { emit } from "./state.js";

const BAD_NAME = /[/\\\0]|^\.|^\s|\s$/;

/** Ask for a new name and rename; true when it was renamed. `say(text)` reports a refusal. */
export async function renameEntry(path, name, dir, say) {
  const values = await ask({
    title: t(dir ? "files.rename_folder_title" : "files.rename_title", { name }),
    fields: [{ name: "name", label: t("files.new_name"), value: name }],
    confirm: t("files.rename"),
    check: ({ name: next }) => !next.trim() ? t("files.name_empty")
      : BAD_NAME.test(next) ? t("files.name_bad") : next === name ? t("files.name_same") : "",
  });
  if (!values) return false;
  try {
    const out = await api("/v1/files/rename", { method: "POST", json: { path, new_name: values.name } });
    say(t("files.renamed", { old: name, name: values.name }));
    if (out.tasks_moved) emit("tasks-moved");
    return true;
  } catch (err) {
    say(t("files.rename_failed", { msg: err.message }), "error");
    return false;
  }
}

/** Confirm and delete a file or an empty folder; true when it was deleted. */
export async function deleteEntry(path, name, dir, say) {
  const sure = await confirmDanger(t(dir ? "files.delete_folder_title" : "files.delete_title", { name }),
    t(dir ? "files.delete_folder_message" : "files.delete_message", { name }), t("files.delete"));
  if (!sure) return false;
  try {
    await api("/v1/files/delete", { method: "POST", json: { path } });
    say(t("files.deleted", { name }));
    return true;
  } catch (err) {
    say(t("files.delete_failed", { msg: err.message }), "error");
    return false;
  }
}
