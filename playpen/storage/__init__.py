"""Shared storage: run directories, and the one way playpen writes under a folder there.

Anyone with write access to the shared storage may plant a symbolic or hard link inside a folder playpen writes
(default names are predictable), so nothing is written through a name playpen did not make itself:
- a folder playpen creates or enters is checked to be a real folder, never a link (`make_folder`);
- a new or replaced file is written to a temporary file and renamed over the name (`atomic_write_*`,
  `write_figure`, `publish`): a link there is replaced, never followed; a file other jobs read is therefore
  never seen cut off either;
- a file appended to, logged into or locked is opened with O_NOFOLLOW and must be a regular file with one link
  (`open_append`, `exclusive_folder`), and is never truncated;
- what a library writes by name (clemcore's tables and records, a model's files) is written into a new private
  folder (`private_folder`, `staging_folder`) and moved into place (`replace_folder`, `publish`); a private folder
  is held while it is written, so what a killed process left is told apart from a live one's (`remove_abandoned`).
A folder one process writes into (a training run, an eval results folder) is held with `exclusive_folder`, so a
second process on it stops instead of mixing files.

The parts: names.py (names, paths, `path_under`), folders.py, files.py, locks.py, runs.py (RunDir, the storage
root, checkpoints); everything is imported from here.
"""
from playpen.storage.files import (FULL, STALE_TEMP_S, append_jsonl, atomic_write_bytes, atomic_write_json,
                                   atomic_write_text, jsonl_lines, open_append, open_private_file, publish,
                                   read_json_or_none, read_jsonl, read_text_lossy, storage_full, write_figure,
                                   write_output)
from playpen.storage.folders import (check_own_output, close_to_others, current_umask, make_folder,
                                     make_private_folder, move_tree, remove_tree, replace_folder, share_as_umask,
                                     staging_folder)
from playpen.storage.locks import LOCK_FILE, exclusive_folder, private_folder, remove_abandoned
from playpen.storage.names import (LINK_ADVICE, NAME, NAME_MAX, NAME_RULE, UNSAFE_IN_PATH, Location, Name,
                                   absolute_location, check_location, check_name, inside, is_safe_name, not_a_link,
                                   path_under, slug, slug_joined)
from playpen.storage.runs import (CHECKPOINT_NAME, DEFAULT_STORAGE, STORAGE_ENV, RunDir, check_output_file,
                                  checkpoint_step, checkpoints_in, is_run_dir, new_run_id, resolve_storage_root,
                                  timestamp, unwritable)

__all__ = [
    "FULL", "STALE_TEMP_S", "append_jsonl", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
    "jsonl_lines", "open_append", "open_private_file", "publish", "read_json_or_none", "read_jsonl",
    "read_text_lossy", "storage_full", "write_figure", "write_output", "check_own_output", "close_to_others",
    "current_umask", "make_folder", "make_private_folder", "move_tree", "remove_tree", "replace_folder",
    "share_as_umask", "staging_folder", "LOCK_FILE", "exclusive_folder", "private_folder", "remove_abandoned",
    "LINK_ADVICE", "NAME", "NAME_MAX", "NAME_RULE", "UNSAFE_IN_PATH", "Location", "Name", "absolute_location",
    "check_location",
    "check_name", "inside", "is_safe_name", "not_a_link", "path_under", "slug", "slug_joined", "CHECKPOINT_NAME",
    "DEFAULT_STORAGE", "STORAGE_ENV", "RunDir", "check_output_file", "checkpoint_step", "checkpoints_in",
    "is_run_dir", "new_run_id", "resolve_storage_root", "timestamp", "unwritable",
]

