"""collbench_collect: bring a launch's log files from a node into the run directory.

`fetch` in a loop runs a checksum module on the node for every file; a launch writes one log
per collective, and only one host of a launch across hosts holds them. This lists the
directory once (the `find` module) and copies what it found over the connection's own file
transfer, with no module run per file. Files land 0600 in directories made 0700
(collbench_py/rundir/private_files.py).

    - name: Collect its logs
      collbench_collect:
        src: /var/tmp/collbench/runs/<run_id>/node1/pair-node1--node2
        names: [all_reduce.log, all_gather.log]
        dest: "{{ run_dir }}/inter/pairs/node1--node2"

Returns `files`, the names brought back. A name that is not there is not an error: the launch
may have ended before writing it, which the launch's record says.
"""

from __future__ import annotations

import posixpath
import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.rundir.private_files import receive_private  # noqa: E402


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("src", "names", "dest"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        src, names, dest = (self._task.args.get(key) for key in ("src", "names", "dest"))
        if not isinstance(src, str) or not isinstance(dest, str) or not isinstance(names, list):
            raise AnsibleActionFail("collbench_collect needs `src`, `dest` (directories), `names` (a list)")
        wanted = [str(name) for name in names if name and "/" not in str(name)]
        result.update(changed=False, files=[])
        if not wanted or self._task.check_mode:
            return result
        listed = self._execute_module(
            module_name="ansible.legacy.find",
            module_args={"paths": [src], "patterns": wanted, "file_type": "file"},
            task_vars=task_vars,
        )
        if listed.get("failed"):
            return {**result, "failed": True, "msg": f"cannot list {src}: {listed.get('msg', '')}"}
        # The paths find reports, not `src` joined with a name: they have `~` and variables expanded.
        found = {posixpath.basename(f["path"]): f["path"] for f in listed.get("files", [])}
        for name, remote in sorted(found.items()):
            try:
                receive_private(Path(dest) / name, lambda local, r=remote: self._fetch(r, local))
            except (AnsibleError, OSError) as exc:
                return {**result, "failed": True, "msg": f"cannot bring back {remote}: {exc}"}
            result["files"].append(name)
        result["changed"] = bool(result["files"])
        return result

    def _fetch(self, remote: str, local: str) -> None:
        self._connection.fetch_file(remote, local)
